#!/usr/bin/env bash
# The GPU measurements of BENCHMARKS.md (mechanisms, replayed steps), in one go on a GPU machine:
#   tools/bench/gpu_run.sh BIN_DIR PLAN[@MODES]...
# BIN_DIR holds test_gpu and autovm-replay (from a build with -Dcuda=enabled: build/tests/gpu,
# build/tools/replay; optionally staged_in from tools/bench/staged_in.cu); each PLAN is replayed in every mode, or in MODES (autovm-replay --modes). Results go to $OUT (default
# ./gpu-results): the gpu suite's log, the mechanism microbenchmark (SKIP_BENCH=1 leaves it
# out), one replay per plan.
set -u
bin=$1; shift
out=${OUT:-gpu-results}
mkdir -p "$out"
# The binaries find libcudart.so.13 and libcupti.so.13 in /usr/local/cuda/lib64 (their rpath);
# elsewhere, in the CUDA wheels of the local PyTorch.
if [ ! -e /usr/local/cuda/lib64/libcudart.so.13 ]; then
  extra=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for sp in site.getsitepackages():
    for pat in ("nvidia/*/lib", "nvidia/cu13/lib"):
        dirs.update(os.path.dirname(p) for p in glob.glob(os.path.join(sp, pat, "libcu*.so*")))
print(":".join(sorted(dirs)))
PY
)
  export LD_LIBRARY_PATH="${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv; } \
  > "$out/device.txt" 2>&1
echo "== gpu suite"; timeout 300 "$bin/test_gpu" 2>&1 | tee "$out/gpu_suite.txt" | tail -5
echo "== mechanisms"
[ -z "${SKIP_BENCH:-}" ] && timeout 240 "$bin/autovm-replay" --bench --repeat 3 \
  --mechanisms prefetch,staged,staged-noadvice,mapped --json "$out/bench.json" 2>&1 | tee "$out/bench.txt"
# Why staged's way back collapsed (tools/bench/staged_in.cu), when its binary is in BIN_DIR.
if [ -x "$bin/staged_in" ] && [ -z "${SKIP_BENCH:-}" ]; then
  echo "== staged way back"; timeout 120 "$bin/staged_in" 64 256 1024 2>&1 | tee "$out/staged_in.txt"
fi
for arg in "$@"; do
  plan=${arg%@*}
  modes=resident,demand,prefetch,staged,mapped
  [ "$arg" != "$plan" ] && modes=${arg#*@}
  name=$(basename "$plan" .json)
  echo "== replay $name ($modes)"
  timeout 300 "$bin/autovm-replay" "$plan" --modes "$modes" --steps 5 --warmup 2 \
    --json "$out/replay_$name.json" 2>&1 | tee "$out/replay_$name.txt"
done
