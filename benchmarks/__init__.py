"""torchcut's product benchmarks: one runner (``python -m benchmarks``), cases, peers and workers.

See :mod:`benchmarks.run` for the suites and the regression guard (``--compare``, against the accepted
states in ``benchmarks/references.txt``), :mod:`benchmarks.e2e` for the public calls end to end, and
:mod:`benchmarks.startup` for the start-up times.
"""
