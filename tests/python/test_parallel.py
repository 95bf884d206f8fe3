"""Attention DP and MoE expert parallelism through LLM on the demo model (V4.1, 8 routed experts):
LLM(data_parallel_size=N, enable_expert_parallel=True) runs N engine ranks as CPU threads in
lock-step; greedy outputs equal one engine's; misuse is a clear error; the CLI's --dp / --ep. Context
parallelism (context_parallel_size=N, --cp N) likewise."""
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


def test_expert_parallel_with_and_without_async_scheduling(demo_model, single):
    # async (the default): each rank keeps one forward in flight between steps, so they pair up.
    for on in [True, False]:
        assert run(demo_model, data_parallel_size=2, enable_expert_parallel=True, async_scheduling=on) == single


def test_dp_without_expert_parallel_and_ep_alone(demo_model, single):
    assert run(demo_model, data_parallel_size=2) == single
    assert run(demo_model, enable_expert_parallel=True) == single  # EP over one rank


def test_expert_parallel_with_speculation_equals_one_engine(demo_model, single):
    # DSpark drafts on each rank alone; verification rides in the lock-step forward; lossless greedy.
    for schedule in ["fixed", "confidence"]:
        spec = {"num_draft_tokens": 3, "schedule": schedule}
        assert run(demo_model, data_parallel_size=2, enable_expert_parallel=True, speculative=spec) == single
    out = LLM(demo_model, max_model_len=256, data_parallel_size=2, enable_expert_parallel=True,
              speculative=3).generate(PROMPTS[0], GREEDY, use_tqdm=False)[0]
    assert out.metrics.speculative.verified > 0


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


# Balanced context parallelism: every forward's tokens split over the ranks (the long prompts make
# the split matter; zigzag and round-robin, chunked prefill, replay and failures: test_v41_context_parallel).
LONG = ["The quick brown fox jumps over the lazy dog " * 6, "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"]


def test_context_parallel_equals_one_engine(demo_model, single):
    assert run(demo_model, context_parallel_size=2) == single
    want = LLM(demo_model, max_model_len=256).generate(LONG, GREEDY, use_tqdm=False)
    for kw in [dict(context_parallel_size=2), dict(context_parallel_size=4, context_parallel_layout="round_robin"),
               dict(context_parallel_size=3, max_num_batched_tokens=16)]:  # prompts in chunks of 16
        got = LLM(demo_model, max_model_len=256, **kw).generate(LONG, GREEDY, use_tqdm=False)
        assert [(o.outputs[0].token_ids, o.outputs[0].cumulative_logprob) for o in got] == \
            [(o.outputs[0].token_ids, o.outputs[0].cumulative_logprob) for o in want], kw


def test_context_parallel_with_speculation_equals_one_engine(demo_model, single):
    # rank 0 drafts alone (its state holds the whole sequence); the verification forward is split.
    for schedule in ["fixed", "confidence"]:
        spec = {"num_draft_tokens": 3, "schedule": schedule}
        assert run(demo_model, context_parallel_size=2, speculative=spec) == single
    out = LLM(demo_model, max_model_len=256, context_parallel_size=2, speculative=3).generate(
        PROMPTS[0], GREEDY, use_tqdm=False)[0]
    assert out.metrics.speculative.verified > 0  # drafts were made on rank 0 and verified


def test_context_parallel_with_dp_and_ep_equals_one_engine(demo_model, single):
    # dp groups of cp ranks; with EP the experts split over all dp * cp ranks (bitwise, on tiny-a:
    # test_v41_context_parallel). Long prompts so that the split matters.
    want = LLM(demo_model, max_model_len=256).generate(LONG + PROMPTS[:2], GREEDY, use_tqdm=False)
    for kw in [dict(context_parallel_size=2, enable_expert_parallel=True),
               dict(context_parallel_size=2, data_parallel_size=2),
               dict(context_parallel_size=2, data_parallel_size=2, enable_expert_parallel=True,
                    context_parallel_layout="round_robin", max_num_batched_tokens=16)]:
        got = LLM(demo_model, max_model_len=256, **kw).generate(LONG + PROMPTS[:2], GREEDY, use_tqdm=False)
        assert [(o.outputs[0].token_ids, o.outputs[0].cumulative_logprob) for o in got] == \
            [(o.outputs[0].token_ids, o.outputs[0].cumulative_logprob) for o in want], kw
    spec = {"num_draft_tokens": 3, "schedule": "fixed"}  # rank 0 of each CP group drafts alone
    assert run(demo_model, context_parallel_size=2, data_parallel_size=2, enable_expert_parallel=True,
               speculative=spec) == single


def test_context_parallel_env_and_misuse(demo_model, single, monkeypatch):
    with pytest.raises(ValueError, match="context_parallel_size"):
        LLM(demo_model, context_parallel_size=0)
    with pytest.raises(TypeError, match="context_parallel_size"):
        LLM(demo_model, context_parallel_size="2")
    with pytest.raises(ValueError, match="do not split evenly over 6 ranks"):  # EP spans dp * cp ranks
        LLM(demo_model, context_parallel_size=3, data_parallel_size=2, enable_expert_parallel=True)
    with pytest.raises(ValueError, match="CPU threads"):
        LLM(demo_model, context_parallel_size=2, data_parallel_size=2, device="cuda")
    with pytest.raises(ValueError, match="CPU threads"):
        LLM(demo_model, context_parallel_size=2, device="cuda")
    with pytest.raises(ValueError, match="layout 'ring'"):
        LLM(demo_model, context_parallel_size=2, context_parallel_layout="ring")
    monkeypatch.setenv("DEEPINFER_CONTEXT_PARALLEL_SIZE", "2")
    monkeypatch.setenv("DEEPINFER_CONTEXT_PARALLEL_LAYOUT", "round_robin")
    assert run(demo_model) == single


@pytest.mark.skipif(not CLI.exists(), reason="build/tools/deepinfer not built")
def test_cli_cp(demo_model, single):
    args = ["generate", "--model", demo_model, "--max-tokens", "5", "--temperature", "0", "--ignore-eos",
            "--max-model-len", "256", "--json", "--cp", "2", "--cp-layout", "zigzag"]
    for p in PROMPTS[:3]:
        args += ["--prompt", p]
    for extra in [[], ["--dp", "2", "--ep"]]:  # cp alone; dp 2 x cp 2 with EP over the 4 ranks
        out = subprocess.run([str(CLI)] + args + extra, capture_output=True, text=True, timeout=300, check=True)
        got = [json.loads(line)["token_ids"] for line in out.stdout.splitlines() if line.startswith("{")]
        assert got == [s[0] for s in single[:3]], extra
