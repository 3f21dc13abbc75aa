"""Floor 4: a dataset solved into one resumable table — :func:`wuji_jax.pipeline.batch.solve_dataset` (one
machine: the local executor) and :func:`wuji_jax.pipeline.ray_cluster.solve_dataset_ray` (a Ray cluster: the Ray
executor), and the parts both drive:

* :mod:`~wuji_jax.pipeline.job`: the job both executors run: its spec, identity, plan and the assembly of its outputs;
* :mod:`~wuji_jax.pipeline.kernel`: the jitted solver on fixed batch shapes, compiled once per configuration;
* :mod:`~wuji_jax.pipeline.reading`: frame counts before the start, a file's chunks, a chunk read ahead;
* :mod:`~wuji_jax.pipeline.store`: a run's identity, its part files and manifest, the output lock;
* :mod:`~wuji_jax.pipeline.table`: the output table (streamed or assembled) and its plot;
* :mod:`~wuji_jax.pipeline.interrupts`: Ctrl-C taken where the run can stop cleanly;
* :mod:`~wuji_jax.pipeline.live` (and :mod:`~wuji_jax.pipeline.live_outputs`): a camera or stream to commands,
  frame by frame.
"""
