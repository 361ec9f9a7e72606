#!/usr/bin/env bash
# The gpu suite on a GPU machine without this project's build (tests/gpu and the gpu tests of
# tests/python, each alone, under the machine's own python3 and PyTorch):
#   tools/bench/gpu_suite.sh STAGE_DIR [TEST...]
# STAGE_DIR comes from tools/bench/stage_gpu.sh. TESTs (default: all, in this order): pool,
# mechanisms, remote, allocator, runtime, calibrate, adapter. Each test's log goes to
# $OUT/gpu-TEST.txt (default folder: ./gpu-results); the last line printed is one
# "N passed, M failed, K skipped" over the tests run. Exit status: 0 when none failed.
set -u
if [ $# -lt 1 ] || [ ! -x "$1/bin/autovm-plan" ]; then
  echo "usage: tools/bench/gpu_suite.sh STAGE_DIR [TEST...] (STAGE_DIR from tools/bench/stage_gpu.sh)" >&2
  exit 2
fi
stage=$(cd "$1" && pwd); shift
tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=(pool mechanisms remote allocator runtime calibrate adapter)
out=${OUT:-gpu-results}
mkdir -p "$out"
# libcudart.so.13 from the toolkit when there is one, else from PyTorch's CUDA wheels.
if [ ! -e /usr/local/cuda/lib64/libcudart.so.13 ]; then
  extra=$(python3 -c 'import glob,os,site
print(":".join(sorted({os.path.dirname(p) for sp in site.getsitepackages()
  for p in glob.glob(os.path.join(sp, "nvidia", "*", "lib", "libcu*.so*"))})))' 2>/dev/null)
  export LD_LIBRARY_PATH="${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export PYTHONUNBUFFERED=1
plan=$stage/bin/autovm-plan
lib=$stage/lib/libautovm.so.1
passed=0 failed=0 skipped=0
for t in "${tests[@]}"; do
  case $t in
    pool) cmd=("$stage/bin/test_pool") ;;
    mechanisms) cmd=("$stage/bin/test_gpu") ;;
    remote) cmd=("$stage/bin/test_remote") ;;
    allocator) cmd=(python3 tests/python/test_allocator_gpu.py --lib "$lib") ;;
    runtime) cmd=(python3 tests/python/test_runtime_gpu.py --planner "$plan" --lib "$lib") ;;
    calibrate) cmd=(python3 tests/python/test_calibrate_gpu.py "$plan" "$lib") ;;
    adapter) cmd=(python3 tests/python/test_adapter_gpu.py --planner "$plan" --lib "$lib") ;;
    *) echo "gpu_suite.sh: unknown test '$t'" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  timeout "${GPU_TEST_TIMEOUT:-900}" "${cmd[@]}" > "$out/gpu-$t.txt" 2>&1
  rc=$?
  echo "rc $rc" >> "$out/gpu-$t.txt"
  case $rc in
    0) passed=$((passed + 1)); verdict=ok ;;
    77) skipped=$((skipped + 1)); verdict=skipped ;;
    *) failed=$((failed + 1)); verdict="FAILED (rc $rc)"; tail -n 15 "$out/gpu-$t.txt" ;;
  esac
  echo "gpu $t: $verdict in $(( $(date +%s) - start )) s"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
