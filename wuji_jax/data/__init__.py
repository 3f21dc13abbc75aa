"""Floor 1: data in and out — :class:`~.recording.LandmarkRecording`, the dataset readers and writers
(:mod:`.io`), MediaPipe extraction (:mod:`.video`), the one rule for every file written
(:mod:`.outputs`). Readers never import the solver."""
