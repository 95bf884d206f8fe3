#!/usr/bin/env python3
"""Floors beside bench_v41_shapes' measurements: the markdown table docs/performance.md records.

  report_shapes.py MODEL_DIR RESULTS.jsonl [--device cuda|cpu]

Floors (floors.py): prefill = the FP8 GEMM FLOPs of the prompt at the FP8 tensor-core peak (attention over
the context left out); a decode step = its weight bytes in the released formats at the measured copy
bandwidth (routed experts counted by the share B tokens x top-k can touch), or its FLOPs, whichever is
larger. On the CPU the host's measured numpy rates instead.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floors  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path)
    p.add_argument("results", type=Path)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    rows = [json.loads(line) for line in a.results.read_text().splitlines() if line.startswith("{")]
    work = floors.model_work(a.model) if any(a.model.glob("*.safetensors")) else floors.config_work(a.model)
    rates = floors.gpu_rates() if a.device.startswith("cuda") else floors.machine_rates()
    head = rows[0] if rows and "load_seconds" in rows[0] else {}
    print(f"model {a.model} ({head.get('layers', '?')} layers, dim {head.get('dim', '?')}), loaded in "
          f"{head.get('load_seconds', '?')} s; {floors.flops_per_token(work) / 1e9:.2f} GFLOP/token; rates "
          f"{rates['flops_per_s'] / 1e12:.0f} TFLOP/s, {rates['bytes_per_s'] / 1e12:.2f} TB/s")
    # (row key, seconds key, header, floor of n tokens / sequences)
    tables = [("prefill_tokens", "seconds", "| prefill tokens | measured ms |",
               lambda n: floors.prefill_floor_s(work, rates, n)),
              ("decode_batch", "step_seconds", "| decode batch | step ms |",
               lambda n: floors.decode_step_floor_s(work, rates, n))]
    for key, sec, header, floor in tables:
        print(f"\n{header} floor ms | tokens/s | floor/measured |\n|---|---|---|---|---|")
        for r in (r for r in rows if key in r):
            n, t = r[key], r[sec]
            label = f"{n} (device draws)" if r.get("device_draws") else f"{n}"
            print(f"| {label} | {1e3 * t:.2f} | {1e3 * floor(n):.3f} | {n / t:.0f} | {floor(n) / t:.2%} |")
    verify_table(rows)
    return 0


def verify_table(rows) -> None:
    """DSpark's cost side: verification step time by tokens per sequence, the draft's time, and the tokens/s
    per user a mean accepted length tau would give: tau / (verify(block + 1) + draft), against plain decoding's
    1 / step (a random-weight model accepts almost nothing, so tau is an input here, not a measurement)."""
    verify = [r for r in rows if "verify_batch" in r]
    if not verify:
        return
    drafts = {r["draft_batch"]: r for r in rows if "draft_batch" in r}
    plain = {(r["decode_batch"], bool(r.get("device_draws"))): r["step_seconds"] for r in rows if "decode_batch" in r}
    qs = sorted({r["tokens_per_seq"] for r in verify})
    print("\n| verify batch | " + " | ".join(f"{q} tok/seq ms" for q in qs) + " | draft ms |")
    print("|---" * (len(qs) + 2) + "|")
    modes = sorted({(r["verify_batch"], bool(r.get("device_draws"))) for r in verify})
    for b, dd in modes:
        t = {r["tokens_per_seq"]: r["step_seconds"] for r in verify
             if r["verify_batch"] == b and bool(r.get("device_draws")) == dd}
        d = drafts.get(b)
        cells = " | ".join(f"{1e3 * t[q]:.2f}" if q in t else "" for q in qs)
        label = f"{b} (device draws)" if dd else f"{b}"
        print(f"| {label} | {cells} | " + (f"{1e3 * d['seconds']:.2f}" if d else "") + " |")
    if not drafts:
        return
    taus = [1, 2, 3, 3.51, 4, 5]
    print("\n| batch | plain tokens/s per user | " + " | ".join(f"tau {t}" for t in taus) + " |")
    print("|---" * (len(taus) + 2) + "|")
    for b, dd in modes:
        d = drafts.get(b)
        if not d:
            continue
        t = {r["tokens_per_seq"]: r["step_seconds"] for r in verify
             if r["verify_batch"] == b and bool(r.get("device_draws")) == dd}
        q = d["block"] + 1 if d["block"] + 1 in t else max(t)
        step = t[q] + d["seconds"]
        base = f"{1 / plain[(b, dd)]:.1f}" if (b, dd) in plain else ""
        label = f"{b} (device draws)" if dd else f"{b}"
        print(f"| {label} | {base} | " + " | ".join(f"{tau / step:.1f}" for tau in taus) + " |")


if __name__ == "__main__":
    sys.exit(main())
