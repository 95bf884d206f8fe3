#!/usr/bin/env python3
"""The baseline users already have: transformers' DeepseekV4ForCausalLM (eager attention, its default experts
implementation, bf16, random weights) at DeepSeek-V4.1-Flash's dimensions, timed on one GPU beside
bench_v41_shapes (scripts/gpu_flash_bench.sh). Prints one JSON object per row with bench_v41_shapes' keys where
they apply ("prefill_tokens"/"seconds", "decode_batch"/"step_seconds") plus the context, tokens/s and the
milliseconds of each decoder layer (CUDA events around every layer, so their mean is transformers' ms per layer).

    python3 bench/model/peer_transformers.py [--layers auto|N] [--prefills 1024,4096] [--batches 1,32,128]
                                             [--contexts 1024] [--reps 3] [--steps 5]
    python3 bench/model/peer_transformers.py --tiny     # self-check on the CPU: tiny dims, fp32, asserts

The shape: hidden 5120, 64 heads x head_dim 512 (rope on the last 64), one shared K=V head, q_lora 1280,
o_groups 8 x o_lora 1024, 384 routed experts top-6 x 2304 plus one shared expert (sqrt-softplus, scaling 1.5,
SwiGLU clamp 10), Lightning Indexer 32 heads x 128 top-512, window 128, mHC 4 streams / 20 Sinkhorn
iterations, vocab 129,280, YaRN (factor 16 over 65,536) on the compressed branches. The layers are the roles of
`deepinfer make-demo-model --flash-layers N` (2 sliding-window layers, then ratio-2 layers, then ratio-1
layers) mapped onto what V4 has: ratio 0 -> sliding_attention, ratio 2 -> compressed_sparse_attention at
compress rate 2 (its compressor and indexer), ratio 1 -> heavily_compressed_attention at compress rate 1 (no
indexer: it attends every compressed row). All MoE layers are top-k routed (V4.1 has no hash routing).

What V4's architecture (and so this baseline) lacks of V4.1: CSA2's layer roles (KV / index source layers
and Reuse layers that read them: every compressed V4 layer computes its own compressor and indexer), the
Reindex layers and the two-level candidate-block top-k on the ratio-1 layers, compression without overlap (V4's
CSA compressor pools overlapping windows), single-pass mHC (V4 mixes at both sites; it also has an hc_head),
no per-head Q norm (V4 has one), Engram, DSpark, the image-token routing bias (bias_vl), the vision tower, and
the released storage formats (FP8 32x32 weights, MXFP4 experts, FP8 window / FP4 compressed KV): everything
here is bf16, computed the way transformers computes it (dense masked attention, not sparse gathers).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.cache_utils import DynamicCache

ROLE_TYPES = {0: "sliding_attention", 2: "compressed_sparse_attention", 1: "heavily_compressed_attention"}


def flash_ratios(layers: int) -> list[int]:
    """Compress ratios of the Flash cut to `layers` layers, as make-demo-model --flash-layers writes them."""
    n2 = max(layers - 2, 0) // 2
    return [0 if l < 2 else 2 if l < 2 + n2 else 1 for l in range(layers)]


def make_config(layers: int, tiny: bool) -> DeepseekV4Config:
    ratios = flash_ratios(layers)
    dims = dict(vocab_size=129280, hidden_size=5120, moe_intermediate_size=2304, num_attention_heads=64,
                head_dim=512, q_lora_rank=1280, o_groups=8, o_lora_rank=1024, n_routed_experts=384,
                num_experts_per_tok=6, index_n_heads=32, index_head_dim=128, index_topk=512, sliding_window=128,
                partial_rotary_factor=64 / 512)
    if tiny:  # about the goldens' tiny-a dims (make_goldens_v4.py), larger weights so that the check below is
        # sharp, 16 indexer heads: with 2, many index scores are exactly 0 after the ReLU and top-k's ties make
        # the selection depend on the sequence length (an uncached forward of a longer prefix then differs)
        dims = dict(vocab_size=1000, hidden_size=64, moe_intermediate_size=32, num_attention_heads=4, head_dim=32,
                    q_lora_rank=32, o_groups=2, o_lora_rank=16, n_routed_experts=8, num_experts_per_tok=2,
                    index_n_heads=16, index_head_dim=16, index_topk=4, sliding_window=8, partial_rotary_factor=8 / 32,
                    initializer_range=0.2)
    cfg = DeepseekV4Config(
        **dims, num_hidden_layers=layers, num_key_value_heads=1, n_shared_experts=1, scoring_func="sqrtsoftplus",
        norm_topk_prob=True, routed_scaling_factor=1.5, swiglu_limit=10.0, rms_norm_eps=1e-20, hc_mult=4,
        hc_sinkhorn_iters=20, hc_eps=1e-6, rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=1048576, tie_word_embeddings=False,
        layer_types=[ROLE_TYPES[r] for r in ratios], mlp_layer_types=["moe"] * layers,
        compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 1})
    cfg._attn_implementation = "eager"
    return cfg


def weight_bytes(layers: int, dtype_bytes: int = 2) -> int:
    """The model's parameter bytes at `layers` layers, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        m = DeepseekV4ForCausalLM(make_config(layers, tiny=False))
    return sum(p.numel() for p in m.parameters()) * dtype_bytes


