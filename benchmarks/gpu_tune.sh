#!/bin/bash
# One GPU call for a tuning experiment: build, the CUDA tests of $PYTEST_FILES (default the grid solver's),
# again with $FORCED as TORCHCUT_TEST_GRID_OPTS (when set), then benchmarks/tune_grid.py with $SWEEP (JSON
# list of option dicts) on $CASES (--reps $REPS, --energy torchcut). Logs in $OUT/results.tgz.
FINAL=${OUT:-/tmp/out}
export OUT=/tmp/gpu-tune
. benchmarks/gpu_setup.sh
files=${PYTEST_FILES:-tests/test_cuda_grid.py}
if [ -z "$NO_PYTEST" ]; then
  timeout ${PYTEST_TIMEOUT:-200} python3 -m pytest -m cuda -q -p no:cacheprovider -x $files 2>&1 \
    | tee "$OUT/pytest-cuda.log" | grep -v "^SKIPPED" | tail -15
  echo "tests: $(( $(date +%s) - t0 )) s"; pack
  if [ -n "$FORCED" ]; then
    TORCHCUT_TEST_GRID_OPTS="$FORCED" timeout ${PYTEST_TIMEOUT:-200} python3 -m pytest -m cuda -q -p no:cacheprovider \
      -x tests/test_cuda_grid.py 2>&1 | tee "$OUT/pytest-forced.log" | grep -v "^SKIPPED" | tail -8
    echo "forced tests ($FORCED): $(( $(date +%s) - t0 )) s"; pack
  fi
fi
timeout ${TUNE_TIMEOUT:-300} python3 benchmarks/tune_grid.py --energy torchcut --reps ${REPS:-5} --cases "$CASES" \
  --sweep "$SWEEP" 2>&1 | tee "$OUT/tune.log" | grep -v "^  check"
echo "total: $(( $(date +%s) - t0 )) s"; pack
