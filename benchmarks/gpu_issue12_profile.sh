#!/bin/bash
# Issue 12: where a single-image grabcut call spends its time on CUDA (benchmarks/grabcut_profile.py).
DEST="${OUT:-/tmp/out}/issue12"
mkdir -p "$DEST"
timeout 150 python3 benchmarks/grabcut_profile.py --device cuda --images 8 --repeat 3 --out "$DEST" 2>&1 | tee "$DEST/profile.log"