def pick_layers(arg: str, reserve_gb: float) -> int:
    """--layers auto: as many Flash layers as leave `reserve_gb` of the free device memory for activations."""
    if arg != "auto":
        return int(arg)
    free, _ = torch.cuda.mem_get_info()
    one, two = weight_bytes(1), weight_bytes(2)
    per_layer, fixed = two - one, 2 * one - two
    return max(1, int((free - reserve_gb * 1e9 - fixed) // per_layer))


class Timer:
    """CUDA events on the GPU (the stream's time between two marks), perf_counter on the CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else 1e3 * (b - a)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


class LayerTimes:
    """A mark before and after every decoder layer: the milliseconds of each layer in the last forward."""

    def __init__(self, model, timer: Timer):
        self.timer, self.marks = timer, {}
        for i, layer in enumerate(model.model.layers):
            layer.register_forward_pre_hook(lambda mod, args, i=i: self.marks.__setitem__(i, [self.timer.mark()]))
            layer.register_forward_hook(lambda mod, args, out, i=i: self.marks[i].append(self.timer.mark()))

    def ms(self) -> list[float]:
        return [self.timer.ms(*self.marks[i]) for i in sorted(self.marks)]


def timed_forward(model, timer, layer_times, **kw):
    """One forward; returns (output, total ms, per-layer ms)."""
    a = timer.mark()
    out = model(**kw)
    b = timer.mark()
    timer.sync()
    return out, timer.ms(a, b), layer_times.ms()


def median_row(samples):
    """samples: [(total ms, [layer ms])] -> median total, per-layer medians, whether every sample's layers fit
    inside its total (they are nested marks: anything else means a hook missed a layer)."""
    total = statistics.median(s[0] for s in samples)
    per_layer = [statistics.median(s[1][i] for s in samples) for i in range(len(samples[0][1]))]
    return total, per_layer, all(sum(s[1]) <= s[0] + 0.01 for s in samples)


def fill_context(model, cache, ids, chunk_tokens: int):
    """Prefills ids [B, C] through the cache in chunks of about chunk_tokens tokens (eager attention's score
    tensors grow with batch x chunk x keys); returns the last chunk's last-position logits."""
    step = max(1, chunk_tokens // ids.shape[0])
    for s in range(0, ids.shape[1], step):
        out = model(input_ids=ids[:, s:s + step], past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]


def bench_prefill(model, timer, layer_times, vocab, tokens, reps, gen, device):
    ids = torch.randint(0, vocab, (1, tokens), generator=gen, device="cpu").to(device)
    samples = []
    for r in range(reps + 1):  # the first is a warm-up
        _, ms, lms = timed_forward(model, timer, layer_times, input_ids=ids, use_cache=True, logits_to_keep=1)
        if r:
            samples.append((ms, lms))
    total, per_layer, nested = median_row(samples)
    return {"prefill_tokens": tokens, "seconds": round(total / 1e3, 6), "tokens_per_s": round(tokens / total * 1e3, 1),
            "ms_per_layer": round(statistics.mean(per_layer), 3), "layer_ms": [round(x, 3) for x in per_layer],
            "min_seconds": round(min(s[0] for s in samples) / 1e3, 6), "layers_nested": nested}


def bench_decode(model, timer, layer_times, cfg, batch, context, steps, chunk_tokens, gen, device):
    ids = torch.randint(0, cfg.vocab_size, (batch, context), generator=gen, device="cpu").to(device)
    cache = DynamicCache(config=cfg)
    tok = fill_context(model, cache, ids, chunk_tokens).argmax(-1, keepdim=True)
    samples = []
    for s in range(steps + 2):  # two warm-up steps
        out, ms, lms = timed_forward(model, timer, layer_times, input_ids=tok, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)  # greedy, outside the timed region
        if s >= 2:
            samples.append((ms, lms))
    total, per_layer, nested = median_row(samples)
    return {"decode_batch": batch, "device_draws": False, "context": context, "step_seconds": round(total / 1e3, 6),
            "tokens_per_s": round(batch / total * 1e3, 1), "ms_per_layer": round(statistics.mean(per_layer), 3),
            "layer_ms": [round(x, 3) for x in per_layer], "min_step_seconds": round(min(s[0] for s in samples) / 1e3, 6),
            "layers_nested": nested}


@torch.no_grad()
def self_check() -> int:
    """--tiny: the timing loops' cache use is the model's: a context filled in chunks through DynamicCache, then
    decode steps, gives the logits of one uncached forward over the whole sequence (fp32, CPU); then every row of
    the benchmark runs at tiny dims and prints sane numbers."""
    torch.manual_seed(0)
    cfg = make_config(4, tiny=True)
    model = DeepseekV4ForCausalLM(cfg).float().eval()
    assert [l.self_attn.layer_type for l in model.model.layers] == [ROLE_TYPES[r] for r in (0, 0, 2, 1)]
    gen = torch.Generator().manual_seed(1)
    batch, context, decode = 3, 37, 4  # 37: a context not a multiple of the chunks, the window or the rate
    seq = torch.randint(0, cfg.vocab_size, (batch, context + decode), generator=gen)
    full = model(input_ids=seq, use_cache=False).logits  # [B, T, V]
    cache = DynamicCache(config=cfg)
    got = [fill_context(model, cache, seq[:, :context], chunk_tokens=batch * 10)]
    for t in range(context, context + decode):
        got.append(model(input_ids=seq[:, t:t + 1], past_key_values=cache, use_cache=True).logits[:, -1])
    want = full[:, context - 1:]
    err = max(((g - want[:, i]).abs().max() / want[:, i].abs().max()).item() for i, g in enumerate(got))
    print(f"tiny: chunked context + {decode} decode steps vs one uncached forward: max rel err {err:.2e}")
    assert err < 1e-4, f"cached logits differ from the uncached forward ({err})"
    assert full.std() > 0.1, "tiny logits too flat for the check to mean anything"
    timer, lt = Timer(False), LayerTimes(model, Timer(False))
    rows = [bench_prefill(model, timer, lt, cfg.vocab_size, 64, 2, gen, "cpu")]
    rows += [bench_decode(model, timer, lt, cfg, b, 40, 3, 64, gen, "cpu") for b in (1, 4)]
    for r in rows:
        print(json.dumps(r))
        assert len(r["layer_ms"]) == 4 and all(x > 0 for x in r["layer_ms"]) and r["layers_nested"]
    print("tiny self-check passed")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="self-check on the CPU at tiny dims")
    p.add_argument("--layers", default="auto", help="decoder layers, or auto: as many as fit with --reserve-gb")
    p.add_argument("--reserve-gb", type=float, default=30.0, help="device memory left for activations")
    p.add_argument("--prefills", default="1024,4096")
    p.add_argument("--batches", default="1,32,128")
    p.add_argument("--contexts", default="1024", help="context tokens before the decode steps")
    p.add_argument("--reps", type=int, default=3, help="prefill repetitions (median) after one warm-up")
    p.add_argument("--steps", type=int, default=5, help="timed decode steps (median) after two warm-ups")
    p.add_argument("--chunk-tokens", type=int, default=16384, help="tokens per forward when filling a context")
    a = p.parse_args()
    if a.tiny:
        return self_check()
    assert torch.cuda.is_available(), "needs a GPU (or --tiny)"
    t0 = time.perf_counter()
    layers = pick_layers(a.layers, a.reserve_gb)
    cfg = make_config(layers, tiny=False)
    torch.manual_seed(0)
    with torch.device("cuda"):  # random init in place on the device, in bf16: no host copy of the weights
        model = DeepseekV4ForCausalLM._from_config(cfg, dtype=torch.bfloat16).eval()
    torch.cuda.synchronize()
    head = {"load_seconds": round(time.perf_counter() - t0, 2), "device": "cuda", "layers": layers,
            "dim": cfg.hidden_size, "peer": "transformers DeepseekV4ForCausalLM", "transformers": transformers.__version__,
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "layer_types": cfg.layer_types,
            "attn_implementation": model.config._attn_implementation,
            "experts_implementation": model.config._experts_implementation,
            "weights_gb": round(sum(p.numel() * p.element_size() for p in model.parameters()) / 1e9, 2)}
    print(json.dumps(head), flush=True)
    timer = Timer(True)
    lt = LayerTimes(model, timer)
    gen = torch.Generator().manual_seed(1)
    csv = lambda s: [int(x) for x in s.split(",") if x]
    jobs = [({"prefill_tokens": t}, lambda t=t: bench_prefill(model, timer, lt, cfg.vocab_size, t, a.reps, gen, "cuda"))
            for t in csv(a.prefills)]
    jobs += [({"decode_batch": b, "context": c},
              lambda b=b, c=c: bench_decode(model, timer, lt, cfg, b, c, a.steps, a.chunk_tokens, gen, "cuda"))
             for c in csv(a.contexts) for b in csv(a.batches)]
    with torch.no_grad():
        for label, job in jobs:
            try:
                row = job()
            except torch.cuda.OutOfMemoryError as e:  # a row that does not fit says so; the others still run
                row = {**label, "error": "out of memory", "detail": str(e).splitlines()[0]}
            torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
    print(json.dumps({"max_memory_allocated_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2),
                      "total_seconds": round(time.perf_counter() - t0, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
