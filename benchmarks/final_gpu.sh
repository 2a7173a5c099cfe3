#!/bin/bash
# Final verification on the GPU machine, in one call: build both extensions, every CUDA test of the
# suite, the grid benchmark (library energy, PyMaxflow in 2 worker processes), and the BVZ Tsukuba
# sequence; HARD=1: also the hard-energy family (grid.py --family hard, PyMaxflow and pseudoflow);
# NO_DIMACS=1: without the BVZ sequence.
# Logs and tables in $OUT/results.tgz (markdown tables also beside it).
set -o pipefail
FINAL=${OUT:-/tmp/out}
OUT=/tmp/final-results   # everything lands here, then one archive goes back (the tool returns <= 8 files)
mkdir -p "$OUT" "$FINAL"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
t0=$(date +%s)
python3 -m torchcut.build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
timeout ${PYTEST_TIMEOUT:-200} python3 -m pytest -m cuda -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest-cuda.log" | tail -15
echo "tests: $(( $(date +%s) - t0 )) s"; tar czf "$FINAL/results.tgz" -C "$OUT" .
timeout ${BENCH_TIMEOUT:-240} python3 benchmarks/grid.py --out "$OUT" --workers ${WORKERS:-3} ${GRID_ARGS:---energy torchcut} 2>&1 | tee "$OUT/bench-grid.log" | tail -22
echo "grid bench: $(( $(date +%s) - t0 )) s"; tar czf "$FINAL/results.tgz" -C "$OUT" .
if [ -n "$HARD" ]; then
  mkdir -p "$OUT/hard"
  timeout ${HARD_TIMEOUT:-240} python3 benchmarks/grid.py --family hard --out "$OUT/hard" --workers 4 --pymaxflow-budget 20 2>&1 | tee "$OUT/bench-hard.log" | tail -20
  echo "hard bench: $(( $(date +%s) - t0 )) s"; tar czf "$FINAL/results.tgz" -C "$OUT" .
fi
[ -z "$NO_DIMACS" ] && timeout ${DIMACS_TIMEOUT:-90} python3 benchmarks/dimacs.py --out "$OUT" --sequences tsukuba --budget 60 2>&1 | tee "$OUT/bench-dimacs.log" | tail -8
echo "total: $(( $(date +%s) - t0 )) s"
tar czf "$FINAL/results.tgz" -C "$OUT" . && cp "$OUT"/*.md "$FINAL"/ 2>/dev/null; ls "$OUT"
