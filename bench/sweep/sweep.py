#!/usr/bin/env python3
"""The prefill/decode sweep of bench/run_sweep.sh: measured against floors, a table and two figures.

  prefill: one request of P prompt tokens (max_tokens=1), best of --reps; tokens/s = P / seconds.
  decode:  B requests decoding together; after every prefill is done, tokens/s over --decode-steps
           engine steps; per user = total / B.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floors  # noqa: E402


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def random_ids(n: int, vocab: int, rng: random.Random) -> list[int]:
    return [rng.randrange(100, min(vocab, 100000)) for _ in range(n)]


def prefill(llm, lengths, reps, vocab, rng):
    from deepinfer import SamplingParams
    sp = SamplingParams(max_tokens=1, temperature=0)
    rows = []
    for n in lengths:
        best = float("inf")
        for _ in range(reps):
            ids = random_ids(n, vocab, rng)
            t0 = time.perf_counter()
            llm.generate({"prompt_token_ids": ids}, sp, use_tqdm=False)
            best = min(best, time.perf_counter() - t0)
        rows.append({"prompt_tokens": n, "seconds": best, "tokens_per_s": n / best})
    return rows


def decode(llm, batches, steps, prompt_len, vocab, rng):
    from deepinfer import SamplingParams
    eng = llm.llm_engine
    rows = []
    for b in batches:
        sp = SamplingParams(max_tokens=steps + 8, temperature=0, ignore_eos=True)
        for i in range(b):
            eng.add_request(f"sweep-{b}-{i}", {"prompt_token_ids": random_ids(prompt_len, vocab, rng)}, sp)
        done: dict[str, int] = {}
        while len(done) < b:  # until every request has its first token (prefill over)
            for o in eng.step():
                if o.outputs[0].token_ids:
                    done[o.request_id] = len(o.outputs[0].token_ids)
        start = {k: v for k, v in done.items()}
        t0 = time.perf_counter()
        for _ in range(steps):
            for o in eng.step():
                done[o.request_id] = len(o.outputs[0].token_ids)
        dt = time.perf_counter() - t0
        tokens = sum(done[k] - start[k] for k in done)
        eng.abort_request([f"sweep-{b}-{i}" for i in range(b)])
        while eng.has_unfinished_requests():
            eng.step()
        rows.append({"batch": b, "seconds": dt, "tokens_per_s": tokens / dt, "tokens_per_s_per_user": tokens / dt / b})
    return rows


def _plot(path: Path, measured, floor, labels, floor_label: str, **axes) -> None:
    """One log-log figure: the measured curve (points labelled) and the floor beside it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*zip(*measured), "o-", label="measured")
    ax.plot(*zip(*floor), "--", label=floor_label)
    for text, xy in zip(labels, measured):
        ax.annotate(text, xy, fontsize=7)
    ax.set(xscale="log", yscale="log", **axes)
    ax.grid(True, which="both", alpha=0.3)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figures(pre, dec, out: Path, device: str) -> list[Path]:
    paths = [out / f"sweep_prefill_{device}.png", out / f"sweep_decode_{device}.png"]
    _plot(paths[0], [(r["prompt_tokens"], r["tokens_per_s"]) for r in pre],
          [(r["prompt_tokens"], r["floor_tokens_per_s"]) for r in pre], [], "floor (compute bound)",
          xlabel="prompt length (tokens)", ylabel="prefill tokens/s", title=f"Prefill throughput ({device})")
    _plot(paths[1], [(r["tokens_per_s"], r["tokens_per_s_per_user"]) for r in dec],
          [(r["floor_tokens_per_s"], r["floor_tokens_per_s_per_user"]) for r in dec],
          [f"B={r['batch']}" for r in dec], "floor", xlabel=f"decode tokens/s per {device}",
          ylabel="decode tokens/s per user", title=f"Decode across batch sizes ({device})")
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model folder (default: a demo model written by deepinfer make-demo-model)")
    p.add_argument("--prefill-lengths", type=ints, default=ints("64,128,256,512,1024,2048"))
    p.add_argument("--batch-sizes", type=ints, default=ints("1,2,4,8,16,32,64"))
    p.add_argument("--decode-steps", type=int, default=16)
    p.add_argument("--decode-prompt", type=int, default=32, help="prompt tokens of each decoding request")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench/results"), help="figures and sweep.json go here")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (floors: the host's measured rates, or the H200's)")
    p.add_argument("--load-format", default="auto", help="auto, or dummy: random weights from config.json alone "
                   "(e.g. a folder of `deepinfer make-demo-model DIR --flash-layers N`)")
    args = p.parse_args(argv)

    from deepinfer import LLM
    from deepinfer.cli import main as cli_main

    tmp = None
    if args.model is None:
        tmp = tempfile.TemporaryDirectory()
        args.model = os.path.join(tmp.name, "demo")
        if cli_main(["make-demo-model", args.model]) != 0:
            return 1
    device = args.device
    gpu = device.startswith("cuda")
    rates = floors.gpu_rates() if gpu else floors.machine_rates()
    model_dir = Path(args.model)
    work = floors.model_work(model_dir) if any(model_dir.glob("*.safetensors")) else floors.config_work(model_dir)
    t0 = time.perf_counter()
    llm = LLM(args.model, device=device, load_format=args.load_format, max_num_seqs=max(args.batch_sizes),
              max_model_len=max(args.prefill_lengths) + 64, max_num_batched_tokens=max(2048, max(args.prefill_lengths)))
    print(f"loaded {args.model} ({args.load_format}) on {device} in {time.perf_counter() - t0:.1f} s")
    vocab = llm._engine.vocab_size()
    rng = random.Random(0)
    pre = prefill(llm, args.prefill_lengths, args.reps, vocab, rng)
    for r in pre:
        r["floor_seconds"] = floors.prefill_floor_s(work, rates, r["prompt_tokens"])
        r["floor_tokens_per_s"] = r["prompt_tokens"] / r["floor_seconds"]
    dec = decode(llm, args.batch_sizes, args.decode_steps, args.decode_prompt, vocab, rng)
    for r in dec:
        step = floors.decode_step_floor_s(work, rates, r["batch"])
        r["floor_tokens_per_s"], r["floor_tokens_per_s_per_user"] = r["batch"] / step, 1 / step

    how = "H200: FP8 tensor-core peak, measured copy" if gpu else "numpy float32 GEMM, numpy copy"
    print(f"machine: {rates['flops_per_s'] / 1e9:.1f} GFLOP/s, {rates['bytes_per_s'] / 1e9:.1f} GB/s ({how}); "
          f"model: {floors.flops_per_token(work) / 1e6:.1f} MFLOP/token")
    print("\n| prefill tokens | measured s | floor s | tokens/s | floor tokens/s | floor/measured |\n|---|---|---|---|---|---|")
    for r in pre:
        print(f"| {r['prompt_tokens']} | {r['seconds']:.4f} | {r['floor_seconds']:.4f} | {r['tokens_per_s']:.0f} | "
              f"{r['floor_tokens_per_s']:.0f} | {r['floor_seconds'] / r['seconds']:.1%} |")
    print("\n| decode batch | tokens/s | per user | floor tokens/s | floor per user | floor/measured |\n|---|---|---|---|---|---|")
    for r in dec:
        print(f"| {r['batch']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s_per_user']:.1f} | {r['floor_tokens_per_s']:.0f} | "
              f"{r['floor_tokens_per_s_per_user']:.1f} | {r['tokens_per_s'] / r['floor_tokens_per_s']:.1%} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(json.dumps({"device": device, "rates": rates, "model_work": work,
                                                     "prefill": pre, "decode": dec}, indent=2))
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # (a GPU machine without it: the tables and sweep.json are the record)
        print("figures skipped: no matplotlib (pip install matplotlib)")
        return 0
    for path in figures(pre, dec, args.out, device):
        print(f"figure: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
