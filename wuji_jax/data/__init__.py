"""Floor 1: data in and out — :class:`~.recording.LandmarkRecording`, the dataset loaders and writers
(:mod:`.io`) over one registry of file formats (:mod:`.formats`) held to one set of safety limits
(:mod:`.limits`), MediaPipe extraction (:mod:`.video`), the one rule for every file written
(:mod:`.outputs`). Readers never import the solver."""
