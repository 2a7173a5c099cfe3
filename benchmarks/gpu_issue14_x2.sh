#!/bin/bash
# Issue 14 on nvidia-h200-x2, one call: build, then torchcut.distributed.segment over the two GPUs
# (torchrun, NCCL, NVLink multicast off) on 768^3 against the whole volume on one GPU, then 1536^3
# over the two (too big for one). Logs and JSON come back as $OUT/results.tgz.
set -o pipefail
FINAL=${OUT:-/tmp/out}
export OUT=/tmp/x2-results
mkdir -p "$OUT" "$FINAL"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
t0=$(date +%s)
python3 -m torchcut.build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
pack() { tar czf "$FINAL/results.tgz" -C "$OUT" . ; }
DIST_TIMEOUT=${T768:-200} bash benchmarks/gpu_issue14.sh --gpus 2 768; pack
echo "768: $(( $(date +%s) - t0 )) s"
[ -n "$ONLY768" ] || { NO_SINGLE=1 DIST_TIMEOUT=${T1536:-260} bash benchmarks/gpu_issue14.sh --gpus 2 1536; pack; }
echo "total: $(( $(date +%s) - t0 )) s"
