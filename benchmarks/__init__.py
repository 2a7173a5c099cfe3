"""torchcut's product benchmarks: one runner (``python -m benchmarks``), cases, peers and workers.

See :mod:`benchmarks.run` for the suites and the regression guard (``--compare REF``), and
:mod:`benchmarks.startup` for the start-up times.
"""
