#!/bin/bash
# One GPU call for the issue scripts: build every extension, run the whole CUDA test suite, then each
# benchmarks/gpu_issue*.sh (or those named in $SCRIPTS) with a time limit each ($EACH seconds).
# Logs land in /tmp/gpu-all and come back as $OUT/results.tgz (the device tool returns at most 8 files),
# (untar it to read the logs and tables).
FINAL=${OUT:-/tmp/out}
export OUT=/tmp/gpu-all
. benchmarks/gpu_setup.sh
if [ -z "$NO_PYTEST" ]; then
  timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -m cuda -q -p no:cacheprovider -rfs ${PYTEST_ARGS:-} 2>&1 \
    | tee "$OUT/pytest-cuda.log" | grep -v "^SKIPPED" | tail -25
  echo "pytest -m cuda: $(( $(date +%s) - t0 )) s"; pack
fi
for s in ${SCRIPTS:-benchmarks/gpu_issue*.sh}; do
  [ -f "$s" ] || continue
  name=$(basename "$s" .sh)
  echo "=== $name"
  timeout ${EACH:-260} bash "$s" > "$OUT/$name.log" 2>&1
  echo "rc=$? after $(( $(date +%s) - t0 )) s"; tail -${TAIL:-25} "$OUT/$name.log"; pack
done
pack; echo "total: $(( $(date +%s) - t0 )) s"
