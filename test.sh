#!/usr/bin/env bash
# Builds DeepInfer and runs every CPU-side test: C++ (ctest) and Python (pytest).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_deps.sh
ensure_test_deps
./build.sh
build_dir="${DEEPINFER_BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
python3 -m pytest -q tests
