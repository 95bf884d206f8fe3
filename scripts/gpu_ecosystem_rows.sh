#!/usr/bin/env bash
# GPU rows of the ecosystem benchmarks: time to first token with a warm and a cold prefix
# (bench/prefix_cache_ttft.py) and a small prefill/decode sweep (bench/sweep/sweep.py), both on the demo
# model (random V4.1 weights, the real tokenizer) through deepinfer.LLM. Logs, sweep.json and the figures
# go to $OUT (default gpu_eco_out).
#
#   scripts/gpu_ecosystem_rows.sh pack [CUDA_BUILD_DIR]
#       here (no GPU needed): the Python extension for the device's Python 3.12 with the CUDA backend,
#       built in build-cuda-py312 (the same CMake and flags as ./build.sh, so ccache serves the objects of
#       CUDA_BUILD_DIR, default build-cuda), into .gpu_eco/ and .gpu_eco.txz (carry it beside .gpu_model.txz).
#   scripts/gpu_ecosystem_rows.sh run [--device cuda|cpu]
#       on the device after `tar xJf .gpu_model.txz && tar xJf .gpu_eco.txz`: the CLI, libraries and
#       tokenizer of .gpu_model (GPU_MODEL_PREBUILT), the extension of .gpu_eco (ECO_PREBUILT) copied into
#       python/deepinfer/. --device cpu (or a tree without them): this tree's ./build.sh output, to try the
#       script without a GPU. ECO_QUICK=1: smaller sizes (a check that it runs, not figures to record).
set -uo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
shift || true

pack() {
  set -e
  source scripts/setup_deps.sh
  local from="${1:-build-cuda}" py312
  py312=$(find_python 3.12) || { echo "pack: no Python 3.12 (python3.12 or pyenv's)" >&2; exit 1; }
  [[ -f "$from/CMakeCache.txt" ]] || echo "pack: $from has no CMake cache: every object compiles afresh" >&2
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  rm -rf .gpu_eco && mkdir -p .gpu_eco
  cmake -S . -B build-cuda-py312 -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON -DDEEPINFER_BUILD_TESTS=ON \
    -DPython3_EXECUTABLE="$py312" -DDEEPINFER_PYTHON_OUTPUT_DIR="$PWD/.gpu_eco" "${launcher[@]}" >/dev/null
  cmake --build build-cuda-py312 --target deepinfer_python -j "${DEEPINFER_BUILD_JOBS:-$(nproc)}"
  git rev-parse --short HEAD > .gpu_eco/COMMIT
  tar -cJf .gpu_eco.txz .gpu_eco
  ls -la .gpu_eco .gpu_eco.txz
}

run() {
  local device=cuda
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --device) device="$2"; shift 2 ;;
      *) echo "run: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  local out="${OUT:-gpu_eco_out}" bin="${GPU_MODEL_PREBUILT:-.gpu_model}" eco="${ECO_PREBUILT:-.gpu_eco}"
  mkdir -p "$out"
  local cli tok=""
  if [[ "$device" == cuda* ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    [[ -x "$bin/deepinfer" ]] || { echo "run: $bin/deepinfer missing (tar xJf .gpu_model.txz)" >&2; exit 1; }
    compgen -G "$eco/_core*.so" >/dev/null || { echo "run: $eco/_core*.so missing (scripts/gpu_ecosystem_rows.sh pack; tar xJf .gpu_eco.txz)" >&2; exit 1; }
    export LD_LIBRARY_PATH="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    cp "$eco"/_core*.so python/deepinfer/
    export DEEPINFER_CLI="$PWD/$bin/deepinfer"
    cli="$bin/deepinfer"
    tok="$bin/tok/tokenizer.json"
    echo "commit $(cat "$bin/COMMIT" 2>/dev/null) (.gpu_model), $(cat "$eco/COMMIT" 2>/dev/null) (.gpu_eco), tree $(git rev-parse --short HEAD 2>/dev/null)"
  else
    cli="${DEEPINFER_BUILD_DIR:-build}/tools/deepinfer"
    [[ -x "$cli" ]] || { echo "run: $cli missing (./build.sh)" >&2; exit 1; }
  fi
  export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  local demo="${TMPDIR:-/tmp}/deepinfer-eco-demo"
  rm -rf "$demo"
  "$cli" make-demo-model "$demo" ${tok:+--tokenizer "$tok"} >"$out/demo.log" 2>&1 || { tail -5 "$out/demo.log"; exit 1; }
  local rc=0 t0
  # prefix caching: 2,048 shared tokens + 32 own, cold (cache off / on) and warm, and the suffix alone
  local ttft_args=(--prefix 2048 --suffix 32 --repeats 3) sweep_args=(--prefill-lengths 128,512,2048 --batch-sizes 1,4,16,64 --decode-steps 16 --reps 2)
  [[ "${ECO_QUICK:-0}" == 1 ]] && ttft_args=(--prefix 256 --suffix 16 --repeats 1) && sweep_args=(--prefill-lengths 64,128 --batch-sizes 1,2 --decode-steps 4 --reps 1)
  t0=$(date +%s)
  timeout 40 python3 bench/prefix_cache_ttft.py --model "$demo" --device "$device" "${ttft_args[@]}" \
    >"$out/prefix_cache_ttft_$device.log" 2>&1 || rc=1
  echo "== prefix_cache_ttft ($device, $(( $(date +%s) - t0 )) s)"; tail -12 "$out/prefix_cache_ttft_$device.log"
  t0=$(date +%s)
  timeout 40 python3 bench/sweep/sweep.py --model "$demo" --device "$device" --out "$out/sweep_$device" "${sweep_args[@]}" \
    >"$out/sweep_$device.log" 2>&1 || rc=1
  echo "== sweep ($device, $(( $(date +%s) - t0 )) s)"; tail -20 "$out/sweep_$device.log"
  exit $rc
}

case "$mode" in
  pack) pack "$@" ;;
  run) run "$@" ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
