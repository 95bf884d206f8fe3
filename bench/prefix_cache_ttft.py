#!/usr/bin/env python3
"""Time to first token with a cold and a warm prompt prefix (prefix caching, docs/prefix_caching.md).

Each request is PREFIX shared tokens + SUFFIX own tokens, generating one token (its time is the time to
first token). Cold: a prefix never seen (caching on, and caching off). Warm: the prefix of a request that
ran before, so only the suffix is prefilled. Floor: a cold request of the suffix alone, the work a warm
request cannot skip (its attention over the cached prefix comes on top). No other library runs DeepSeek
V4.1 on the CPU to compare with.

  python3 bench/prefix_cache_ttft.py [--model DIR] [--prefix 2048] [--suffix 32] [--repeats 3] [--device cpu|cuda]
Without --model it makes the demo model (deepinfer make-demo-model) in a temporary folder. With SWA bounded
replay on (the default) a warm request also recomputes its prompt's decoder window (the last
DEEPINFER_YOCO_PREFILL_KEEP_TOKENS tokens, rounded out to a block): the cached and prefilled counts are printed.
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from deepinfer import LLM, SamplingParams  # noqa: E402


def tokens(seed: int, n: int, vocab: int = 1000) -> list[int]:
    return [(seed * 7919 + j * 104729) % vocab + 10 for j in range(n)]


def ttft(llm: LLM, prompt: list[int]) -> tuple[float, int]:
    """Seconds to the first token, and the prompt tokens the cache served."""
    t = time.perf_counter()
    out = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    return time.perf_counter() - t, out[0].metrics.num_cached_tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--prefix", type=int, default=2048)
    ap.add_argument("--suffix", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = ap.parse_args()
    model = args.model
    if model is None:
        model = os.path.join(tempfile.mkdtemp(prefix="deepinfer-demo-"), "model")
        subprocess.run([sys.executable, "-m", "deepinfer", "make-demo-model", model], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    on = LLM(model, max_model_len=args.prefix + args.suffix + 8, device=args.device)
    off = LLM(model, max_model_len=args.prefix + args.suffix + 8, enable_prefix_caching=False, device=args.device)
    ttft(on, tokens(999, 16))  # warm-up (thread pools, first allocations)
    ttft(off, tokens(999, 16))
    rows = {"cold (cache off)": [], "cold (cache on)": [], "warm (cache on)": [], "floor (suffix alone)": []}
    cached = []
    for r in range(args.repeats):
        prefix = tokens(100 + r, args.prefix)
        rows["cold (cache off)"].append(ttft(off, prefix + tokens(200 + r, args.suffix))[0])
        rows["cold (cache on)"].append(ttft(on, prefix + tokens(300 + r, args.suffix))[0])
        s, c = ttft(on, prefix + tokens(400 + r, args.suffix))
        rows["warm (cache on)"].append(s)
        cached.append(c)
        rows["floor (suffix alone)"].append(ttft(off, tokens(500 + r, args.suffix))[0])
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"prefix caching TTFT on {args.device}, {args.prefix}-token shared prefix + {args.suffix}-token suffix, "
          f"median of {args.repeats} (model {model})")
    for k, v in med.items():
        print(f"  {k:22s} {v * 1e3:10.1f} ms")
    total = args.prefix + args.suffix
    print(f"  warm requests' cached tokens: {cached} (prefilled: {[total - c for c in cached]})")
    print(f"  speedup cold/warm (cache on): {med['cold (cache on)'] / med['warm (cache on)']:.1f}x; "
          f"warm / floor: {med['warm (cache on)'] / med['floor (suffix alone)']:.2f}")
    return 0 if all(c > 0 for c in cached) else 1


if __name__ == "__main__":
    sys.exit(main())
