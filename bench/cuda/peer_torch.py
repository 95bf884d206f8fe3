"""Peer timings for bench_cuda_kernels, on the same GPU in the same run: the ceilings (copy, bf16 and FP8
GEMM at 8192^3 on random data) and, per fp8_gemm shape, torch's bf16 matmul and torch._scaled_mm with
DeepSeek-style block scales (1x128 activations, 128x128 weights: cuBLASLt's block-scaled FP8 on SM90;
it has no 32x32 mode). Prints PEER|name|shape|us and CEIL|name|value lines for report.py.
    python3 bench/cuda/peer_torch.py [--quick | --moe | --moe-prefill | --indexer | --attention]
"""
import sys

import torch

QUICK = "--quick" in sys.argv
MOE_PREFILL = "--moe-prefill" in sys.argv  # the routed-expert peers at prefill sizes and the GEMM ceilings
MOE_ONLY = "--moe" in sys.argv or MOE_PREFILL  # the routed-expert peers only
INDEXER_ONLY = "--indexer" in sys.argv  # the top-k and sparse attention peers only
ATTENTION_ONLY = "--attention" in sys.argv  # the sparse attention and candidate-block peers only
REPS = 10 if QUICK else 30
PROJS = [("q_a", 5120, 1280), ("q_b", 1280, 32768), ("o_b", 8192, 5120), ("sh_gate_up", 5120, 4608),
         ("sh_down", 2304, 5120)]
MS = [1, 64, 4096] if QUICK else [1, 8, 32, 64, 256, 4096, 16384]
ROTATE = 4 * 60 * 2**20


