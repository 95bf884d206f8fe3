#!/usr/bin/env bash
# The C++ test suite under AddressSanitizer + UndefinedBehaviorSanitizer (gcc), built in build-asan.
#   scripts/sanitize.sh [ctest -R regex]
# Any report fails the run (halt_on_error); leaks are reported too. CPU only.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_deps.sh
ensure_build_deps
dir=build-asan
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_CUDA=OFF "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$dir" -j "${DEEPINFER_BUILD_JOBS:-$(nproc)}"
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The Python extension cannot load under ASan without preloading the runtime: C++ tests only.
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" ${1:+-R "$1"}
echo "sanitize.sh: the C++ tests ran clean under ASan + UBSan"
