"""`deepinfer forward` on DeepSeek-V4.1 folders (tests/data/goldens/v41): the Engram token map is built from
the folder's tokenizer.json. The goldens use a synthetic tokenizer (token strings in goldens.json), so the
test writes an equivalent byte-level BPE tokenizer.json (each token's UTF-8 bytes in GPT-2's byte-level
alphabet, so that decoding one id gives back the string) next to links to the case's config and weights.
Tolerances: the goldens README (mean |dlogit| <= 0.05, argmax agreement >= 0.95, max <= 1e-2 for S <= 5)."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"
V41 = ROOT / "tests/data/goldens/v41"

pytestmark = pytest.mark.skipif(not BIN.exists(), reason="deepinfer CLI not built")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def model_dir(tmp_path, case):
    strings = json.loads((V41 / case / "goldens.json").read_text())["engram"]["token_strings"]
    table = bytes_to_unicode()
    vocab = {"".join(table[b] for b in s.encode("utf-8")): i for i, s in enumerate(strings)}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    d = tmp_path / case
    d.mkdir()
    (d / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    for f in ("config.json", "model.safetensors"):
        (d / f).symlink_to(V41 / case / f)
    return d


def run(*args):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("case", ["tiny-a", "tiny-b"])
@pytest.mark.parametrize("S,mode,key", [(5, [], "prefill_logits"), (17, [], "prefill_logits"),
                                         (17, ["--chunk", "7"], "prefill_logits"),
                                         (17, ["--decode-after", "8"], "decode_logits")])
def test_forward_v41_matches_reference(tmp_path, case, S, mode, key):
    g = load_file(str(V41 / case / "goldens.safetensors"))
    ids = g[f"s{S}.input_ids"]
    if key == "decode_logits":
        assert g[f"s{S}.decode_prefix_len"][0] == 8
    out = tmp_path / "out.safetensors"
    r = run("forward", "--model", model_dir(tmp_path, case), "--input-ids", ",".join(map(str, ids)), *mode,
            "--output", out)
    assert r.returncode == 0, r.stderr
    logits = load_file(str(out))["logits"]
    want = g[f"s{S}.{key}"]
    assert logits.shape == want.shape
    d = np.abs(logits.astype(np.float64) - want)
    assert d.mean() <= 0.05
    assert (logits.argmax(-1) == want.argmax(-1)).mean() >= 0.95
    if S <= 5:
        assert d.max() <= 1e-2


def test_forward_v41_without_tokenizer_names_it(tmp_path):
    r = run("forward", "--model", V41 / "tiny-a", "--input-ids", "5,6", "--output", tmp_path / "o.st")
    assert r.returncode != 0
    assert "tokenizer.json" in r.stderr


@pytest.mark.parametrize("case", ["tiny-a", "tiny-b"])
def test_generate_v41_greedy_matches_reference(tmp_path, case):
    """The engine end to end (scheduler, state manager, two prompts in flight): greedy tokens of the
    reference's 30-step continuation."""
    g = load_file(str(V41 / case / "goldens.safetensors"))
    prompt = ",".join(map(str, g["greedy.prompt_ids"]))
    r = run("generate", "--model", model_dir(tmp_path, case), "--prompt-ids", prompt, "--prompt-ids", prompt,
            "--max-tokens", "30", "--temperature", "0", "--ignore-eos", "--json")
    assert r.returncode == 0, r.stderr
    outs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(outs) == 2
    for o in outs:
        assert o["token_ids"] == [int(t) for t in g["greedy.output_ids"]]


def test_loading_shows_progress_when_asked(tmp_path):
    """DEEPINFER_PROGRESS=1: one progress line per loaded layer on stderr (a log, not a terminal), ending at
    all layers; 0 (and auto when stderr is not a terminal) prints none; a bad value is named."""
    d = model_dir(tmp_path, "tiny-b")
    layers = 6 + 1  # tiny-b: 6 layers and 1 DSpark stage (num_nextn_predict_layers)
    args = ["forward", "--model", d, "--input-ids", "5,6", "--output", tmp_path / "o.st"]
    env = dict(os.environ, DEEPINFER_PROGRESS="1")
    r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("loading DeepSeek-V4.1 [")]
    assert len(lines) == layers + 1, r.stderr
    assert f" {layers}/{layers} layers" in lines[-1] and "[" + "=" * 30 + "]" in lines[-1]
    for value in ("0", "auto"):
        r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                           env=dict(os.environ, DEEPINFER_PROGRESS=value))
        assert r.returncode == 0 and "loading DeepSeek-V4.1" not in r.stderr, r.stderr
    r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                       env=dict(os.environ, DEEPINFER_PROGRESS="sometimes"))
    assert r.returncode != 0 and "DEEPINFER_PROGRESS" in r.stderr
