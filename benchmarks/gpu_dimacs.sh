#!/usr/bin/env bash
# One device call: build the CSR (and grid) extensions, run the CUDA CSR tests, then the BVZ benchmark.
# Usage (on the GPU machine, repo root; see DEVELOPERS.md for the pip/PYTHONPATH preamble):
#   bash benchmarks/gpu_dimacs.sh [SEQUENCES] [BUDGET_SECONDS]
set -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
SEQS=${1:-tsukuba,tsukuba4x}
BUDGET=${2:-200}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
python3 -m torchcut.build torchcut_csr torchcut_grid > "$OUT/build.log" 2>&1; echo "build rc=$? in $(( $(date +%s) - t0 )) s"
tail -3 "$OUT/build.log"
python3 -m pytest -m cuda tests/test_cuda_csr.py -q -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -15
python3 benchmarks/dimacs.py --out "$OUT" --sequences "$SEQS" --budget "$BUDGET" --repeat 3 --dimacs-io 2>&1 | tee "$OUT/bench.log" | grep -v "^| " | tail -60
echo "=== tables"; grep -A8 "Per sequence" "$OUT/dimacs.md"
