#!/usr/bin/env bash
# Builds DeepInfer and runs every CPU-side test: C++ (ctest) and Python (pytest). The Python tests
# run against the installed package: `pip install .` into a virtual environment of the build folder
# (reusing the build, so nothing compiles twice), from which `import deepinfer` and the `deepinfer`
# command come. Then Python 3.12 where one is found (python3.12 or pyenv's), with the other way to
# install: `pip install -e .` into a 3.12 venv from a build folder beside the first at the same depth
# (ccache serves the engine's objects), and the install, server and metrics tests run against it.
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

py312=$(find_python 3.12) || { echo "test.sh: no Python 3.12 (python3.12 or pyenv's): its tests are skipped"; exit 0; }
build312="$build_dir-py312"
venv312="$build312/venv"
[[ -x "$venv312/bin/python" ]] || "$py312" -m venv "$venv312"
[[ "${DEEPINFER_SKIP_DEPS:-0}" == 1 ]] || pip_install_once requirements-py312.txt "$venv312"
"$venv312/bin/python" -c "import scikit_build_core, pytest" 2>/dev/null ||
  { echo "test.sh: $venv312 lacks requirements-py312.txt (DEEPINFER_SKIP_DEPS=1): the Python 3.12 tests are skipped"; exit 0; }
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' "$build_dir/CMakeCache.txt")  # the first build's, not sysconfig's
launcher=(); command -v ccache >/dev/null 2>&1 &&
  launcher=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -C cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
CXX="${cxx:-c++}" "$venv312/bin/python" -m pip install -q --no-build-isolation --no-deps -e . \
  -C build-dir="$build312" -C cmake.define.DEEPINFER_CUDA="$(sed -n 's/^DEEPINFER_CUDA:BOOL=//p' "$build_dir/CMakeCache.txt")" \
  "${launcher[@]}"
venv312_bin="$(cd "$venv312/bin" && pwd)"
DEEPINFER_TEST_INSTALLED=editable PATH="$venv312_bin:$PATH" "$venv312_bin/python" -m pytest -q \
  tests/python/test_install.py tests/python/test_server.py tests/python/test_server_chat.py \
  tests/python/test_server_metrics.py
