"""PyTorch's version of bench_vit's tower (same shapes, bf16 weights and activations, random data): the
library time bench_vit prints beside its own. Patch embedding, per block RMSNorm -> qkv (bias) -> 2-D
rotate-half RoPE -> F.scaled_dot_product_attention -> wo (bias) -> residual, RMSNorm -> w1 -> SiLU gate
-> w2 -> residual; final RMSNorm; the 3x3 aligner (F.unfold, GELU-erf MLP). Eager mode, timed with CUDA
events after two warm-ups (median of `runs`); attention alone at [1, heads, N, 64] (median of 20).
    python3 torch_vit.py BLOCKS N_H N_W RUNS
"""
import statistics
import sys

import torch
import torch.nn.functional as F

D, HEADS, HD, FF, TEXT, PATCH = 1024, 16, 64, 2816, 5120, 3 * 14 * 14


def timed(fn, runs):
    times = []
    for i in range(runs + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main():
    blocks, n_h, n_w, runs = (int(a) for a in sys.argv[1:5])
    n = n_h * n_w
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)

    def lin(o, i):
        return torch.randn(o, i, device=dev, dtype=dt) / i**0.5

    def vec(k, mean=0.0):
        return mean + 0.1 * torch.randn(k, device=dev, dtype=dt)

    layers = [dict(n1=vec(D, 1), qkv=lin(3 * D, D), bqkv=vec(3 * D), wo=lin(D, D), bo=vec(D), n2=vec(D, 1),
                   w1=lin(2 * FF, D), w2=lin(D, FF)) for _ in range(blocks)]
    patch, bpatch, norm = lin(D, PATCH), vec(D), vec(D, 1)
    a1, b1, a2, b2 = lin(TEXT, 9 * D), vec(TEXT), lin(TEXT, TEXT), vec(TEXT)
    inv = 1.0 / 10000.0 ** (torch.arange(0, HD // 2, 2, device=dev, dtype=torch.float32) / (HD // 2))
    rows = torch.arange(n, device=dev) // n_w
    cols = torch.arange(n, device=dev) % n_w
    ang = torch.cat([rows[:, None] * inv, cols[:, None] * inv], dim=1)  # [n, HD / 2]
    cos = torch.cat([ang.cos(), ang.cos()], dim=1)[:, None, :].to(dt)  # [n, 1, HD]
    sin = torch.cat([ang.sin(), ang.sin()], dim=1)[:, None, :].to(dt)
    pixels = torch.rand(n, PATCH, device=dev, dtype=dt) * 2 - 1
    ph, pw = (-n_h) % 3, (-n_w) % 3

    def rope(x):  # [n, heads, HD]
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def tower():
        x = F.linear(pixels, patch, bpatch)
        for w in layers:
            h = F.rms_norm(x, (D,), w["n1"], 1e-6)
            q, k, v = F.linear(h, w["qkv"], w["bqkv"]).view(n, 3, HEADS, HD).unbind(1)
            q, k = rope(q), rope(k)
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                               v.transpose(0, 1)[None])
            x = x + F.linear(o[0].transpose(0, 1).reshape(n, D), w["wo"], w["bo"])
            g, u = F.linear(F.rms_norm(x, (D,), w["n2"], 1e-6), w["w1"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, w["w2"])
        h = F.rms_norm(x, (D,), norm, 1e-6).view(n_h, n_w, D).permute(2, 0, 1)[None]
        cells = F.unfold(F.pad(h, (0, pw, 0, ph)), 3, stride=3)[0].T  # [cells, 9 D], channel-major
        return F.linear(F.gelu(F.linear(cells, a1, b1)), a2, b2)

    with torch.no_grad():
        t_tower = timed(tower, runs)
        q, k, v = (torch.rand(1, HEADS, n, HD, device=dev, dtype=dt) * 2 - 1 for _ in range(3))
        t_attn = timed(lambda: F.scaled_dot_product_attention(q, k, v), 20)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"torch_tower_s {t_tower:.6f}")
    print(f"torch_attention_s {t_attn:.6f}")


if __name__ == "__main__":
    main()
