#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds DeepInfer with the CUDA backend, runs the op table (every op
# against the CPU reference) and the CUDA backend tests, optionally the op table under compute-sanitizer,
# then the op benchmark, and prints a short table. Logs go to $OUT (or ./gpu_check_out) when set.
#   DEEPINFER_SKIP_DEPS=1      skip apt (set automatically when the build tools are already present)
#   GPU_CHECK_SANITIZE=1       also run the tests under compute-sanitizer memcheck
#   GPU_CHECK_BENCH_ARGS=...   arguments for bench_cuda_ops (e.g. --quick)
#   GPU_CHECK_ONLY=kernels     only the raw-pointer kernels: backends_cuda_kernels_test, bench_cuda_kernels,
#                              the torch peers of the same shapes (bench/cuda/peer_torch.py) and the joined
#                              table (bench/cuda/report.py)
#   GPU_CHECK_PREBUILT=1       skip the build, run the binaries carried in .gpu_prebuilt/
# Offline machines without the -dev packages: put their .deb files in .gpu_deps/ (nlohmann-json3-dev,
# libgtest-dev, libonig-dev, libonig5); they are unpacked under /tmp, never into /. The lent H200 image
# lacks at least one of them (seen 2026-11-29); fetch them on a networked machine with
#   mkdir -p .gpu_deps && (cd .gpu_deps && apt-get download nlohmann-json3-dev libgtest-dev libonig-dev libonig5)
# and carry .gpu_deps (git-ignored via .git/info/exclude). If the build there fails, binaries copied
# into .gpu_prebuilt/ (backends_ops_test, backends_cuda_test, bench_cuda_ops) are run instead.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu_check_out}"
mkdir -p "$out"
build_dir="${DEEPINFER_BUILD_DIR:-build-cuda}"
export DEEPINFER_BUILD_DIR="$build_dir"

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader || true
nvcc --version | tail -1; cmake --version | head -1; command -v ninja >/dev/null && echo "ninja $(ninja --version)"
if [[ -f .gpu_prebuilt/COMMIT ]]; then echo "commit $(cat .gpu_prebuilt/COMMIT) (prebuilt)"; else git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /'; fi

have_header() { echo "#include <$1>" | ${CXX:-c++} -x c++ -fsyntax-only - >/dev/null 2>&1; }
if command -v cmake >/dev/null && command -v ninja >/dev/null; then
  if ! have_header gtest/gtest.h || ! have_header nlohmann/json.hpp || ! have_header oniguruma.h; then
    if compgen -G ".gpu_deps/*.deb" >/dev/null; then
      prefix=/tmp/deepinfer-deps
      for f in .gpu_deps/*.deb; do dpkg -x "$f" "$prefix"; done
      rm -f "$prefix"/usr/lib/*/pkgconfig/oniguruma.pc  # its prefix=/usr would point pkg-config at /usr
      export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
      export LD_LIBRARY_PATH="$(echo "$prefix"/usr/lib/*-linux-gnu)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "deps: unpacked .gpu_deps into $prefix"
    fi
  fi
  export DEEPINFER_SKIP_DEPS=1
fi

echo "== build"
t0=$(date +%s)
bin_test="$build_dir/tests/backends/backends_cuda_test"
bin_ops="$build_dir/tests/backends/backends_ops_test"
bin_bench="$build_dir/bench/cuda/bench_cuda_ops"
bin_ktest="$build_dir/tests/backends/backends_cuda_kernels_test"
bin_kbench="$build_dir/bench/cuda/bench_cuda_kernels"
if [[ "${GPU_CHECK_PREBUILT:-0}" == 1 ]]; then
  echo "using the binaries carried in .gpu_prebuilt/"
  bin_test=.gpu_prebuilt/backends_cuda_test; bin_bench=.gpu_prebuilt/bench_cuda_ops; bin_ops=.gpu_prebuilt/backends_ops_test
  bin_ktest=.gpu_prebuilt/backends_cuda_kernels_test; bin_kbench=.gpu_prebuilt/bench_cuda_kernels
elif ! DEEPINFER_ACCELERATOR=nvidia ./build.sh >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  if [[ -x .gpu_prebuilt/backends_cuda_test ]]; then
    echo "build FAILED here; using the binaries carried in .gpu_prebuilt/"
    bin_test=.gpu_prebuilt/backends_cuda_test; bin_bench=.gpu_prebuilt/bench_cuda_ops; bin_ops=.gpu_prebuilt/backends_ops_test
    bin_ktest=.gpu_prebuilt/backends_cuda_kernels_test; bin_kbench=.gpu_prebuilt/bench_cuda_kernels
  else
    echo "build FAILED"; exit 1
  fi
fi
echo "build: $(( $(date +%s) - t0 )) s"

if [[ "${GPU_CHECK_ONLY:-}" == kernels ]]; then
  echo "== kernel tests"
  "$bin_ktest" 2>&1 | tee "$out/ktest.log" | grep -E '^\[ (OK|FAILED|  SKIPPED) |PASSED|FAILED|Failure|Expected|Which is|^\[ [a-z]'
  ktest_rc=${PIPESTATUS[0]}
  echo "== kernel benchmark + torch peers"
  "$bin_kbench" ${GPU_CHECK_BENCH_ARGS:-} >"$out/kbench.log" 2>&1; kbench_rc=$?
  PYTHONUNBUFFERED=1 python3 bench/cuda/peer_torch.py ${GPU_CHECK_BENCH_ARGS:-} >"$out/peer.log" 2>&1; peer_rc=$?
  grep -E '^(device|peer:)' "$out/kbench.log" "$out/peer.log"
  python3 bench/cuda/report.py "$out/kbench.log" "$out/peer.log" | tee "$out/report.md"
  echo "kernel tests exit $ktest_rc, bench exit $kbench_rc, peers exit $peer_rc"
  [[ $ktest_rc == 0 && $kbench_rc == 0 ]]
  exit
fi

echo "== tests"
("$bin_ops"; r=$?; "$bin_test" || r=1; exit $r) 2>&1 | tee "$out/test.log" | grep -E '^\[ (OK|FAILED|  SKIPPED) |PASSED|FAILED|Failure|Expected|Which is'
test_rc=${PIPESTATUS[0]}
if [[ "${GPU_CHECK_SANITIZE:-0}" == 1 ]] && command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck"
  timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$bin_ops" >"$out/memcheck.log" 2>&1
  echo "memcheck exit $? ($(grep -c 'Invalid' "$out/memcheck.log") invalid accesses)"; tail -3 "$out/memcheck.log"
fi

echo "== benchmark"
"$bin_bench" ${GPU_CHECK_BENCH_ARGS:-} >"$out/bench.log" 2>&1
bench_rc=$?
grep -E '^(device|ceilings)' "$out/bench.log"

echo "== summary"
grep -E '^\[ .* \] (rel err|[0-9]+ of)' "$out/test.log"
grep -E '^\|' "$out/bench.log"
tail -1 "$out/bench.log"
echo "tests exit $test_rc, bench exit $bench_rc"
[[ $test_rc == 0 && $bench_rc == 0 ]]
