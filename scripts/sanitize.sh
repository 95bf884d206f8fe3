#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (gcc, -O1), built in build-asan:
# the C++ tests (ctest) and the Python tests that drive the engine (the extension built with the
# sanitizers, the runtime preloaded into python).
#   scripts/sanitize.sh [--cpp-only | --python-only] [ctest -R regex] [pytest -k expression]
#   SANITIZE_TARGETS="engine_test llm_test ..."   build only these (default: everything)
#   SANITIZE_PYTESTS="tests/python/test_hostile_input.py ..."   (default: every Python test)
# Any report fails the run (halt_on_error). An allocation too large for the machine returns null, as
# malloc does (allocator_may_return_null), so the engine's own "out of memory" error is what is tested.
# Leaks are reported for the C++ tests; not for Python (the interpreter keeps its objects at exit).
# CPU only.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_deps.sh
ensure_build_deps
what=all
case "${1:-}" in --cpp-only) what=cpp; shift ;; --python-only) what=python; shift ;; esac
dir=build-asan
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 -g1: a third of the compile time of -O2 -g on the shared cores; line tables keep reports readable.
# The Release build's floating point: its -march (FMA) and the pass that contracts a*b+c into an FMA,
# which -O1 leaves out (-fexpensive-optimizations). Without them the CPU backend's logits differ from
# Release's by up to 0.1 and the greedy goldens' near-ties (tiny-b, step 10: a margin of 0.0033) flip.
opt="-O1 -g1 -DNDEBUG -march=x86-64-v3 -fexpensive-optimizations"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_CUDA=OFF "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt" -DCMAKE_CXX_FLAGS="$san" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" -DCMAKE_MODULE_LINKER_FLAGS="$san" \
  -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DDEEPINFER_PYTHON_OUTPUT_DIR="$PWD/$dir/python/deepinfer" >/dev/null
targets=(${SANITIZE_TARGETS:-})
[[ $what != cpp ]] && ((${#targets[@]})) && targets+=(deepinfer_python deepinfer)
cmake --build "$dir" -j "${DEEPINFER_BUILD_JOBS:-$(nproc)}" ${targets[@]+--target "${targets[@]}"}

if [[ $what != python ]]; then
  export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ctest --test-dir "$dir" --output-on-failure -j "${DEEPINFER_BUILD_JOBS:-$(nproc)}" ${1:+-R "$1"}
  echo "sanitize.sh: the C++ tests ran clean under ASan + UBSan"
fi
if [[ $what != cpp ]]; then
  # The package: the sources of python/deepinfer with the sanitized extension beside them.
  pkg="$dir/python/deepinfer"
  for f in python/deepinfer/*; do
    [[ $f == *.so ]] || ln -sfn "$PWD/$f" "$pkg/$(basename "$f")"
  done
  mkdir -p "$dir/bin"
  printf '#!/bin/sh\nexec python3 -m deepinfer "$@"\n' >"$dir/bin/deepinfer"
  chmod +x "$dir/bin/deepinfer"
  # libstdc++ with libasan: python does not load it, and without it ASan's __cxa_throw interceptor has
  # nothing to call (the first C++ exception aborted: "CHECK failed ... real___cxa_throw").
  # Reports go to files: pytest captures stderr, and an abort takes its capture with it.
  report="$PWD/$dir/sanitizer-report"
  rm -f "$report".*
  ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1:log_path=$report \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$report \
    LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" \
    PYTHONPATH="$PWD/$dir/python" PATH="$PWD/$dir/bin:$PATH" DEEPINFER_TEST_INSTALLED=1 DEEPINFER_BUILD_DIR="$dir" \
    python3 -m pytest -q -x -p no:cacheprovider ${SANITIZE_PYTESTS:-tests} ${2:+-k "$2"} ||
    { ls "$report".* >/dev/null 2>&1 && head -60 "$report".*; exit 1; }
  if ls "$report".* >/dev/null 2>&1; then head -60 "$report".*; exit 1; fi
  echo "sanitize.sh: the Python tests ran clean under ASan + UBSan"
fi