def time_us(fn, copies, graph=False):
    """Per-call microseconds. graph=False: median of REPS event-timed single calls after 3 warm-ups.
    graph=True: REPS calls captured in one CUDA graph, median of 5 replays / REPS (as bench_cuda_kernels).
    Call i uses operand copy i % copies."""
    for i in range(3):
        fn(i % copies)
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(REPS):
                fn(i % copies)
        g.replay()
        torch.cuda.synchronize()
    times = []
    for i in range(5 if graph else REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        if graph:
            g.replay()
        else:
            fn(i % copies)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (REPS if graph else 1))
    return sorted(times)[len(times) // 2]


def blockwise_variants():
    """Ways this torch may spell cuBLASLt's DeepSeek-style FP8 GEMM (1x128 activations, 128x128 weights)."""
    import torch.nn.functional as F
    out = []
    st = getattr(F, "ScalingType", None)
    if st is not None and hasattr(F, "scaled_mm"):
        r1 = next((getattr(st, n) for n in ("BlockWise1x128", "Blockwise_1x128") if hasattr(st, n)), None)
        r2 = next((getattr(st, n) for n in ("BlockWise128x128", "Blockwise_128x128") if hasattr(st, n)), None)
        if r1 is not None and r2 is not None:
            out.append(("F.scaled_mm", lambda x, wt, sa, sb: F.scaled_mm(x, wt, sa, r1, sb, r2, output_dtype=torch.bfloat16)))
    out.append(("_scaled_mm", lambda x, wt, sa, sb: torch._scaled_mm(x, wt, sa, sb, out_dtype=torch.bfloat16)))
    return out


def fp8(shape):
    return (torch.rand(shape, device="cuda") * 8 - 4).to(torch.float8_e4m3fn)


def main():
    dev = torch.cuda.get_device_name(0)
    print(f"peer: torch {torch.__version__} on {dev}")
    if MOE_PREFILL:  # the FLOP floors of prefill rows: the FP8 rate, and the bf16 one (the kernel's MMA there)
        n = 8192
        a8, b8 = fp8((n, n)), fp8((n, n))
        one = torch.ones((), device="cuda")
        print(f"CEIL|fp8_tflops|{2 * n**3 / time_us(lambda i: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16), 1) * 1e-6:.1f}")
        del a8, b8
        a16, b16 = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        print(f"CEIL|bf16_tflops|{2 * n**3 / time_us(lambda i: a16 @ b16, 1) * 1e-6:.1f}")
        del a16, b16
    if MOE_ONLY:
        return moe_peers()
    if ATTENTION_ONLY:
        a16, b16 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16), torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        print(f"CEIL|bf16_tflops|{2 * 8192**3 / time_us(lambda i: a16 @ b16, 1) * 1e-6:.1f}")
        a32, b32 = a16.float(), b16.float()
        print(f"CEIL|fp32_tflops|{2 * 8192**3 / time_us(lambda i: a32 @ b32, 1) * 1e-6:.1f}")
        del a16, b16, a32, b32
        candidate_peers()
        return attention_peers()
    if INDEXER_ONLY:
        a32, b32 = torch.randn(8192, 8192, device="cuda"), torch.randn(8192, 8192, device="cuda")
        print(f"CEIL|fp32_tflops|{2 * 8192**3 / time_us(lambda i: a32 @ b32, 1) * 1e-6:.1f}")
        a16, b16 = a32.bfloat16(), b32.bfloat16()
        print(f"CEIL|bf16_tflops|{2 * 8192**3 / time_us(lambda i: a16 @ b16, 1) * 1e-6:.1f}")
        del a32, b32, a16, b16
        topk_peers()
        score_peers()
        return attention_peers()
    x = torch.empty(2**31, dtype=torch.uint8, device="cuda").random_(1, 255)
    y = torch.empty_like(x)
    print(f"CEIL|torch_copy_tb_s|{2 * 2**31 / time_us(lambda i: y.copy_(x), 1) * 1e-6:.3f}")
    del x, y
    n = 8192
    a16, b16 = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    print(f"CEIL|bf16_tflops|{2 * n**3 / time_us(lambda i: a16 @ b16, 1) * 1e-6:.1f}")
    a8, b8 = fp8((n, n)), fp8((n, n))
    one = torch.ones((), device="cuda")
    print(f"CEIL|fp8_tflops|{2 * n**3 / time_us(lambda i: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16), 1) * 1e-6:.1f}")
    del a16, b16, a8, b8
    variants, errors = blockwise_variants(), set()
    for name, k, nn in PROJS:
        for m in MS:
            shape = f"{name} m{m} k{k} n{nn}"
            graph = m <= 256
            copies = max(1, min(16, ROTATE // (m * k + nn * k) + 1))
            w16 = [torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
            x16 = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
            print(f"PEER|torch bf16 matmul|{shape}|{time_us(lambda i: x16[i] @ w16[i].t(), copies, graph):.2f}")
            del w16, x16
            w8 = [fp8((nn, k)) for _ in range(copies)]
            x8 = [fp8((m, k)) for _ in range(copies)]
            sa = [(torch.rand(m, k // 128, device="cuda") + 0.5).t().contiguous().t() for _ in range(copies)]
            # 128x128 weight scales as cuBLASLt wants them (seen in torch's refusals): [n/128, K blocks
            # padded to 4] row-major, passed transposed; then the plain layouts as fallbacks.
            kpad = (k // 128 + 3) // 4 * 4
            sbs = [(torch.rand(nn // 128, kpad, device="cuda") + 0.5).t()[: k // 128],
                   (torch.rand(nn // 128, kpad, device="cuda") + 0.5).t(),
                   (torch.rand(k // 128, nn // 128, device="cuda") + 0.5).contiguous()]
            done = False
            for vname, call in variants:
                for sb in sbs:
                    if done:
                        break
                    try:
                        call(x8[0], w8[0].t(), sa[0], sb)
                        us = time_us(lambda i: call(x8[i], w8[i].t(), sa[i], sb), copies, graph)
                        print(f"PEER|torch {vname} fp8 1x128/128x128 (cuBLASLt)|{shape}|{us:.2f}")
                        done = True
                    except Exception as e:  # say each distinct refusal once
                        msg = f"{vname} scale_b {tuple(sb.shape)}: {str(e).splitlines()[0][:160]}"
                        if msg not in errors:
                            errors.add(msg)
                            print(f"peer: blockwise refused ({shape}): {msg}")
            del w8, x8, sa, sbs
    attention_peers()
    moe_peers()


def attention_peers():
    """Sparse attention with sink in plain torch bf16: gather the rows, two batched matmuls, softmax with
    the sink as an extra logit (the issue's torch baseline)."""
    h, d, k, n = 64, 512, 640, 65536
    pool = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
    sink = torch.zeros(h, device="cuda")
    for t in [64, 256, 1024]:
        q = torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16)
        idx = torch.randint(0, n, (t, k), device="cuda")

        def run(i):
            rows = pool[idx]  # [t, k, d]
            s = torch.bmm(q, rows.transpose(1, 2)).float() * 0.04  # [t, h, k]
            s = torch.cat([s, sink.view(1, h, 1).expand(t, h, 1)], dim=2)
            p = torch.softmax(s, dim=2)[:, :, :k].to(torch.bfloat16)
            return torch.bmm(p, rows)

        print(f"PEER|torch gather+bmm+softmax bf16|t{t} h64 d512 k640|{time_us(run, 1, False):.2f}")


def candidate_peers():
    """V4.1's candidate blocks in plain torch: block maxima, topk(2048) of them, the chosen blocks' columns
    (bench_cuda_kernels' candidate_mask rows; torch.topk's CUDA tie order, not the CPU's)."""
    n, bs, kb = 32768, 8, 2048
    for t in [64, 1024]:
        s = (torch.randn(t, n, device="cuda").abs() * 3).bfloat16().float()

        def run(i):
            bm = s.view(t, n // bs, bs).amax(2)
            top = torch.topk(bm, kb, dim=1, sorted=False).indices
            f = torch.zeros(t, n // bs, dtype=torch.uint8, device="cuda").scatter_(1, top, 1)
            return f.repeat_interleave(bs, dim=1)

        print(f"PEER|torch amax+topk+scatter|t{t} n{n} b8 top2048|{time_us(run, 1, t <= 256):.2f}")


def topk_peers():
    """torch.topk(k=512, sorted=False) over the same score shapes as bench_cuda_kernels' index_topk rows."""
    for t, n in [(1, 8192), (64, 8192), (256, 8192), (4096, 8192), (1, 32768), (64, 32768), (1, 262144), (64, 262144)]:
        for bf16 in (False, True):
            x = torch.randn(t, n, device="cuda").abs() * 3
            if bf16:
                x = x.bfloat16().float()
            us = time_us(lambda i: torch.topk(x, 512, dim=1, sorted=False), 1, t <= 256)
            print(f"PEER|torch.topk fp32{' (bf16 values)' if bf16 else ''}|t{t} n{n} k512|{us:.2f}")


def score_peers():
    """The indexer scores in plain torch fp32: gather the key rows, one batched matmul, ReLU, bf16 roundings,
    the per-head weights, the sum over heads (bench_cuda_kernels' index_scores rows)."""
    h, d, n = 32, 128, 2**20
    arena = torch.randn(n, d, device="cuda")
    for t, w, shared in [(1, 8192, False), (64, 8192, False), (1, 65536, False), (64, 65536, False), (1024, 8192, True)]:
        rows = torch.randint(0, n, (w,) if shared else (t, w), device="cuda")
        q, wt = torch.randn(t, h, d, device="cuda"), torch.rand(t, h, 1, device="cuda")

        def run(i):
            if shared:
                dots = torch.matmul(q.view(t * h, d), arena[rows].t()).view(t, h, w)
            else:
                dots = torch.bmm(q, arena[rows].transpose(1, 2))
            terms = (dots.bfloat16().float().clamp_min(0) * wt).bfloat16().float()
            return terms.sum(dim=1).bfloat16()

        us = time_us(run, 1, not shared and t * w <= 2**22)
        print(f"PEER|torch gather+matmul+relu+sum fp32|t{t} w{w} h32 d128{' shared' if shared else ''}|{us:.2f}")


def moe_peers():
    # Routed experts: torch's grouped bf16 GEMM (no FP4 on Hopper in torch) over the active experts only,
    # with a routing drawn the same way as bench_cuda_kernels (6 distinct experts per token, 384 experts).
    gen = torch.Generator().manual_seed(7)
    for name, k, nn in [("experts_gate_up", 5120, 4608), ("experts_down", 2304, 5120)]:
        ms = [1024, 2048, 4096, 8192, 16384] if MOE_PREFILL else [1, 64, 4096] if QUICK else [1, 8, 32, 64, 512, 4096]
        for m in ms:
            shape = f"{name} m{m} top6 E384 k{k} n{nn}"
            picks = torch.stack([torch.randperm(384, generator=gen)[:6] for _ in range(m)]).flatten()
            sizes = torch.bincount(picks, minlength=384)
            sizes = sizes[sizes > 0]
            try:
                a = torch.randn(int(sizes.sum()), k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(len(sizes), nn, k, device="cuda", dtype=torch.bfloat16)
                offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
                us = time_us(lambda i: torch._grouped_mm(a, b.transpose(-2, -1), offs=offs), 1, m <= 256)
                print(f"PEER|torch _grouped_mm bf16 ({len(sizes)} experts)|{shape}|{us:.2f}")
                del a, b
            except Exception as e:
                print(f"peer: _grouped_mm refused ({shape}): {str(e).splitlines()[0][:160]}")
    print("peer: done")


if __name__ == "__main__":
    main()
