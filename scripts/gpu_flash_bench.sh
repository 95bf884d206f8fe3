#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: DeepSeek-V4.1-Flash's shapes on one GPU. Writes the Flash config cut
# to FLASH_LAYERS layers (default 8; `deepinfer make-demo-model --flash-layers`), loads it with dummy
# weights in the released formats (FP8 32x32 blocks, MXFP4 experts), times prefill and decode steps
# (bench_v41_shapes) and prints them beside the H200's floors (bench/sweep/report_shapes.py).
# FLASH_VERIFY="1,2,...": also DSpark's cost side, verification forwards of that many tokens per sequence
# at each batch size and the draft head's time.
#   GPU_MODEL_PREBUILT=DIR DEMO_TOKENIZER=tokenizer.json scripts/gpu_flash_bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu_check_out}"
mkdir -p "$out"
bin="${GPU_MODEL_PREBUILT:?set GPU_MODEL_PREBUILT to the folder of prebuilt binaries}"
export LD_LIBRARY_PATH="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
find_bin() { find "$bin" -name "$1" -type f | head -1; }
flash=/tmp/deepinfer-flash
"$(find_bin deepinfer)" make-demo-model "$flash" --tokenizer "${DEMO_TOKENIZER:?}" --flash-layers "${FLASH_LAYERS:-8}" || exit 1
DEEPINFER_DEVICE=cuda timeout "${FLASH_TIMEOUT:-420}" "$(find_bin bench_v41_shapes)" "$flash" dummy \
  "${FLASH_BATCHES:-1,8,32,128}" "${FLASH_PREFILLS:-128,1024,4096}" 4 "${FLASH_VERIFY:-}" | tee "$out/flash_shapes.jsonl"
echo "bench exit ${PIPESTATUS[0]}"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader || true
python3 bench/sweep/report_shapes.py "$flash" "$out/flash_shapes.jsonl" --device cuda | tee "$out/flash_report.md"
# FLASH_PROFILE="B ...": the kernels of one decode step of B sequences under Nsight Compute, on the smallest cut
# (6 layers: each kind of layer once; loading FLASH_LAYERS twice would double the run), summed per kernel.
if [ -n "${FLASH_PROFILE:-}" ]; then
  small=/tmp/deepinfer-flash6
  "$(find_bin deepinfer)" make-demo-model "$small" --tokenizer "$DEMO_TOKENIZER" --flash-layers 6 || exit 1
  for b in $FLASH_PROFILE; do  # e.g. FLASH_PROFILE="1 32"
    DEEPINFER_DEVICE=cuda timeout 300 ncu --nvtx --nvtx-include "decode/" --metrics gpu__time_duration.sum --csv \
      --cache-control none --clock-control none "$(find_bin bench_v41_shapes)" "$small" dummy "$b" "" 1 \
      > "$out/ncu_decode_b$b.csv" 2> "$out/ncu_decode_b$b.err"
    echo "ncu (decode batch $b) exit $?"
    python3 bench/model/ncu_summary.py "$out/ncu_decode_b$b.csv" | tee "$out/ncu_decode_b$b.md"
  done
fi
# FLASH_PREFILL_PROFILE="T ...": the kernels of one prefill of T tokens, the same way.
if [ -n "${FLASH_PREFILL_PROFILE:-}" ]; then
  small=/tmp/deepinfer-flash6
  [ -d "$small" ] || "$(find_bin deepinfer)" make-demo-model "$small" --tokenizer "$DEMO_TOKENIZER" --flash-layers 6 || exit 1
  for t in $FLASH_PREFILL_PROFILE; do
    BENCH_REPS=1 DEEPINFER_DEVICE=cuda timeout 300 ncu --nvtx --nvtx-include "prefill/" --metrics gpu__time_duration.sum \
      --csv --cache-control none --clock-control none "$(find_bin bench_v41_shapes)" "$small" dummy "" "$t" 0 \
      > "$out/ncu_prefill_$t.csv" 2> "$out/ncu_prefill_$t.err"
    echo "ncu (prefill $t tokens) exit $?"
    python3 bench/model/ncu_summary.py "$out/ncu_prefill_$t.csv" | tee "$out/ncu_prefill_$t.md"
  done
fi
# FLASH_DRAFT_PROFILE="B ...": the kernels of one batched DSpark draft of B sequences, the same way.
if [ -n "${FLASH_DRAFT_PROFILE:-}" ]; then
  small=/tmp/deepinfer-flash6
  [ -d "$small" ] || "$(find_bin deepinfer)" make-demo-model "$small" --tokenizer "$DEMO_TOKENIZER" --flash-layers 6 || exit 1
  for b in $FLASH_DRAFT_PROFILE; do
    BENCH_REPS=1 DEEPINFER_DEVICE=cuda timeout 300 ncu --nvtx --nvtx-include "draft/" --metrics gpu__time_duration.sum \
      --csv --cache-control none --clock-control none "$(find_bin bench_v41_shapes)" "$small" dummy "$b" "" 0 1 \
      > "$out/ncu_draft_b$b.csv" 2> "$out/ncu_draft_b$b.err"
    echo "ncu (draft batch $b) exit $?"
    python3 bench/model/ncu_summary.py "$out/ncu_draft_b$b.csv" | tee "$out/ncu_draft_b$b.md"
  done
fi
