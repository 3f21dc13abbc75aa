"""Floor 3: joint angles → robot-hand commands. :mod:`.inspire`: the Inspire RH56 hand."""
