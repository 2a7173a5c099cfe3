#!/bin/bash
# Issue 12 (grabcut) on the GPU machine, about 120 s (both protocols need ~100 s of benchmark): the CUDA tests of tests/test_grabcut.py, then
# benchmarks/grabcut_quality.py on CUDA (trimap-20 and box protocols, all 50 images, torchcut single
# calls interleaved with cv2.grabCut, plus one batched call of 16 images). Run from the repo root after
#   export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
# Logs and tables in ${OUT:-/tmp/out}/issue12/.
set -o pipefail
DEST=${OUT:-/tmp/out}/issue12
mkdir -p "$DEST"
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$DEST/gpu.txt"
timeout 45 python3 -m pytest -q -p no:cacheprovider -rs -m cuda tests/test_grabcut.py 2>&1 | tee "$DEST/pytest-cuda.log" | tail -8
echo "tests: $(( $(date +%s) - t0 )) s"
# cv2 gets unknown pixels as GC_PR_FGD (the better of its two inits on this set on the CPU run).
timeout ${BENCH_TIMEOUT:-200} python3 benchmarks/grabcut_quality.py --out "$DEST" --device cuda --radii 20 \
    --cv2-unknown fg --compare-cold 2>&1 | tee "$DEST/bench.log" | tail -8
echo "total: $(( $(date +%s) - t0 )) s"
ls "$DEST"
