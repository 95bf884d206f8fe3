#!/usr/bin/env bash
# Builds DeepInfer and runs every CPU-side test: C++ (ctest) and Python (pytest). The Python tests
# run against the installed package: `pip install .` into a virtual environment of the build folder
# (reusing the build, so nothing compiles twice), from which `import deepinfer` and the `deepinfer`
# command come.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_deps.sh
ensure_test_deps
./build.sh
build_dir="${DEEPINFER_BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
venv="$build_dir/venv"
[[ -x "$venv/bin/python" ]] || python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --no-build-isolation --no-deps \
  -C build-dir="$build_dir" -C cmake.define.DEEPINFER_BUILD_TESTS=ON .
venv_bin="$(cd "$venv/bin" && pwd)"
DEEPINFER_TEST_INSTALLED=1 PATH="$venv_bin:$PATH" "$venv_bin/python" -m pytest -q tests
