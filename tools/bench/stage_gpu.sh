#!/usr/bin/env bash
# Stages a CUDA build for a GPU machine that has CUDA and PyTorch but not this project's
# build dependencies:
#   tools/bench/stage_gpu.sh [BUILD_DIR [STAGE_DIR]]      (defaults: build, build-stage)
# STAGE_DIR then holds the installed tree (bin/autovm-plan, autovm-inspect, autovm-replay,
# lib/libautovm, share/autovm/profiles), the gpu suite's binaries in bin/, and in lib/deps the
# libraries the planner and the inspector need beyond glibc, libstdc++ and zlib (ONNX,
# protobuf, fmt, libcrypto). Those two binaries move to libexec/ behind wrappers in bin/ that
# set LD_LIBRARY_PATH for them alone, so that PyTorch's process never loads Debian's copies of
# system libraries; libexec/../share is bin/../share, so they still find their data. Carry
# STAGE_DIR to the GPU machine and run, from the repository root there:
#   tools/bench/gpu_suite.sh STAGE_DIR
set -euo pipefail
build=${1:-build}
stage=${2:-build-stage}
[ -f "$build/build.ninja" ] || { echo "stage_gpu.sh: no build in $build (run tools/test or meson setup first)" >&2; exit 2; }
[ -x "$build/tests/gpu/test_gpu" ] || { echo "stage_gpu.sh: $build has no gpu suite: configure it with the CUDA toolkit (-Dcuda=enabled)" >&2; exit 2; }
ninja -C "$build" >/dev/null
rm -rf "$stage" "$stage.tmp"
meson install -C "$build" --destdir "$PWD/$stage.tmp" --quiet
prefix=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
mv "$PWD/$stage.tmp$prefix" "$stage"
rm -rf "$stage.tmp"
libdir=$(find "$stage" -name 'libautovm.so*' -printf '%h\n' | head -n 1)
if [ "$libdir" != "$stage/lib" ]; then
  cp -a "$libdir"/libautovm.so* "$stage/lib/"
  rm -rf "$libdir"
fi
cp "$build"/tests/gpu/test_gpu "$build"/tests/gpu/test_pool "$build"/tests/gpu/test_remote "$stage/bin/"
mkdir -p "$stage/lib/deps" "$stage/libexec"
for exe in autovm-plan autovm-inspect; do
  ldd "$stage/bin/$exe" | awk '$3 ~ /^\// {print $3}' | while read -r so; do
    case "$(basename "$so")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libz.so*) ;;
      *) cp -L "$so" "$stage/lib/deps/" ;;
    esac
  done
  mv "$stage/bin/$exe" "$stage/libexec/$exe"
  printf '%s\n' '#!/bin/sh' \
    'top=$(dirname "$(readlink -f "$0")")/..' \
    "LD_LIBRARY_PATH=\"\$top/lib/deps\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\" exec \"\$top/libexec/$exe\" \"\$@\"" \
    > "$stage/bin/$exe"
  chmod +x "$stage/bin/$exe"
done
echo "staged in $stage: $(ls "$stage/bin" | tr '\n' ' ')"
