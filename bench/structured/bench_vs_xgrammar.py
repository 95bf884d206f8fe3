"""Structured output: deepinfer vs xgrammar on the same schemas, vocabulary and token sequences.

    pip install -r bench/requirements.txt   # xgrammar (pulls torch); benchmark only
    python3 bench/structured/bench_vs_xgrammar.py [--build build] [--repeats 3] [--xgr-threads 8]

Both engines get the V3 vocabulary as raw token bytes padded to 129,280 (added tokens as empty,
i.e. never text, EOS = 1) and walk the same real token sequences (HF tokenizers encoding of each
case's text). Prints compile time and per-token mask time (median, p99) and the ratios
xgrammar / deepinfer (> 1 means deepinfer is faster). xgrammar compiles with its default 8 threads
unless --xgr-threads says otherwise; deepinfer with its CPU thread pool (DEEPINFER_CPU_THREADS,
default: every core). deepinfer's mask time is taken in C++ around the call, xgrammar's in Python
around fill_next_token_bitmask, so it includes one binding call; the median time of a trivial
matcher call (is_terminated) is printed as that overhead.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "tests/data/tokenizer/deepseek-v3/tokenizer.json"
VOCAB = 129280


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def v3_vocab_bytes():
    data = json.loads(TOKENIZER.read_text())
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:] + [256 + n for n in range(256 - len(bs))]
    bs += [b for b in range(256) if b not in bs]
    inv = {chr(c): b for b, c in zip(bs, cs)}
    added = {a["id"] for a in data["added_tokens"]}  # control tokens: empty = never text
    vocab = [b""] * VOCAB
    for tok, i in data["model"]["vocab"].items():
        if i not in added:
            vocab[i] = bytes(inv[ch] for ch in tok)
    return vocab


def bench_xgrammar(cases, repeats, threads):
    import torch  # noqa: F401  (xgrammar's bitmask type)
    import tokenizers
    import xgrammar as xgr
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    info = xgr.TokenizerInfo(v3_vocab_bytes(), vocab_type=xgr.VocabType.RAW, vocab_size=VOCAB, stop_token_ids=[1])
    results = {}
    for c in cases:
        compile_ms = []
        for _ in range(repeats):
            compiler = xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=False)
            schema = c["schema"] if isinstance(c["schema"], str) else json.dumps(c["schema"])
            t0 = time.perf_counter()
            if c["schema_type"] == "json":
                g = compiler.compile_json_schema(schema, any_whitespace=False, separators=(",", ":"), strict_mode=False)
            elif c["schema_type"] == "json_object":
                g = compiler.compile_builtin_json_grammar()
            elif c["schema_type"] == "regex":
                g = compiler.compile_regex(schema)
            else:
                g = compiler.compile_grammar(schema)
            compile_ms.append((time.perf_counter() - t0) * 1e3)
        ids = tok.encode(c["text"], add_special_tokens=False).ids
        bitmask = xgr.allocate_token_bitmask(1, VOCAB)
        mask_us = []
        for _ in range(repeats):
            m = xgr.GrammarMatcher(g)
            for k, i in enumerate(ids):
                t0 = time.perf_counter()
                m.fill_next_token_bitmask(bitmask)
                mask_us.append((time.perf_counter() - t0) * 1e6)
                if not m.accept_token(i):
                    print(f"xgrammar rejects {c['name']} at token {k} ({tok.decode(ids[:k + 1])!r}); timings cover the prefix")
                    break
        results[c["name"]] = {"compile_ms": statistics.median(compile_ms), "mask_us_median": pct(mask_us, 0.5),
                              "mask_us_p99": pct(mask_us, 0.99)}
    m = xgr.GrammarMatcher(g)
    call_us = []
    for _ in range(2000):
        t0 = time.perf_counter()
        m.is_terminated()
        call_us.append((time.perf_counter() - t0) * 1e6)
    results["_call_us"] = pct(call_us, 0.5)
    try:
        from importlib.metadata import version
        results["_version"] = version("xgrammar")
    except Exception:  # noqa: BLE001  (only a label)
        results["_version"] = getattr(xgr, "__version__", "?")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--xgr-threads", type=int, default=8, help="xgrammar compile threads (its default is 8)")
    ap.add_argument("--cases", default=str(ROOT / "bench/structured/cases.json"))
    args = ap.parse_args()
    cases = json.loads(pathlib.Path(args.cases).read_text())
    exe = ROOT / args.build / "tests/structured/structured_bench"
    out = subprocess.run([str(exe), args.cases, str(args.repeats)], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    ours = {r["name"]: r for r in map(json.loads, out.splitlines())}
    try:
        theirs = bench_xgrammar(cases, args.repeats, args.xgr_threads)
    except ImportError as e:
        theirs = {}
        print(f"xgrammar not available ({e}); deepinfer numbers only. pip install -r bench/requirements.txt")
    threads = next(iter(ours.values()), {}).get("threads", "?")
    if theirs:
        print(f"xgrammar {theirs.pop('_version')} with {args.xgr_threads} compile threads; deepinfer with {threads};"
              f" xgrammar's Python call overhead (is_terminated) {theirs.pop('_call_us'):.2f} us")
    print(f"{'case':18} {'compile ms':>22} {'mask median us':>24} {'mask p99 us':>24}")
    print(f"{'':18} {'ours / xgr / ratio':>22} {'ours / xgr / ratio':>24} {'ours / xgr / ratio':>24}")
    for name, o in ours.items():
        x = theirs.get(name)
        cols = []
        for k in ("compile_ms", "mask_us_median", "mask_us_p99"):
            cols.append(f"{o[k]:.2f} / {x[k]:.2f} / {x[k] / max(o[k], 1e-9):.2f}x" if x else f"{o[k]:.2f} / - / -")
        print(f"{name:18} {cols[0]:>22} {cols[1]:>24} {cols[2]:>24}")


if __name__ == "__main__":
    main()
