#!/usr/bin/env bash
# Builds DeepInfer. Installs what is missing (apt, pip) on the first run; later runs only rebuild.
#   DEEPINFER_ACCELERATOR=cpu|nvidia   (default: nvidia when a GPU is visible, else cpu)
#   DEEPINFER_BUILD_TYPE=Release|Debug|RelWithDebInfo   (default Release)
#   DEEPINFER_BUILD_DIR=build          (default build)
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_deps.sh
ensure_build_deps

accel="${DEEPINFER_ACCELERATOR:-}"
if [[ -z "$accel" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then accel=nvidia; else accel=cpu; fi
fi
case "$accel" in
  cpu) cuda=OFF ;;
  nvidia) cuda=ON ;;
  *) echo "build.sh: DEEPINFER_ACCELERATOR must be 'cpu' or 'nvidia', got '$accel'" >&2; exit 2 ;;
esac

build_dir="${DEEPINFER_BUILD_DIR:-build}"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE="${DEEPINFER_BUILD_TYPE:-Release}" \
  -DDEEPINFER_CUDA="$cuda" -DDEEPINFER_BUILD_TESTS=ON "${launcher[@]}" >/dev/null
jobs="${DEEPINFER_BUILD_JOBS:-$(nproc)}"
cmake --build "$build_dir" -j "$jobs"
echo "build.sh: built ($accel) in $build_dir"
