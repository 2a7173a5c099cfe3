#!/bin/bash
# One GPU session of the grid solver work: build, smoke/tune, tests, benchmark. Logs under $OUT.
# usage: bash benchmarks/gpu_session.sh "<tune sweep json>" "<tune cases>" "<pytest args or skip>" "<bench args or skip>"
# env: TUNE_ENERGY=builtin|torchcut; SWEEP2/CASES2: a second sweep; OLD_OPTS='<json>' runs the pytest step a second time with those solver defaults (pytest-old.log);
#      TUNE_REPS (timed rounds of the sweep), PYTEST_TIMEOUT, TUNE_TIMEOUT, BENCH_TIMEOUT (seconds).
set -o pipefail
SWEEP="$1"; [ -z "$SWEEP" ] && SWEEP='[{}]'
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
t0=$(date +%s)
python3 -m torchcut.build torchcut_grid > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
if [ "$3" != "skip" ]; then
  timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -m cuda -x -q -p no:cacheprovider ${3:-tests/test_cuda_grid.py} 2>&1 | tee "$OUT/pytest.log" | tail -25
  echo "pytest: $(( $(date +%s) - t0 )) s"
  if [ -n "$OLD_OPTS" ]; then
    TORCHCUT_TEST_GRID_OPTS="$OLD_OPTS" timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -m cuda -x -q -p no:cacheprovider \
      ${3:-tests/test_cuda_grid.py} 2>&1 | tee "$OUT/pytest-old.log" | tail -8
    echo "pytest with $OLD_OPTS: $(( $(date +%s) - t0 )) s"
  fi
fi
if [ "$2" != "skip" ]; then
  timeout ${TUNE_TIMEOUT:-200} python3 benchmarks/tune_grid.py --sweep "$SWEEP" --cases "${2:-512-4,1024-4}" \
    --reps ${TUNE_REPS:-3} --energy ${TUNE_ENERGY:-builtin} $TUNE_FLAGS 2>&1 | tee "$OUT/tune.log"
  echo "tune: $(( $(date +%s) - t0 )) s"
fi
if [ -n "$SWEEP2" ]; then  # a second sweep (e.g. 3D-only options) on the cases in CASES2
  timeout ${TUNE_TIMEOUT:-200} python3 benchmarks/tune_grid.py --sweep "$SWEEP2" --cases "$CASES2" \
    --reps ${TUNE_REPS:-3} --energy ${TUNE_ENERGY:-builtin} $TUNE_FLAGS 2>&1 | tee "$OUT/tune2.log"
  echo "tune2: $(( $(date +%s) - t0 )) s"
fi
if [ "$4" != "skip" ] && [ -n "$4" ]; then
  timeout ${BENCH_TIMEOUT:-300} python3 benchmarks/grid.py --out "$OUT" $4 2>&1 | tee "$OUT/bench.log" | tail -40
fi
echo "session total: $(( $(date +%s) - t0 )) s"
