#!/bin/bash
# A/B studies (benchmarks/ab.py) on the GPU machine: STUDIES="multilabel item_skip" (default multilabel).
# Run from the repo root after
#   export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
# Tables in ${OUT:-/tmp/out}/ab/.
DEST="${OUT:-/tmp/out}/ab"
mkdir -p "$DEST"
for s in ${STUDIES:-multilabel}; do
  timeout ${BENCH_TIMEOUT:-200} python3 benchmarks/ab.py --study "$s" --out "$DEST" --repeat ${REPEAT:-5} 2>&1 | tee "$DEST/$s.log"
done
