# Shared by tools/test and tools/demo: install what is missing (Debian 12), then configure and
# build into build/. Quick when everything is already there.
set -euo pipefail

AUTOVM_PACKAGES=(g++ clang cmake pkg-config meson ninja-build libonnx-dev libprotobuf-dev
  protobuf-compiler nlohmann-json3-dev libfmt-dev libssl-dev doctest-dev python3-torch python3-torchvision
  python3-onnx python3-jsonschema)

autovm_install_missing() {
  local missing=()
  for p in "${AUTOVM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

autovm_build() {
  if [ ! -f build/build.ninja ]; then
    meson setup build --buildtype=release
  fi
  ninja -C build
}
