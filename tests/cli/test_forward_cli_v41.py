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


# Two tokens whose reference logits are closer than this are a near-tie: an engine within the goldens'
# tolerance (mean |dlogit| <= 0.05; the reference's own decode and prefill rows differ by up to 0.34) may pick
# either. The greedy goldens have such steps: tiny-b's step 10 (0.0033) flipped with another FMA contraction.
NEAR_TIE = 0.05


def decode_logits(tmp_path, d, prompt, tokens):
    """Logits of `deepinfer forward` for each generated position: the prompt prefilled, then one decode step
    per token (the generate path, one sequence)."""
    out = tmp_path / "greedy.safetensors"
    ids = list(prompt) + list(tokens[:-1])
    r = run("forward", "--model", d, "--input-ids", ",".join(map(str, ids)), "--decode-after", len(prompt),
            "--output", out)
    assert r.returncode == 0, r.stderr
    return load_file(str(out))["logits"][len(prompt) - 1:]


def agrees_outside_near_ties(logits, tokens):
    """Steps where `tokens` is not the argmax of `logits` although the best beats it by NEAR_TIE or more."""
    return [t for t, (row, tok) in enumerate(zip(logits, tokens)) if row.max() - row[tok] >= NEAR_TIE]


@pytest.mark.parametrize("case", ["tiny-a", "tiny-b"])
def test_generate_v41_greedy_matches_reference(tmp_path, case):
    """The engine end to end (scheduler, state manager, two prompts in flight) against the reference's 30-step
    greedy continuation. Exact where the reference's choice is clear: the engine's tokens equal the
    reference's up to the first step where they differ, and that step must be a near-tie of the reference's
    logits (no reference exists past it). Every step, before or after such a fork, is checked against logits:
    the teacher-forced decode on the reference's tokens picks the reference's token, and on the engine's own
    tokens the engine's token, at every step that is not a near-tie of those logits."""
    g = load_file(str(V41 / case / "goldens.safetensors"))
    d = model_dir(tmp_path, case)
    prompt, want, ref = g["greedy.prompt_ids"].tolist(), g["greedy.output_ids"].tolist(), g["greedy.logits"]
    r = run("generate", "--model", d, "--prompt-ids", ",".join(map(str, prompt)), "--prompt-ids",
            ",".join(map(str, prompt)), "--max-tokens", len(want), "--temperature", "0", "--ignore-eos", "--json")
    assert r.returncode == 0, r.stderr
    outs = [json.loads(line)["token_ids"] for line in r.stdout.splitlines() if line.strip()]
    assert len(outs) == 2 and outs[0] == outs[1] and len(outs[0]) == len(want)
    got = outs[0]
    forced = decode_logits(tmp_path, d, prompt, want)
    assert agrees_outside_near_ties(forced, want) == []
    fork = next((t for t in range(len(want)) if got[t] != want[t]), None)
    if fork is not None:
        assert ref[fork][want[fork]] - ref[fork][got[fork]] < NEAR_TIE, f"step {fork}: {got} vs {want}"
        assert agrees_outside_near_ties(decode_logits(tmp_path, d, prompt, got), got) == []


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
