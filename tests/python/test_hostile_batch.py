"""One hostile request in a running batch (issue 17) changes no other request's output: while good
requests decode, the engine is sent a grammar refused as too complex, a grammar that leaves no token
allowed (it fails alone, at run time), a prompt past max_model_len, n past max_num_seqs, non-finite
logit biases, biases that overflow at the temperature, the largest n allowed, and a long prompt aborted
in the middle of its chunked prefill. The good requests must end with exactly the tokens they get
without that traffic (batch-invariant mode, so that batch composition alone changes no bit), and the
engine must end with no request, state or state block, still serving."""
import math

import pytest

from deepinfer import LLM, SamplingParams
from engine_helpers import CLI

pytestmark = pytest.mark.skipif(not CLI.exists(), reason="build/tools/deepinfer not built")

ENGINE = dict(max_num_seqs=12, max_num_batched_tokens=64, max_model_len=512, batch_invariant=True,
              enable_prefix_caching=False)
GOOD = {f"good{i}": ({"prompt_token_ids": [100 + i, 2000 + 7 * i, 300 + i, 41]},
                     dict(temperature=0.8 if i % 2 else 0.0, top_k=50, seed=i, max_tokens=10, ignore_eos=True,
                          logprobs=2))
        for i in range(4)}


def so(schema_type, schema):
    return {"schema_type": schema_type, "schema": schema}


# Refused at submission, mid-batch: (prompt, SamplingParams arguments, exception, message fragment).
REFUSED = [
    ({"prompt_token_ids": [5, 6]}, dict(max_tokens=4, so_args=so("regex", ".*a.{20}")), ValueError,
     "grammar too complex"),
    ({"prompt_token_ids": [5, 6]}, dict(max_tokens=4, so_args=so("json_schema", {"$ref": "#"})), ValueError,
     "recurses into itself"),
    ({"prompt_token_ids": [5] * 600}, dict(max_tokens=2), ValueError, "more than max_model_len"),
    ({"prompt_token_ids": [5]}, dict(max_tokens=2, n=13), ValueError, "above max_num_seqs = 12"),
]
NOT_FINITE_BIAS = [math.nan, math.inf, -math.inf, 1e39]  # 1e39 is inf as a float


def logprobs(out):
    return [sorted((t, lp.logprob, lp.rank) for t, lp in pos.items()) for pos in out.logprobs]


def step(eng, finished):
    for o in eng.step():
        if o.finished:
            assert o.request_id not in finished, o.request_id
            finished[o.request_id] = o


def drain(eng, finished):
    while eng.has_unfinished_requests():
        step(eng, finished)


def test_hostile_requests_in_a_running_batch_change_no_other_output(demo_model):
    quiet = LLM(demo_model, **ENGINE)
    ids = sorted(GOOD)
    ref = quiet.generate([GOOD[i][0] for i in ids], [SamplingParams(**GOOD[i][1]) for i in ids], use_tqdm=False)
    want = {rid: (r.outputs[0].token_ids, logprobs(r.outputs[0])) for rid, r in zip(ids, ref)}

    llm = LLM(demo_model, **ENGINE)
    eng = llm.llm_engine
    for rid in ids:
        eng.add_request(rid, GOOD[rid][0], SamplingParams(**GOOD[rid][1]))
    finished = {}
    for o in eng.step():  # the good requests are running from here on
        assert not o.finished
    # Accepted hostile requests: each runs beside the good ones.
    eng.add_request("dead_end", {"prompt_token_ids": [5, 6]},  # "yes", then only EOS, which min_tokens masks
                    SamplingParams(max_tokens=8, min_tokens=6, so_args=so("choice", ["yes"])))
    eng.add_request("overflow", {"prompt_token_ids": [7, 8]},  # best / T is +inf: two tokens tied at FLT_MAX
                    SamplingParams(max_tokens=6, temperature=0.5, seed=1, logit_bias={1000: 3.4e38, 1001: 3.4e38}))
    eng.add_request("tiny_t", {"prompt_token_ids": [7, 8]}, SamplingParams(max_tokens=3, temperature=1e-45, logprobs=3))
    eng.add_request("long_prefill", {"prompt_token_ids": list(range(10, 420))}, SamplingParams(max_tokens=4))
    step(eng, finished)
    eng.abort_request("long_prefill")  # 410 prompt tokens at most 64 a step: it is still prefilling
    eng.add_request("n_max", {"prompt_token_ids": [9, 10, 11]},
                    SamplingParams(n=12, max_tokens=3, temperature=1.0, seed=4))
    for k, (prompt, kw, err, needle) in enumerate(REFUSED):
        with pytest.raises(err, match=needle):
            eng.add_request(f"refused{k}", prompt, SamplingParams(**kw))
        step(eng, finished)
    for k, b in enumerate(NOT_FINITE_BIAS):
        with pytest.raises(ValueError, match="logit_bias for token 3 is not finite"):
            eng.add_request(f"bias{k}", {"prompt_token_ids": [5]}, SamplingParams(max_tokens=2, logit_bias={3: b}))
    drain(eng, finished)

    assert sorted(finished) == sorted(ids + ["dead_end", "overflow", "tiny_t", "long_prefill", "n_max"])
    for rid in ids:
        out = finished[rid].outputs[0]
        assert out.finish_reason == "length" and finished[rid].error is None, rid
        assert (out.token_ids, logprobs(out)) == want[rid], rid
    dead = finished["dead_end"]
    assert dead.outputs[0].finish_reason == "error" and "no token is allowed" in dead.error, dead
    assert len(dead.outputs[0].token_ids) < 6
    over = finished["overflow"].outputs[0]
    assert over.finish_reason == "length" and set(over.token_ids) == {1000, 1001}, over  # both drawn: no +inf tie
    tiny = finished["tiny_t"].outputs[0]
    for t, pos in zip(tiny.token_ids, tiny.logprobs):  # the T -> 0 limit (a best token), not the first +inf tie
        assert pos[t].logprob == max(lp.logprob for lp in pos.values()), (t, pos)
    aborted = finished["long_prefill"].outputs[0]
    assert aborted.finish_reason == "abort" and aborted.token_ids == []
    samples = finished["n_max"].outputs
    assert len(samples) == 12 and all(len(s.token_ids) == 3 and s.finish_reason == "length" for s in samples)

    # Nothing left behind, and still serving the good requests exactly.
    st = llm.stats()
    assert (st["state_blocks_reserved"], st["state_blocks_allocated"], st["live_states"]) == (0, 0, 0), st
    again = llm.generate([GOOD[i][0] for i in ids], [SamplingParams(**GOOD[i][1]) for i in ids], use_tqdm=False)
    assert [r.outputs[0].token_ids for r in again] == [want[i][0] for i in ids]
