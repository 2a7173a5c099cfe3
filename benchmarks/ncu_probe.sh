#!/bin/bash
# One GPU call: Nsight Compute's warp-stall sampling per SASS instruction of one late BFS worklist
# launch and one late push launch of a hard case (where the solve is bound by dependent tile visits),
# so that the time of a visit can be placed inside the kernel. Needs ncu (Firecracker machines).
# CASE (default hard-thin-1024-4), BFS_SKIP / PUSH_SKIP (launches of that kernel skipped first).
# Writes $OUT/ncu_{bfs,push}.{ncu-rep,details.txt,sass.csv}.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
CASE=${CASE:-hard-thin-1024-4}
cat > /tmp/ncu_solve.py <<'PY'
import sys
sys.path.insert(0, "benchmarks")
import torch, torchcut, tune_grid as T
g = T.graph_of(T.cases()[sys.argv[1]])
r = torchcut.maxflow(g)
torch.cuda.synchronize()
print({k: r.stats[k] for k in ("global_relabels", "push_launches", "bfs_depth", "bfs_visits")})
PY
for k in bfs push; do
  if [ $k = bfs ]; then pat=regex:bfs_queue_kernel; skip=${BFS_SKIP:-25}; else pat=regex:push_kernel; skip=${PUSH_SKIP:-400}; fi
  timeout 200 ncu --clock-control none -k $pat --launch-skip $skip --launch-count 1 --section SourceCounters \
    --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats -f -o "$OUT/ncu_$k" \
    python3 /tmp/ncu_solve.py $CASE 2>&1 | tail -5
  ncu -i "$OUT/ncu_$k.ncu-rep" --page details > "$OUT/ncu_$k.details.txt" 2>&1
  ncu -i "$OUT/ncu_$k.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_$k.sass.csv" 2>&1
  grep -i -A40 "Warp State" "$OUT/ncu_$k.details.txt" | head -45
done
