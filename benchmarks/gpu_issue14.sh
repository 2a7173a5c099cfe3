#!/bin/bash
# Issue 14 on the GPU machine. Run from the repo root after
#   export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
# (extensions built, PyMaxflow installed). Logs and tables go to ${OUT:-/tmp/out}/issue14/.
#
#   bash benchmarks/gpu_issue14.sh                 # one GPU, ~150 s: the CUDA tests of issue 14 and
#                                                  # segment() memory per stage at 256^3, 512^3, 1024^3
#   bash benchmarks/gpu_issue14.sh --gpus 2 [N]    # two GPUs of one host (torchrun, NCCL): N^3 (default
#                                                  # 768) split over 2 ranks vs the whole on one GPU
#   NO_SINGLE=1 bash benchmarks/gpu_issue14.sh --gpus 2 1536   # too big for one GPU: skip the comparison
set -o pipefail
DEST=${OUT:-/tmp/out}/issue14
mkdir -p "$DEST"
export NCCL_NVLS_ENABLE=0  # NVLink multicast off (device notes)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$DEST/gpus.txt"
t0=$(date +%s)
if [ "$1" = "--gpus" ]; then
  N=${3:-768}
  timeout ${DIST_TIMEOUT:-550} torchrun --standalone --nproc_per_node="$2" benchmarks/memory_issue14.py \
    --distributed "$N" --out "$DEST" ${NO_SINGLE:+--no-single} 2>&1 | tee "$DEST/distributed_${N}_$2gpu.log" | tail -20
  echo "distributed: $(( $(date +%s) - t0 )) s"
  exit
fi
timeout ${PYTEST_TIMEOUT:-60} python3 -m pytest -m cuda -q -p no:cacheprovider -rs \
  tests/test_memory.py tests/test_distributed.py 2>&1 | tee "$DEST/pytest-cuda.log" | tail -12
echo "tests: $(( $(date +%s) - t0 )) s"
timeout ${MEM_TIMEOUT:-90} python3 benchmarks/memory_issue14.py --device cuda --sizes ${SIZES:-256 512 1024} \
  --out "$DEST" 2>&1 | tee "$DEST/memory.log" | tail -8
echo "total: $(( $(date +%s) - t0 )) s"
ls "$DEST"
