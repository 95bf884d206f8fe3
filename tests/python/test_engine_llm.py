"""deepinfer.LLM on the tiny golden V4 models: exactness through the engine, batching, seeds,
batch invariance, preemption, async on/off, the vLLM-shaped API and its error paths."""
import json
import os
import pathlib
import threading

import pytest

from deepinfer import LLM, CompletionOutput, RequestOutput, SamplingParams
from engine_helpers import GOLDENS, TOKENIZER, golden


def greedy(n, **kw):
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, **kw)


@pytest.fixture(scope="module")
def tiny_a():
    return LLM(str(GOLDENS / "tiny-a"))


def filler_prompts(k, vocab=777):
    return [{"prompt_token_ids": [(i * 37 + j * 11) % vocab for j in range(3 + 9 * i)]} for i in range(k)]


@pytest.mark.parametrize("case", ["tiny-a", "tiny-b"])
def test_greedy_reproduces_the_golden_alone_and_in_a_batch(case):
    prompt, expect = golden(case)
    llm = LLM(str(GOLDENS / case))
    out = llm.generate({"prompt_token_ids": prompt}, greedy(len(expect)), use_tqdm=False)
    assert out[0].outputs[0].token_ids == expect
    # Inside a batch of other requests with other parameters, at several positions.
    others = filler_prompts(5)
    prompts = others[:2] + [{"prompt_token_ids": prompt}] + others[2:]
    params = [SamplingParams(temperature=0.9, top_p=0.8, seed=i, max_tokens=7 + i) for i in range(2)]
    params += [greedy(len(expect))] + [SamplingParams(max_tokens=30, seed=9, logprobs=2)] * 3
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert outs[2].outputs[0].token_ids == expect
    assert [len(o.outputs[0].token_ids) for o in outs[:2]] == [7, 8]


def test_outputs_have_vllm_shape_and_input_order(tiny_a):
    prompts = filler_prompts(4)
    outs = tiny_a.generate(prompts, SamplingParams(max_tokens=5, seed=3, logprobs=2, prompt_logprobs=1),
                           use_tqdm=False)
    assert [o.prompt_token_ids for o in outs] == [p["prompt_token_ids"] for p in prompts]
    for o in outs:
        assert isinstance(o, RequestOutput) and o.finished and o.error is None
        c = o.outputs[0]
        assert isinstance(c, CompletionOutput)
        assert c.index == 0 and c.finish_reason == "length" and c.stop_reason is None
        assert len(c.token_ids) == 5 and c.text == ""  # no tokenizer: text stays empty
        assert len(c.logprobs) == 5
        for tok, pos in zip(c.token_ids, c.logprobs):
            assert tok in pos and len(pos) >= 2
            assert all(lp.logprob <= 0 for lp in pos.values())
        assert c.cumulative_logprob == pytest.approx(sum(pos[t].logprob for t, pos in zip(c.token_ids, c.logprobs)))
        assert o.prompt_logprobs[0] is None and len(o.prompt_logprobs) == len(o.prompt_token_ids)
    assert len({o.request_id for o in outs}) == 4


def test_seeded_sampling_is_identical_alone_in_batches_and_orders(tiny_a):
    needle = {"prompt_token_ids": [5, 17, 99, 3, 250, 7]}
    sp = SamplingParams(temperature=1.2, top_p=0.95, top_k=50, seq_seed=1234, max_tokens=24, ignore_eos=True)
    alone = tiny_a.generate(needle, sp, use_tqdm=False)[0].outputs[0].token_ids
    for k in (1, 4):
        others = filler_prompts(k)
        for pos in (0, k):
            prompts = others[:pos] + [needle] + others[pos:]
            params = [SamplingParams(temperature=1.0, seed=77 + i, max_tokens=20) for i in range(k + 1)]
            params[pos] = sp
            outs = tiny_a.generate(prompts, params, use_tqdm=False)
            assert outs[pos].outputs[0].token_ids == alone
    other = tiny_a.generate(needle, SamplingParams(temperature=1.2, top_p=0.95, top_k=50, seed=1235, max_tokens=24,
                                                   ignore_eos=True), use_tqdm=False)
    assert other[0].outputs[0].token_ids != alone


