#!/bin/bash
# One GPU call: A/B of a base tree against this one (benchmarks/ab_trees.py), after this tree's whole
# CUDA test suite. The base tree travels as .ab/base.tar (git archive of the base commit, an ignored
# path: carry it), e.g.  mkdir -p .ab && git archive -o .ab/base.tar <commit>
# CASES (default refine,tsukuba and hard/standard grid cases), ROUNDS, REPEAT; NO_PYTEST=1 skips the tests.
# Logs and tables in $OUT/results.tgz.
FINAL=${OUT:-/tmp/out}
export OUT=/tmp/gpu-ab
mkdir -p /tmp/base && tar xf .ab/base.tar -C /tmp/base
(cd /tmp/base && TORCHCUT_CACHE=/tmp/ab-trees-cache/0 python3 -m torchcut.build > "$OUT.base-build.log" 2>&1) &
base_build=$!
export TORCHCUT_CACHE=/tmp/ab-trees-cache/1
. benchmarks/gpu_setup.sh
wait $base_build || { echo "base build failed"; tail -20 "$OUT.base-build.log"; }
cp "$OUT.base-build.log" "$OUT/base-build.log"
echo "both builds: $(( $(date +%s) - t0 )) s"
if [ -z "$NO_PYTEST" ]; then
  timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -m cuda -q -p no:cacheprovider -rfs 2>&1 \
    | tee "$OUT/pytest-cuda.log" | grep -v "^SKIPPED" | tail -15
  echo "pytest -m cuda: $(( $(date +%s) - t0 )) s"; pack
fi
timeout ${AB_TIMEOUT:-300} python3 benchmarks/ab_trees.py --trees /tmp/base . --out "$OUT" \
  --cases "${CASES:-refine,tsukuba,grid:hard,grid:coffee 1024^2 4c,grid:256^3,grid:batch 32}" \
  --rounds ${ROUNDS:-4} --repeat ${REPEAT:-3} 2>&1 | tee "$OUT/ab_trees.log" | tail -30
echo "total: $(( $(date +%s) - t0 )) s"; pack
