#!/bin/bash
# Final verification on the GPU machine, in one call: build both extensions, every CUDA test of the
# suite, the grid benchmark (library energy, PyMaxflow in 2 worker processes), and the BVZ Tsukuba
# sequence; HARD=1: also the hard-energy family (grid.py --family hard, PyMaxflow and pseudoflow);
# NO_DIMACS=1: without the BVZ sequence; NO_PYTEST=1: without the tests (already run on the same code).
# Logs and tables in $OUT/results.tgz (markdown tables also beside it).
FINAL=${OUT:-/tmp/out}
OUT=/tmp/final-results   # everything lands here, then one archive goes back (the tool returns <= 8 files)
. benchmarks/gpu_setup.sh
if [ -z "$NO_PYTEST" ]; then
  timeout ${PYTEST_TIMEOUT:-200} python3 -m pytest -m cuda -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest-cuda.log" | tail -15
  echo "tests: $(( $(date +%s) - t0 )) s"; pack
fi
timeout ${BENCH_TIMEOUT:-240} python3 benchmarks/grid.py --out "$OUT" --workers ${WORKERS:-3} ${GRID_ARGS:---energy torchcut} 2>&1 | tee "$OUT/bench-grid.log" | tail -22
echo "grid bench: $(( $(date +%s) - t0 )) s"; pack
if [ -n "$HARD" ]; then
  mkdir -p "$OUT/hard"
  timeout ${HARD_TIMEOUT:-240} python3 benchmarks/grid.py --family hard --out "$OUT/hard" --workers 4 --pymaxflow-budget 20 2>&1 | tee "$OUT/bench-hard.log" | tail -20
  echo "hard bench: $(( $(date +%s) - t0 )) s"; pack
fi
[ -z "$NO_DIMACS" ] && timeout ${DIMACS_TIMEOUT:-90} python3 benchmarks/dimacs.py --out "$OUT" --sequences tsukuba --budget 60 2>&1 | tee "$OUT/bench-dimacs.log" | tail -8
echo "total: $(( $(date +%s) - t0 )) s"
pack && cp "$OUT"/*.md "$FINAL"/ 2>/dev/null; ls "$OUT"