def test_batch_invariant_logprobs_are_bitwise_identical():
    llm = LLM(str(GOLDENS / "tiny-a"), batch_invariant=True)
    assert llm.engine_options()["batch_invariant"]
    needle = {"prompt_token_ids": [(7 * j) % 1000 for j in range(70)]}
    sp = SamplingParams(temperature=0, max_tokens=12, logprobs=5, prompt_logprobs=5, ignore_eos=True)

    def lps(out):
        c = out.outputs[0]
        return [sorted((t, l.logprob) for t, l in pos.items()) for pos in c.logprobs + out.prompt_logprobs[1:]]

    alone = lps(llm.generate(needle, sp, use_tqdm=False)[0])
    others = filler_prompts(6, 1000)
    outs = llm.generate(others[:3] + [needle] + others[3:], [SamplingParams(max_tokens=9, seed=1)] * 3 + [sp] +
                        [SamplingParams(max_tokens=9, seed=2)] * 3, use_tqdm=False)
    assert lps(outs[3]) == alone  # exact float equality, not approx


def test_preemption_and_async_do_not_change_greedy_outputs():
    prompt, expect = golden("tiny-a")
    prompts = [{"prompt_token_ids": prompt}] + filler_prompts(5, 1000)
    ref = None
    # 36 blocks admit two tiny-a sequences (16 blocks at the first token) but cannot grow both to 22 (at 43
    # to 60 tokens): sequences preempt each other.
    for kw in ({}, {"async_scheduling": False}, {"num_state_blocks": 36},
               {"num_state_blocks": 36, "async_scheduling": False}):
        llm = LLM(str(GOLDENS / "tiny-a"), **kw)
        outs = llm.generate(prompts, greedy(len(expect)), use_tqdm=False)
        ids = [o.outputs[0].token_ids for o in outs]
        assert ids[0] == expect
        if "num_state_blocks" in kw:
            assert llm.stats()["preemptions"] > 0
        ref = ref or ids
        assert ids == ref


def test_async_scheduling_env_switch(monkeypatch):
    monkeypatch.setenv("DEEPINFER_ASYNC_SCHEDULING", "0")
    assert not LLM(str(GOLDENS / "tiny-a")).engine_options()["async_scheduling"]
    monkeypatch.delenv("DEEPINFER_ASYNC_SCHEDULING")
    assert LLM(str(GOLDENS / "tiny-a")).engine_options()["async_scheduling"]


def test_n_samples_and_per_prompt_params(tiny_a):
    outs = tiny_a.generate([{"prompt_token_ids": [1, 2, 3]}] * 2,
                           [SamplingParams(n=3, seed=5, max_tokens=6), greedy(4)], use_tqdm=False)
    assert [c.index for c in outs[0].outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in outs[0].outputs}) > 1
    assert len(outs[1].outputs) == 1 and len(outs[1].outputs[0].token_ids) == 4


def test_stop_token_ids_and_max_model_len(tiny_a):
    prompt, expect = golden("tiny-a")
    out = tiny_a.generate({"prompt_token_ids": prompt}, greedy(40, stop_token_ids=[expect[5]]), use_tqdm=False)
    c = out[0].outputs[0]
    first = expect.index(expect[5])
    assert c.token_ids == expect[:first + 1]
    assert c.finish_reason == "stop" and c.stop_reason == expect[5]
    short = LLM(str(GOLDENS / "tiny-a"), max_model_len=len(prompt) + 3)
    c = short.generate({"prompt_token_ids": prompt}, greedy(40), use_tqdm=False)[0].outputs[0]
    assert c.token_ids == expect[:3] and c.finish_reason == "length"


