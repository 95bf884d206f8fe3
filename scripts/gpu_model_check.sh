#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the V4.1 model on the CUDA backend. Runs the op tests (every op
# against the CPU), the V4.1 golden tests with DEEPINFER_DEVICE=cuda (the same tests and tolerances as
# on the CPU), the rollback / batching / chunking bit-equality tests on the GPU, compute-sanitizer
# memcheck on one golden case, and the batch benchmark on CPU and GPU. Logs go to $OUT.
#   GPU_MODEL_PREBUILT=DIR   run the binaries in DIR (built elsewhere by scripts/gpu_model_build.sh)
#                            instead of building here; DIR/lib is put on LD_LIBRARY_PATH.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu_check_out}"
mkdir -p "$out"
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
bin="${GPU_MODEL_PREBUILT:-}"
if [[ -n "$bin" ]]; then
  export LD_LIBRARY_PATH="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [[ -f "$bin/COMMIT" ]] && echo "commit $(cat "$bin/COMMIT") (prebuilt)"
else
  DEEPINFER_ACCELERATOR=nvidia DEEPINFER_SKIP_DEPS=1 ./build.sh >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  bin=build-cuda
fi
# NCCL for the communicator test: the toolkit's, else the one PyTorch's wheels bring
nccl_py=$(python3 -c "import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], 'lib'))" 2>/dev/null)
[[ -n "$nccl_py" ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nccl_py"
find_bin() { find "$bin" -name "$1" -type f | head -1; }
rc=0
run() {  # name, then the command
  local name=$1; shift
  local t0=$(date +%s)
  "$@" >"$out/$name.log" 2>&1; local r=$?
  printf '%-34s exit %d  %4d s   %s\n' "$name" "$r" "$(( $(date +%s) - t0 ))" \
    "$(grep -E '^\[  (PASSED|FAILED) ' "$out/$name.log" | tr '\n' ' ')"
  [[ $r == 0 ]] || { rc=1; grep -E 'Failure|Expected|Which is|error|FAILED' "$out/$name.log" | head -20; }
}
for t in backends_ops_test backends_cuda_test backends_cuda_kernels_test parallel_nccl_communicator_test; do
  [[ -n "$(find_bin $t)" ]] && run "$t" "$(find_bin $t)"
done
# The op table again with the exact GEMMs: the fp32 linear (and the ops built on it) bit for bit.
DEEPINFER_FP8_GEMM=exact run backends_ops_test-exact "$(find_bin backends_ops_test)"
export DEEPINFER_DEVICE=cuda
# The goldens twice: with DEEPINFER_FP8_GEMM=exact DEEPINFER_ATTENTION=exact every op gives the CPU's bits
# but the transcendentals (the model code on the GPU against the reference), then with the tensor cores
# (the default).
DEEPINFER_FP8_GEMM=exact DEEPINFER_ATTENTION=exact run test_v41_goldens-cuda-exact "$(find_bin test_v41_goldens)"
# Layer by layer against the CPU backend (streams, routes, logits), exact and default.
DEEPINFER_FP8_GEMM=exact DEEPINFER_ATTENTION=exact run test_v41_cuda-exact "$(find_bin test_v41_cuda)"
run test_v41_cuda "$(find_bin test_v41_cuda)"
for t in test_v41_goldens test_v41_image_tokens test_vision_tower test_vision_logits test_vision_engine test_v41_dummy_weights; do
  run "$t-cuda" "$(find_bin $t)"
done
# DeepSeek-V4 on the GPU: against the CPU backend, its goldens (same tolerances as the CPU's: fp32
# throughout; informative where reduction order moves a logit past 1e-4), rollback and batching.
run test_v4_cuda "$(find_bin test_v4_cuda)"
run test_v4_goldens-cuda "$(find_bin test_v4_goldens)"
# Rollback and batching compare bits across chunkings and batch compositions: batch-invariant kernels.
DEEPINFER_BATCH_INVARIANT=1 run test_v4_rollback-cuda-invariant "$(find_bin test_v4_rollback)"
DEEPINFER_BATCH_INVARIANT=1 run test_v4_batching-cuda-invariant "$(find_bin test_v4_batching)"
# Bit equality across batch compositions holds on the GPU in batch-invariant mode (fp8_gemm never
# splits K then); the default plan picks split counts by batch size.
# DSpark's verification gives plain decoding's bits (logprobs included) when the kernels are batch-invariant.
DEEPINFER_BATCH_INVARIANT=1 run speculation_v41_test-cuda-invariant "$(find_bin speculation_v41_test)"
"$(find_bin speculation_v41_test)" >"$out/speculation-cuda-default.log" 2>&1
echo "DSpark equal to plain decoding with the default (split-K) plan: exit $? (informative)"
DEEPINFER_BATCH_INVARIANT=1 run test_v41_rollback_and_batching-cuda-invariant "$(find_bin test_v41_rollback_and_batching)"
"$(find_bin test_v41_rollback_and_batching)" >"$out/rollback-cuda-default.log" 2>&1
echo "rollback/batching bit equality with the default (split-K) plan: exit $? (informative)"
grep -hE '^\[v41\] .*(prefill|decode|greedy)' "$out"/test_v41_goldens-cuda-exact.log | sed 's/^/exact: /' | head -40
grep -hE '^\[v41\] .*(prefill|decode|greedy)' "$out"/test_v41_goldens-cuda.log | sed 's/^/tensor: /' | head -40
if command -v compute-sanitizer >/dev/null; then
  run memcheck-rollback timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$(find_bin test_v41_rollback_and_batching)" --gtest_filter='*Truncate*:*truncate*'
  grep -E 'ERROR SUMMARY|Invalid' "$out/memcheck-rollback.log" | head -5
fi
# The engine on the GPU: the demo model (random V4.1 weights, the real tokenizer) through the CLI,
# greedy text and the logits of a prompt on CPU and GPU. DEMO_TOKENIZER: a V4 tokenizer.json.
cli="$(find_bin deepinfer)"
if [[ -n "$cli" && -n "${DEMO_TOKENIZER:-}" ]]; then
  demo=/tmp/deepinfer-demo
  "$cli" make-demo-model "$demo" --tokenizer "$DEMO_TOKENIZER" >"$out/demo.log" 2>&1 || { echo "make-demo-model failed"; tail -5 "$out/demo.log"; rc=1; }
  for dev in cpu cuda; do
    t0=$(date +%s.%N)
    "$cli" generate --model "$demo" --device $dev --prompt "The capital of France is" --max-tokens 48 \
      --temperature 0 --ignore-eos --json >"$out/generate-$dev.json" 2>"$out/generate-$dev.err" || { rc=1; tail -3 "$out/generate-$dev.err"; }
    python3 -c "import time,sys; print('generate $dev: %.2f s' % (time.time() - float(sys.argv[1])))" "$t0"
    "$cli" generate --model "$demo" --device $dev --prompt "The capital of France is" --max-tokens 48 \
      --temperature 0 --ignore-eos --speculative 3 --json >"$out/spec-$dev.json" 2>"$out/spec-$dev.err" || { rc=1; tail -3 "$out/spec-$dev.err"; }
    "$cli" generate --model "$demo" --device $dev --prompt-ids 100,129264,200 --image tests/data/vision/gray8.png \
      --max-tokens 16 --temperature 0 --ignore-eos --json >"$out/image-$dev.json" 2>"$out/image-$dev.err" || { rc=1; tail -3 "$out/image-$dev.err"; }
    "$cli" forward --model "$demo" --device $dev --input-ids 0,1000,2000,3000,4000,5000,6000,7000,8000,9000,10000,11000 \
      --output "$out/forward-$dev.safetensors" >/dev/null 2>"$out/forward-$dev.err" || { rc=1; tail -3 "$out/forward-$dev.err"; }
  done
  python3 - "$out" <<'PY' || rc=1
import json, sys
from safetensors.numpy import load_file
out = sys.argv[1]
a, b = (load_file(f"{out}/forward-{d}.safetensors")["logits"] for d in ("cpu", "cuda"))
d = abs(a - b)
print(f"demo forward cpu vs cuda: {a.shape} mean|d|={d.mean():.3e} max|d|={d.max():.3e} "
      f"argmax {(a.argmax(-1) == b.argmax(-1)).mean():.3f} bitwise {(a == b).mean():.3f}")
tok = [json.loads(open(f"{out}/generate-{d}.json").readline())["token_ids"] for d in ("cpu", "cuda")]
same = sum(p == q for p, q in zip(*tok))
print(f"demo greedy cpu vs cuda: {same}/{len(tok[0])} tokens equal")
img = [json.loads(open(f"{out}/image-{d}.json").readline())["token_ids"] for d in ("cpu", "cuda")]
print(f"demo image prompt cpu vs cuda: {sum(p == q for p, q in zip(*img))}/{len(img[0])} tokens equal")
spec = [json.loads(open(f"{out}/spec-{d}.json").readline()) for d in ("cpu", "cuda")]
for d, sp in zip(("cpu", "cuda"), spec):
    print(f"demo greedy with DSpark on {d}: {'equal to' if sp['token_ids'] == tok[0] else 'DIFFERENT from'} plain decoding;"
          f" metrics {json.dumps(sp.get('metrics', {}).get('speculative', {}))[:200]}")
PY
fi
b="$(find_bin bench_v41_batch)"
if [[ -n "$b" ]]; then
  echo "== bench_v41_batch (tiny-b) on cuda"; "$b" 2>&1 | tail -4
  echo "== bench_v41_batch (tiny-b) on cpu"; DEEPINFER_DEVICE=cpu "$b" 2>&1 | tail -4
fi
exit $rc
