"""Soak with hostile traffic (issue 17, CI-sized): several threads add good, malformed and aborted
requests to one engine under a state budget tight enough to preempt, while one thread steps it.
Every good request finishes with exactly the tokens of a quiet run, every malformed one is refused
at submission with its error, every aborted one ends "abort" with a prefix of its tokens, and the
engine is idle and still serving afterwards."""
import random
import threading

from deepinfer import LLM, SamplingParams
from engine_helpers import GOLDENS

N_THREADS, PER_THREAD = 4, 150


def good_request(r, i):
    prompt = [r.randrange(1000) for _ in range(r.randint(1, 40))]
    params = SamplingParams(temperature=r.choice([0.0, 0.8]), top_k=r.choice([0, 20]), seed=i,
                            max_tokens=r.randint(1, 12), ignore_eos=True, logprobs=r.choice([None, 2]))
    return {"prompt_token_ids": prompt}, params


def malformed_request(r):
    """A request the engine must refuse at submission, and the exception type it raises."""
    return r.choice([
        ({"prompt_token_ids": [5, 10 ** 6]}, SamplingParams(max_tokens=2), ValueError),   # outside the vocabulary
        ({"prompt_token_ids": [5, 2.5]}, SamplingParams(max_tokens=2), TypeError),        # not an int
        ({"prompt_token_ids": []}, SamplingParams(max_tokens=2), ValueError),             # empty
        ({"prompt_token_ids": [5]}, SamplingParams(max_tokens=2, logprobs=500), ValueError),  # above max_logprobs
        ({"prompt_token_ids": [5]}, SamplingParams(max_tokens=2, n=10 ** 5), ValueError),  # n above max_num_seqs
        ({"prompt_token_ids": [5] * 600}, SamplingParams(max_tokens=2), ValueError),     # above max_model_len
    ])


def test_hostile_soak_loses_nothing_and_changes_no_output():
    llm = LLM(str(GOLDENS / "tiny-a"), num_state_blocks=60, max_num_seqs=32, max_model_len=512)
    eng = llm.llm_engine
    good, aborted, refused, errors = {}, set(), [], []
    lock = threading.Lock()
    adding = [N_THREADS]

    def client(t):
        r = random.Random(t)
        try:
            for k in range(PER_THREAD):
                rid = f"t{t}-{k}"
                kind = r.random()
                if kind < 0.2:
                    prompt, params, err = malformed_request(r)
                    try:
                        eng.add_request(rid, prompt, params)
                    except err as e:
                        with lock:
                            refused.append(str(e))
                        continue
                    raise AssertionError(f"{rid}: malformed request accepted")
                prompt, params = good_request(r, t * 1000 + k)
                eng.add_request(rid, prompt, params)
                with lock:
                    good[rid] = (prompt, params)
                if kind > 0.9:
                    eng.abort_request(rid)
                    with lock:
                        aborted.add(rid)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            with lock:
                adding[0] -= 1

    threads = [threading.Thread(target=client, args=(t,)) for t in range(N_THREADS)]
    for th in threads:
        th.start()
    finished = {}
    while True:
        for o in eng.step():
            if o.finished:
                assert o.request_id not in finished
                finished[o.request_id] = o
        with lock:
            done = adding[0] == 0
        if done and not eng.has_unfinished_requests():
            break
    for th in threads:
        th.join()
    assert not errors, errors
    assert len(refused) > 20 and all(refused)
    assert sorted(finished) == sorted(good)
    assert llm.stats()["preemptions"] > 0

    # The same good requests alone, without memory pressure or concurrency.
    quiet = LLM(str(GOLDENS / "tiny-a"), async_scheduling=False)
    ids = sorted(good)
    ref = quiet.generate([good[i][0] for i in ids], [good[i][1] for i in ids], use_tqdm=False)
    for rid, r in zip(ids, ref):
        got = finished[rid].outputs[0]
        want = r.outputs[0].token_ids
        if got.finish_reason == "abort":
            assert rid in aborted and got.token_ids == want[:len(got.token_ids)], rid
        else:
            assert got.finish_reason == "length" and got.token_ids == want, rid
    # Still serving, nothing left behind: no request, no sequence state, no state block.
    assert not llm._engine.has_unfinished()
    st = llm.stats()
    assert (st["state_blocks_reserved"], st["state_blocks_allocated"], st["live_states"]) == (0, 0, 0), st
    assert llm.generate({"prompt_token_ids": [1, 2, 3]}, SamplingParams(max_tokens=3), use_tqdm=False)[0].finished
