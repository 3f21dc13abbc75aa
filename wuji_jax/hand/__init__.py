"""Floor 1: the hand — URDF → :class:`~.model.HandModel` (:mod:`.model`), rotations written once
(:mod:`.geometry`), the serial chains and the one forward kinematics with Jacobian (:mod:`.chains`,
:mod:`.kinematics`), MediaPipe landmarks (:mod:`.landmarks`), named poses (:mod:`.poses`)."""
