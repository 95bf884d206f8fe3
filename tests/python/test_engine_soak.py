"""Soak: 1000 requests of mixed lengths and parameters on the tiny golden model, under a state
budget tight enough to preempt, all finish with a finish reason and the right number of tokens,
identical to a run without memory pressure."""
import random

from deepinfer import LLM, SamplingParams
from engine_helpers import GOLDENS


def workload():
    r = random.Random(0)
    prompts, params = [], []
    for i in range(1000):
        prompts.append({"prompt_token_ids": [r.randrange(1000) for _ in range(r.randint(1, 48))]})
        params.append(SamplingParams(
            temperature=r.choice([0.0, 0.7, 1.0]), top_p=r.choice([1.0, 0.9]), top_k=r.choice([0, 20]),
            min_p=r.choice([0.0, 0.05]), repetition_penalty=r.choice([1.0, 1.2]), seed=i,
            max_tokens=r.randint(1, 16), min_tokens=r.choice([0, 1]), ignore_eos=bool(i % 2),
            stop_token_ids=[7, 8, 9] if i % 5 == 0 else None, logprobs=1 if i % 7 == 0 else None))
    return prompts, params


def test_thousand_requests_finish_right_and_match_an_unpressured_run():
    prompts, params = workload()
    tight = LLM(str(GOLDENS / "tiny-a"), num_state_blocks=60, max_num_seqs=64)
    outs = tight.generate(prompts, params, use_tqdm=False)
    assert tight.stats()["preemptions"] > 0
    for o, sp in zip(outs, params):
        c = o.outputs[0]
        assert o.finished and c.finish_reason in ("length", "stop"), (o.request_id, c.finish_reason)
        if c.finish_reason == "length":
            assert len(c.token_ids) == sp.max_tokens
        else:
            assert sp.min_tokens <= len(c.token_ids) <= sp.max_tokens
            assert c.token_ids[-1] in (sp.stop_token_ids or []) or (not sp.ignore_eos and c.token_ids[-1] == 1)
    roomy = LLM(str(GOLDENS / "tiny-a"), async_scheduling=False)
    ref = roomy.generate(prompts, params, use_tqdm=False)
    assert roomy.stats()["preemptions"] == 0
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in ref]
