#!/bin/bash
# Issue 13: where the time of the PyMaxflow-style volume script goes on CUDA (benchmarks/compat_profile.py).
DEST="${OUT:-/tmp/out}/issue13"
mkdir -p "$DEST"
timeout 60 python3 benchmarks/compat_profile.py 2>&1 | tee "$DEST/profile.log"
