"""Attention DP and MoE expert parallelism through LLM on the demo model (V4.1, 8 routed experts):
LLM(data_parallel_size=N, enable_expert_parallel=True) runs N engine ranks as CPU threads in
lock-step; greedy outputs equal one engine's; misuse is a clear error; the CLI's --dp / --ep."""
import json
import subprocess

import pytest

from engine_helpers import CLI
from deepinfer import LLM, SamplingParams

PROMPTS = ["Hello there", "The capital of France is", "1 2 3 4 5", "def f(x):", "a", "Once upon a time"]
GREEDY = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True, logprobs=1)


def run(model, **kw):
    outs = LLM(model, max_model_len=256, **kw).generate(PROMPTS, GREEDY, use_tqdm=False)
    return [(o.outputs[0].token_ids, o.outputs[0].cumulative_logprob) for o in outs]


@pytest.fixture(scope="module")
def single(demo_model):
    return run(demo_model)


def test_dp_with_expert_parallel_equals_one_engine(demo_model, single):
    # 4 and 8 ranks, idle ranks and aborts: data_parallel_v41_test / test_v41_expert_parallel (C++).
    assert run(demo_model, data_parallel_size=2, enable_expert_parallel=True) == single


def test_dp_without_expert_parallel_and_ep_alone(demo_model, single):
    assert run(demo_model, data_parallel_size=2) == single
    assert run(demo_model, enable_expert_parallel=True) == single  # EP over one rank


def test_env_variables_set_the_defaults(demo_model, single, monkeypatch):
    monkeypatch.setenv("DEEPINFER_DATA_PARALLEL_SIZE", "2")
    monkeypatch.setenv("DEEPINFER_ENABLE_EXPERT_PARALLEL", "1")
    monkeypatch.setenv("DEEPINFER_EPLB_INTERVAL", "2")
    monkeypatch.setenv("DEEPINFER_EPLB_REDUNDANT_EXPERTS", "2")
    assert run(demo_model) == single


def test_misuse_is_a_clear_error(demo_model, monkeypatch):
    with pytest.raises(ValueError, match="data_parallel_size"):
        LLM(demo_model, data_parallel_size=0)
    with pytest.raises(TypeError, match="data_parallel_size"):
        LLM(demo_model, data_parallel_size="2")
    with pytest.raises(ValueError, match="do not split evenly over 3 ranks"):
        LLM(demo_model, data_parallel_size=3, enable_expert_parallel=True)
    with pytest.raises(ValueError, match="only 8 routed experts"):
        LLM(demo_model, data_parallel_size=16, enable_expert_parallel=True)
    with pytest.raises(ValueError, match="CPU threads"):
        LLM(demo_model, data_parallel_size=2, device="cuda")
    with pytest.raises(ValueError, match="speculative decoding"):
        LLM(demo_model, data_parallel_size=2, enable_expert_parallel=True, speculative=True)
    monkeypatch.setenv("DEEPINFER_EPLB_REDUNDANT_EXPERTS", "3")
    with pytest.raises(ValueError, match="3 redundant slots do not split evenly over 2 ranks"):
        LLM(demo_model, data_parallel_size=2, enable_expert_parallel=True)


@pytest.mark.skipif(not CLI.exists(), reason="build/tools/deepinfer not built")
def test_cli_dp_ep(demo_model, single):
    args = ["generate", "--model", demo_model, "--max-tokens", "5", "--temperature", "0", "--ignore-eos",
            "--max-model-len", "256", "--json", "--dp", "2", "--ep"]
    for p in PROMPTS[:3]:
        args += ["--prompt", p]
    out = subprocess.run([str(CLI)] + args, capture_output=True, text=True, timeout=300, check=True)
    got = [json.loads(line)["token_ids"] for line in out.stdout.splitlines() if line.startswith("{")]
    assert got == [s[0] for s in single[:3]]
    bad = subprocess.run([str(CLI), "generate", "--model", demo_model, "--prompt", "x", "--dp", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--dp" in bad.stderr
