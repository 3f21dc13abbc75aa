"""Floor 0: how the programs run — the one program policy (:mod:`.programs`), JAX's persistent
compilation cache (:mod:`.cache`), the CPU devices (:mod:`.devices`). Nothing here knows the hand."""