def test_errors_are_clear_and_the_engine_keeps_serving(tiny_a):
    with pytest.raises(ValueError, match="empty"):
        tiny_a.generate({"prompt_token_ids": []}, use_tqdm=False)
    with pytest.raises(ValueError, match="no tokenizer"):
        tiny_a.generate("hello", use_tqdm=False)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match="so_args"):
        SamplingParams(so_args={"schema_type": "yaml", "schema": "x"})
    with pytest.raises(ValueError, match="disagree"):
        SamplingParams(seed=1, seq_seed=2)
    with pytest.raises(ValueError, match="vocabulary"):
        tiny_a.generate([{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [5000]}], use_tqdm=False)
    with pytest.raises(ValueError, match="SamplingParams for"):
        tiny_a.generate([{"prompt_token_ids": [1]}] * 3, [SamplingParams()] * 2, use_tqdm=False)
    short = LLM(str(GOLDENS / "tiny-a"), max_model_len=8)
    with pytest.raises(ValueError, match="max_model_len"):
        short.generate({"prompt_token_ids": list(range(10))}, use_tqdm=False)
    with pytest.raises(ValueError, match="neither a folder nor"):
        LLM("/no/such/folder/anywhere")
    with pytest.raises(TypeError, match="unknown engine arguments"):
        LLM(str(GOLDENS / "tiny-a"), no_such_argument=1)
    SamplingParams(so_args={"schema_type": "json", "schema": {"type": "object"}})  # accepted
    out = tiny_a.generate({"prompt_token_ids": [1, 2]}, greedy(3), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3  # still serving after all that


def test_generate_releases_the_gil(tiny_a):
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    tiny_a.generate(filler_prompts(6, 1000), SamplingParams(max_tokens=40, seed=1, ignore_eos=True), use_tqdm=False)
    stop.set()
    t.join()
    assert len(ticks) > 3


def test_progress_bar_counts_prompts(tiny_a, capsys):
    tiny_a.generate(filler_prompts(3, 1000), SamplingParams(max_tokens=2), use_tqdm=True)
    assert "3/3" in capsys.readouterr().err


@pytest.fixture(scope="module")
def with_tokenizer(tmp_path_factory):
    """tiny-a's weights with the DeepSeek-V3 tokenizer: short ASCII text encodes to ids < 1000."""
    d = tmp_path_factory.mktemp("tiny-a-tok")
    for f in ("config.json", "model.safetensors"):
        os.symlink(GOLDENS / "tiny-a" / f, d / f)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.symlink(TOKENIZER / f, d / f)
    return LLM(str(d))


def test_text_prompts_detokenize_and_stop_strings_cross_token_boundaries(with_tokenizer):
    llm = with_tokenizer
    free = llm.generate("a, b. c", greedy(30), use_tqdm=False)[0]
    c = free.outputs[0]
    assert free.prompt == "a, b. c" and free.prompt_token_ids == llm.encode("a, b. c")
    assert c.text == llm.decode(c.token_ids)
    pieces = [llm.decode(c.token_ids[:i]) for i in range(len(c.token_ids) + 1)]
    # A stop string made of the last character of one token and the first of the next.
    cut = next(i for i in range(2, 25) if len(pieces[i]) > len(pieces[i - 1]) and len(pieces[i + 1]) > len(pieces[i]))
    stop = pieces[cut][-1] + pieces[cut + 1][len(pieces[cut])]
    at = c.text.find(stop)
    out = llm.generate("a, b. c", greedy(30, stop=stop), use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == c.text[:at]
    out = llm.generate("a, b. c", greedy(30, stop=[stop], include_stop_str_in_output=True), use_tqdm=False)[0]
    assert out.outputs[0].text == c.text[:at + len(stop)]


STRUCTURED = [
    ({"schema_type": "regex", "schema": "[abc]{3,8}\\."}, r"[abc]{3,8}\."),
    ({"schema_type": "choice", "schema": ["yes", "no way"]}, r"yes|no way"),
]


def test_structured_output_is_enforced(with_tokenizer):
    import re

    for so, pattern in STRUCTURED:
        outs = with_tokenizer.generate(["a, b. c"] * 4, [SamplingParams(max_tokens=40, seed=i, so_args=so)
                                                         for i in range(4)], use_tqdm=False)
        for o in outs:
            assert o.outputs[0].finish_reason == "stop"
            assert re.fullmatch(pattern, o.outputs[0].text), o.outputs[0].text
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                               "b": {"type": "boolean"}}, "required": ["a", "b"]}
    jsonschema = pytest.importorskip("jsonschema")
    outs = with_tokenizer.generate(["a, b. c"] * 3, [SamplingParams(max_tokens=60, seed=i, so_args={
        "schema_type": "json", "schema": schema}) for i in range(3)], use_tqdm=False)
    for o in outs:
        jsonschema.validate(__import__("json").loads(o.outputs[0].text), schema)
    with pytest.raises(ValueError, match="so_args"):
        with_tokenizer.generate("a", SamplingParams(so_args={"schema_type": "regex", "schema": "(unclosed"}),
                                use_tqdm=False)


