# Shared by tools/test and tools/demo: install what is missing (Debian 12), then configure and
# build into build/. Quick when everything is already there.
set -euo pipefail

# What building the planner takes, and all that tools/demo installs: the compiler, Meson and the
# C++ libraries autovm-plan and autovm-inspect use. (CMake is not needed: meson.build finds ONNX
# without it.)
AUTOVM_BUILD_PACKAGES=(g++ pkg-config meson ninja-build libonnx-dev libprotobuf-dev
  nlohmann-json3-dev libfmt-dev libssl-dev)
# What the tests take beyond that (tools/test): doctest; PyTorch, torchvision and ONNX's Python
# package for the adapter and the exported models; torch's C++ headers, for the allocator shim
# (python/autovm/torch_oom.cpp); clang, which compiles every unit a second time (the
# clang_compile test); jsonschema for the plan schema; pip, setuptools and venv for installing
# the Python package.
AUTOVM_TEST_PACKAGES=(doctest-dev clang python3-torch python3-torchvision python3-onnx libtorch-dev
  python3-jsonschema python3-pip python3-setuptools python3-wheel python3-venv)

# Installs those of the packages named that are not installed.
autovm_install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Configures build/ once, then builds the Ninja targets named (default: everything).
autovm_build() {
  if [ ! -f build/build.ninja ]; then
    meson setup build --buildtype=release
  fi
  ninja -C build "$@"
}
