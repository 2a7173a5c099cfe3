#!/usr/bin/env bash
# One device call: build the CSR (and grid) extensions, run the CUDA CSR tests, a CLI smoke test, then
# the BVZ benchmark (and general graphs).
# Usage (on the GPU machine, repo root; see DEVELOPERS.md for the pip/PYTHONPATH preamble):
#   bash benchmarks/gpu_dimacs.sh [SEQUENCES] [BUDGET_SECONDS] [GENERAL]
set -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
SEQS=${1:-tsukuba,tsukuba4x}
BUDGET=${2:-200}
GENERAL=${3:-}
REPEAT=${REPEAT:-3}
SWEEP=${SWEEP---csr-sweep}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
python3 -m torchcut.build torchcut_csr torchcut_grid > "$OUT/build.log" 2>&1; echo "build rc=$? in $(( $(date +%s) - t0 )) s"
python3 -m pytest -m cuda tests/test_cuda_csr.py -q -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -5
# CLI smoke test on the GPU: two BVZ-style Tsukuba instances, solved and verified from the files
T=/tmp/bvz; L=$TORCHCUT_DATA/middlebury/tsukuba
python3 -m torchcut.cli bvz --left $L/scene1.row3.col3.ppm --right $L/scene1.row3.col4.ppm --out $T --disparities 2 --name tsu > /dev/null
python3 -m torchcut.cli maxflow $T/tsu1.max --device cuda --verify --cut $T/cut.txt 2>&1 | tee "$OUT/cli.log"
echo "expected: $(grep '^s' $T/tsu1.sol); cut lines: $(wc -l < $T/cut.txt)" | tee -a "$OUT/cli.log"
python3 benchmarks/dimacs.py --out "$OUT" --sequences "$SEQS" --budget "$BUDGET" --repeat "$REPEAT" $SWEEP --general "$GENERAL" 2>&1 \
  | tee "$OUT/bench.log" | grep -v "^| " | tail -70
echo "=== tables"; grep -A12 "Per sequence" "$OUT/dimacs.md"