def test_structured_output_same_with_async_on_and_off(with_tokenizer):
    so = {"schema_type": "regex", "schema": "[abc]{3,8}\\."}
    a = with_tokenizer.generate(["a, b. c"] * 3, [SamplingParams(max_tokens=40, seed=i, so_args=so) for i in range(3)],
                                use_tqdm=False)
    sync = LLM(with_tokenizer.model_dir, async_scheduling=False)
    b = sync.generate(["a, b. c"] * 3, [SamplingParams(max_tokens=40, seed=i, so_args=so) for i in range(3)],
                      use_tqdm=False)
    assert [o.outputs[0].token_ids for o in a] == [o.outputs[0].token_ids for o in b]


def test_chat_renders_the_deepseek_prompt(with_tokenizer):
    try:
        with_tokenizer.chat([{"role": "user", "content": "a b"}], SamplingParams(max_tokens=3), use_tqdm=False)
    except ValueError as e:
        if "no chat encoding" in str(e):
            pytest.skip("the tokenizer library has no chat encoding in this build")
        # tiny-a's 1000-token vocabulary cannot hold the chat format's special tokens
        assert "outside the vocabulary" in str(e)
        return
    pytest.fail("a 1000-token model accepted the chat special tokens")


def test_chat_prompts_follow_the_deepseek_format(demo_model):
    llm = LLM(demo_model)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    try:
        plain, think = (llm.chat(msgs, SamplingParams(max_tokens=3, seed=1), use_tqdm=False,
                                 chat_template_kwargs=kw)[0] for kw in ({}, {"thinking": True}))
    except ValueError as e:
        if "no chat encoding" in str(e):
            pytest.skip("the tokenizer library has no chat encoding in this build")
        raise
    text = llm.decode(plain.prompt_token_ids, skip_special_tokens=False)
    # The demo is V4.1 (V4 without the V4 tokenizer); V4.1's chat format opens a system prompt with <｜System｜>.
    v41 = json.loads((pathlib.Path(demo_model) / "config.json").read_text())["model_type"] == "deepseek_v41"
    system = "<｜System｜>" if v41 else ""
    assert text.startswith(f"<｜begin▁of▁sentence｜>{system}Be brief.<｜User｜>Hi there<｜Assistant｜>")
    assert text.endswith("</think>")
    assert llm.decode(think.prompt_token_ids, skip_special_tokens=False).endswith("<think>")
    assert len(plain.outputs[0].token_ids) <= 3
    with pytest.raises(ValueError, match="unknown keys"):
        llm.chat(msgs, use_tqdm=False, chat_template_kwargs={"temperature": 1})


