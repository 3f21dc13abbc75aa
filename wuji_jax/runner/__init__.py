"""The dataset runner's parts, which :func:`wuji_jax.batch.solve_dataset` (one machine) and
:func:`wuji_jax.ray_cluster.solve_dataset_ray` (a Ray cluster) both drive:

* :mod:`~wuji_jax.runner.kernel`: the jitted solver on fixed batch shapes, compiled once per configuration;
* :mod:`~wuji_jax.runner.reading`: frame counts before the start, a file's chunks, a chunk read ahead;
* :mod:`~wuji_jax.runner.store`: a run's identity, its part files and manifest, the output lock;
* :mod:`~wuji_jax.runner.table`: the output table (streamed or assembled) and its plot.
"""
