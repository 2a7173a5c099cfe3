#!/bin/bash
# Issue 13 on the GPU machine (about 2 minutes): the CUDA tests of torchcut.compat.pymaxflow, then
# benchmarks/compat.py with PyMaxflow, torchcut on the CPU and torchcut on the GPU side by side
# (the 64x256x256 volume, float and int graphs; 1024^2 4-connected; PyMaxflow's a2.png example).
# Run from the repo root after
#   export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
# Logs and tables: ${OUT:-/tmp/out}/issue13/
set -o pipefail
DEST="${OUT:-/tmp/out}/issue13"
mkdir -p "$DEST"
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$DEST/gpu.txt"
timeout 60 python3 -m pytest -m cuda -q -p no:cacheprovider -rs tests/test_compat_pymaxflow.py 2>&1 \
  | tee "$DEST/pytest-cuda.log" | tail -8
echo "tests: $(( $(date +%s) - t0 )) s"
timeout 110 python3 benchmarks/compat.py --out "$DEST" --devices cpu,cuda --cases vol,2d4,a2 --repeat 3 --tag h100 2>&1 \
  | tee "$DEST/bench.log" | tail -12
echo "total: $(( $(date +%s) - t0 )) s" | tee -a "$DEST/bench.log"
