#!/bin/bash
# Issue 14 on nvidia-h200-x2, one call: build, then torchcut.distributed.segment over the two GPUs
# (torchrun, NCCL, NVLink multicast off) on 768^3 against the whole volume on one GPU, then 1536^3
# over the two (too big for one). Logs and JSON come back as $OUT/results.tgz.
FINAL=${OUT:-/tmp/out}
export OUT=/tmp/x2-results
. benchmarks/gpu_setup.sh
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
DIST_TIMEOUT=${T768:-200} bash benchmarks/gpu_issue14.sh --gpus 2 768; pack
echo "768: $(( $(date +%s) - t0 )) s"
[ -n "$ONLY768" ] || { NO_SINGLE=1 DIST_TIMEOUT=${T1536:-260} bash benchmarks/gpu_issue14.sh --gpus 2 1536; pack; }
echo "total: $(( $(date +%s) - t0 )) s"
