#!/bin/bash
# The 4 x 1024^2 refine's timeline on the GPU machine (benchmarks/multilabel_profile.py, sequential schedule,
# no chrome trace): per-kernel CUDA totals in ${OUT:-/tmp/out}/prof/refine_sequential_cuda_time.txt.
DEST="${OUT:-/tmp/out}/prof"
mkdir -p "$DEST"
timeout ${BENCH_TIMEOUT:-150} python3 benchmarks/multilabel_profile.py --out "$DEST" --cases ${CASES:-refine} \
  --schedules ${SCHEDULES:-sequential} --no-trace --repeat 3 2>&1 | tail -3
head -40 "$DEST"/*_cuda_time.txt | cut -c1-200
