#!/bin/bash
# The item_skip A/B (benchmarks/item_skip.py) on the GPU machine, about 2 minutes. Run from the repo root after
#   export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
# Tables in ${OUT:-/tmp/out}/item_skip/.
DEST="${OUT:-/tmp/out}/item_skip"
mkdir -p "$DEST"
timeout ${BENCH_TIMEOUT:-200} python3 benchmarks/item_skip.py --out "$DEST" --repeat ${REPEAT:-5} 2>&1 | tee "$DEST/bench.log"
