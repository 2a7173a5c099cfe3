#!/bin/bash
# One GPU call: A/B of a base tree against this one (benchmarks/ab_trees.py), after this tree's whole
# CUDA test suite. The base tree travels as .ab/base.tar (git archive of the base commit, an ignored
# path: carry it), e.g.  mkdir -p .ab && git archive -o .ab/base.tar <commit>
# PREP: a command run first that may make more trees (each a folder holding a torchcut/ package),
# listed in EXTRA_TREES; they sit between the base and this tree in the table.
# CASES (default refine,tsukuba and hard/standard grid cases), ROUNDS, REPEAT, PROFILE=1 (kernel totals);
# NO_PYTEST=1 skips the tests. Logs and tables in $OUT/results.tgz.
FINAL=${OUT:-/tmp/out}
export OUT=/tmp/gpu-ab
mkdir -p /tmp/base "$OUT" && tar xf .ab/base.tar -C /tmp/base
[ -n "$PREP" ] && bash -c "$PREP"
TREES=(/tmp/base $EXTRA_TREES)
pids=()
for i in "${!TREES[@]}"; do
  (cd "${TREES[$i]}" && TORCHCUT_CACHE=/tmp/ab-trees-cache/$i python3 -m torchcut.build > "$OUT/build-tree$i.log" 2>&1) &
  pids+=($!)
done
export TORCHCUT_CACHE=/tmp/ab-trees-cache/${#TREES[@]}
. benchmarks/gpu_setup.sh
for p in "${pids[@]}"; do wait $p || echo "a tree's build failed (see build-tree*.log)"; done
echo "all builds: $(( $(date +%s) - t0 )) s"
if [ -z "$NO_PYTEST" ]; then
  timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -m cuda -q -p no:cacheprovider -rfs 2>&1 \
    | tee "$OUT/pytest-cuda.log" | grep -v "^SKIPPED" | tail -15
  echo "pytest -m cuda: $(( $(date +%s) - t0 )) s"; pack
fi
timeout ${AB_TIMEOUT:-300} python3 benchmarks/ab_trees.py --trees "${TREES[@]}" . --out "$OUT" \
  --cases "${CASES:-refine,tsukuba,grid:hard,grid:coffee 1024^2 4c,grid:256^3,grid:batch 32}" \
  ${PROFILE:+--profile} --rounds ${ROUNDS:-4} --repeat ${REPEAT:-3} 2>&1 | tee "$OUT/ab_trees.log" | tail -${TAIL:-30}
echo "total: $(( $(date +%s) - t0 )) s"; pack