def test_concurrent_generate_calls_each_get_their_own_results(tiny_a):
    results = {}

    def worker(k):
        prompts = [{"prompt_token_ids": [k, k + 1, k + 2 + i]} for i in range(5)]
        results[k] = tiny_a.generate(prompts, SamplingParams(max_tokens=6, seed=k, ignore_eos=True), use_tqdm=False)

    threads = [threading.Thread(target=worker, args=(k,)) for k in (10, 20, 30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, outs in results.items():
        assert [o.prompt_token_ids[0] for o in outs] == [k] * 5
        alone = tiny_a.generate(outs[0].prompt_token_ids and {"prompt_token_ids": outs[0].prompt_token_ids},
                                SamplingParams(max_tokens=6, seed=k, ignore_eos=True), use_tqdm=False)
        assert alone[0].outputs[0].token_ids == outs[0].outputs[0].token_ids


def test_detokenize_off_and_batch_invariant_with_a_small_budget(with_tokenizer):
    out = with_tokenizer.generate("a, b. c", SamplingParams(max_tokens=4, seed=1, detokenize=False), use_tqdm=False)
    assert out[0].outputs[0].text == "" and len(out[0].outputs[0].token_ids) == 4
    with pytest.raises(ValueError, match="detokenize"):
        SamplingParams(stop=["x"], detokenize=False)
    llm = LLM(str(GOLDENS / "tiny-a"), batch_invariant=True, max_num_batched_tokens=16)
    outs = llm.generate([{"prompt_token_ids": list(range(100))}] * 2, greedy(3), use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 3]


def test_state_memory_budget_in_bytes(monkeypatch):
    prompts = [{"prompt_token_ids": list(range(1 + i, 60))} for i in range(6)]
    ref = LLM(str(GOLDENS / "tiny-a")).generate(prompts, greedy(20), use_tqdm=False)
    small = LLM(str(GOLDENS / "tiny-a"), state_memory_bytes=200_000)  # room for one sequence at a time
    blocks = small.engine_options()["num_state_blocks"]
    assert blocks == 200_000 // small.engine_options()["state_block_bytes"]
    outs = small.generate(prompts, greedy(20), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in ref]
    monkeypatch.setenv("DEEPINFER_STATE_MEMORY_MB", "1")
    assert LLM(str(GOLDENS / "tiny-a")).engine_options()["num_state_blocks"] > blocks
    with pytest.raises(ValueError, match="state budget has only"):
        LLM(str(GOLDENS / "tiny-a"), state_memory_bytes=20_000).generate(prompts[0], use_tqdm=False)


def test_llm_engine_adds_aborts_and_streams(tiny_a):
    from deepinfer import LLMEngine

    eng = tiny_a.llm_engine
    assert isinstance(eng, LLMEngine)
    eng.add_request("a", {"prompt_token_ids": [1, 2, 3]}, greedy(30))
    eng.add_request("b", {"prompt_token_ids": [4, 5]}, greedy(5, logprobs=1))
    seen, final = {}, {}
    steps = 0
    while eng.has_unfinished_requests():
        for o in eng.step():
            seen.setdefault(o.request_id, []).append(len(o.outputs[0].token_ids))
            if o.finished:
                final[o.request_id] = o
        steps += 1
        if steps == 4:
            eng.abort_request("a")
            eng.add_request("c", {"prompt_token_ids": [6]}, greedy(3))  # arrives mid-flight
    assert final["a"].outputs[0].finish_reason == "abort" and 0 < len(final["a"].outputs[0].token_ids) < 30
    assert len(final["b"].outputs[0].token_ids) == 5 and len(final["b"].outputs[0].logprobs) == 5
    assert len(final["c"].outputs[0].token_ids) == 3
    assert seen["b"] == sorted(seen["b"])  # cumulative
    with pytest.raises(ValueError, match="already in use"):
        eng.add_request("x", {"prompt_token_ids": [1]}, greedy(50))
        eng.add_request("x", {"prompt_token_ids": [1]}, greedy(50))
    eng.abort_request("x")
    while eng.has_unfinished_requests():
        eng.step()


def test_batch_invariant_env_and_token_budgets(monkeypatch):
    monkeypatch.setenv("DEEPINFER_BATCH_INVARIANT", "1")
    needle = {"prompt_token_ids": [(13 * j + 5) % 1000 for j in range(150)]}
    sp = SamplingParams(temperature=0, max_tokens=6, logprobs=3, prompt_logprobs=3, ignore_eos=True)

    def lps(out):
        return [sorted((t, l.logprob) for t, l in pos.items())
                for pos in out.outputs[0].logprobs + out.prompt_logprobs[1:]]

    roomy = LLM(str(GOLDENS / "tiny-a"))
    assert roomy.engine_options()["batch_invariant"]
    alone = lps(roomy.generate(needle, sp, use_tqdm=False)[0])
    tight = LLM(str(GOLDENS / "tiny-a"), max_num_batched_tokens=100)  # other chunking pressure
    others = filler_prompts(5, 1000)
    outs = tight.generate(others[:2] + [needle] + others[2:], [SamplingParams(max_tokens=8, seed=4)] * 2 + [sp] +
                          [SamplingParams(max_tokens=8, seed=5)] * 3, use_tqdm=False)
    assert lps(outs[2]) == alone
