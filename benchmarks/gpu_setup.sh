# Sourced by the one-call GPU scripts (gpu_all.sh, final_gpu.sh, gpu_issue14_x2.sh): install the peers'
# wheels, set the environment, print the GPUs, build every extension into $OUT/build.log.
# Before sourcing, set OUT to the folder the logs go to; FINAL is where the device tool collects
# (the caller's $OUT on entry). Defines t0 (start time) and pack (archive $OUT as $FINAL/results.tgz).
set -o pipefail
mkdir -p "$OUT" "$FINAL"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 TORCHCUT_DATA=$PWD/.data
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
t0=$(date +%s)
pack() { tar czf "$FINAL/results.tgz" -C "$OUT" . ; }
python3 -m torchcut.build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; pack; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
