"""DSpark speculative decoding through LLM(speculative=...) and `deepinfer generate --speculative` on the demo
model (random-weight V4.1 with the real V4 tokenizer and its DSpark head): outputs with speculation are token
for token those without it (greedy, seeded sampling, a batch, structured output), the metrics are reported,
and misuse is a clear error."""
import json
import subprocess

import pytest

from deepinfer import LLM, SamplingParams
from engine_helpers import CLI

pytestmark = pytest.mark.skipif(not CLI.exists(), reason="build/tools/deepinfer not built")

PROMPTS = ["The quick brown fox", "1, 2, 3, 4,", "def main():", "Bonjour"]


@pytest.fixture(scope="module")
def engines(demo_model):
    base = dict(max_num_seqs=4, max_model_len=256)
    return {
        "off": LLM(demo_model, **base),
        "fixed": LLM(demo_model, speculative={"num_draft_tokens": 4, "schedule": "fixed"}, **base),  # the demo's block: 4
        # default draft count (min(5, block)); the start-up profile measures this engine's forward (1 .. 4 * 5 tokens)
        "confidence": LLM(demo_model, speculative={"schedule": "confidence"}, **base),
    }


def tokens(outs):
    return [[c.token_ids for c in o.outputs] for o in outs]


def test_greedy_and_seeded_outputs_are_unchanged(engines):
    params = [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
              SamplingParams(temperature=0.9, top_k=40, seed=7, max_tokens=12, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
              SamplingParams(temperature=1.0, seed=3, n=2, max_tokens=9, ignore_eos=True)]
    want = tokens(engines["off"].generate(PROMPTS, params, use_tqdm=False))
    for name in ("fixed", "confidence"):
        outs = engines[name].generate(PROMPTS, params, use_tqdm=False)
        assert tokens(outs) == want, name
        m = outs[0].metrics.speculative
        assert m.decode_steps >= 1 and m.drafted > 0
        assert len(outs[0].outputs[0].token_ids) == 1 + m.decode_steps + m.accepted
        assert 0 <= m.mean_accepted_length - 1 <= 4
    fixed = engines["fixed"].generate(PROMPTS[0], params[0], use_tqdm=False)[0].metrics.speculative
    # every decode step verifies 4 but never past max_tokens (the step making the last token verifies none)
    assert fixed.verified <= 4 * fixed.decode_steps and fixed.verified_at[0] >= fixed.decode_steps - 1
    assert fixed.verified_at[3] >= fixed.decode_steps - 4
    assert len(fixed.acceptance_by_position) == 4
    off = engines["off"].generate(PROMPTS[0], params[0], use_tqdm=False)[0].metrics.speculative
    assert off.verified == 0 and off.decode_steps == 0


def test_structured_output_with_drafts(engines):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 6}},
              "required": ["a", "b"], "additionalProperties": False}
    p = SamplingParams(temperature=0.8, seed=11, max_tokens=60,
                       so_args={"schema_type": "json_schema", "schema": json.dumps(schema)})
    want = engines["off"].generate(PROMPTS[:2], p, use_tqdm=False)
    got = engines["fixed"].generate(PROMPTS[:2], p, use_tqdm=False)
    assert tokens(got) == tokens(want)
    for o in got:
        if o.outputs[0].finish_reason == "stop":
            value = json.loads(o.outputs[0].text)
            assert set(value) == {"a", "b"} and isinstance(value["a"], int)


def test_misuse_is_refused(demo_model):
    with pytest.raises(ValueError, match="block size"):
        LLM(demo_model, speculative=9)
    with pytest.raises(ValueError, match="draft count"):
        LLM(demo_model, speculative=0)
    with pytest.raises(ValueError, match="only 'dspark'"):
        LLM(demo_model, speculative={"method": "eagle"})
    with pytest.raises(ValueError, match="unknown keys"):
        LLM(demo_model, speculative={"k": 3})
    with pytest.raises(TypeError):
        LLM(demo_model, speculative="yes")


def test_cli_speculative_json_metrics(demo_model):
    args = [str(CLI), "generate", "--model", demo_model, "--prompt", "Hello there", "--temperature", "0",
            "--max-tokens", "8", "--ignore-eos", "--json", "--max-model-len", "128"]
    plain = subprocess.run(args, capture_output=True, text=True, timeout=300)
    spec = subprocess.run(args + ["--speculative", "4", "--speculative-schedule", "fixed"], capture_output=True,
                          text=True, timeout=300)
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    a, b = json.loads(plain.stdout), json.loads(spec.stdout)
    assert a["token_ids"] == b["token_ids"]
    m = b["metrics"]["speculative"]
    assert 0 < m["verified"] <= 4 * m["decode_steps"] and 1 + m["decode_steps"] + m["accepted"] == 8
    assert len(m["acceptance_by_position"]) == 4
    assert a["metrics"]["speculative"]["verified"] == 0
