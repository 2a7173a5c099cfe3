#!/bin/bash
# Issue 11 (multi-label energies) on the GPU machine, about 150 s plus up to 150 s of profile: the CUDA tests of
# tests/test_multilabel.py, the benchmark's CUDA cases beside GCO and aexpansion_grid (same run), and
# the Tsukuba example (GCO is left out when gco-wrapper is not installed there). Run from the repo root after
#   export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
# Logs and tables in ${OUT:-/tmp/out}/issue11/.
set -o pipefail
DEST="${OUT:-/tmp/out}/issue11"
mkdir -p "$DEST"
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$DEST/gpu.txt"
timeout 45 python3 -m pytest -m cuda -q -p no:cacheprovider -rs tests/test_multilabel.py 2>&1 | tee "$DEST/pytest-cuda.log" | tail -8
echo "tests: $(( $(date +%s) - t0 )) s"
# Tsukuba (16 labels) and the 4 x 1024^2 8-class refine on CUDA; peers on the CPU, same energies.
timeout 85 python3 benchmarks/multilabel.py --out "$DEST" --devices cuda --repeat 3 --refine-repeat 2 --profile \
  --name multilabel_h100 2>&1 | tee "$DEST/bench.log" | tail -40
echo "bench: $(( $(date +%s) - t0 )) s"
# Timeline of the rounds (benchmarks/multilabel_profile.py): per-round host/device phase times, profiler
# tables, chrome traces, sync/launch counts, sync-debug source lines; Tsukuba and refine 4 x 1024^2.
[ -n "$NO_PROFILE" ] || timeout 150 python3 benchmarks/multilabel_profile.py --out "$DEST/profile" --repeat 3 2>&1 | tee "$DEST/profile.log" | tail -60
echo "profile: $(( $(date +%s) - t0 )) s"
timeout 20 python3 examples/stereo_tsukuba.py --out "$DEST" 2>&1 | tee "$DEST/example.log"
echo "total: $(( $(date +%s) - t0 )) s"
ls "$DEST"
