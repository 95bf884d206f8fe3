"""A bounded random-input test of the Python request surface (issue 17): seeded random values of
every type and edge (NaN, infinities, the edges of int32/int64, huge ints, lone surrogates, nested
and self-containing lists, objects) for every SamplingParams field, prompts, structured-output
arguments, chat messages, tools and chat template arguments. Each call must return outputs or raise
TypeError / ValueError with a message of its own (never a pybind11 or nlohmann internal one, never
a crash); afterwards a canary request gives its tokens of before and no request or state is held.
The C++ side of the same surface is fuzzed by tests/fuzz/fuzz_request.cpp and fuzz_chat.cpp."""
import dataclasses
import math
import random

import pytest

from deepinfer import LLM, SamplingParams
from engine_helpers import CLI

pytestmark = pytest.mark.skipif(not CLI.exists(), reason="build/tools/deepinfer not built")

CASES = 160  # per surface; seeded, so every run sees the same inputs
INTERNAL = ("Unable to cast", "incompatible function arguments", "nlohmann", "json.exception", "type_error.",
            "basic_string", "std::", "Traceback")


def self_containing():
    x = [1]
    x.append(x)
    return x


def values(rng):
    """One hostile value: a scalar at an edge, a string, or a container of those."""
    scalars = [None, True, False, 0, 1, -1, 2, 7, 2 ** 31 - 1, 2 ** 31, -2 ** 31 - 1, 2 ** 63, 2 ** 64, -10 ** 30,
               0.0, -0.0, 0.5, 1.5, 1e-30, 1e30, math.nan, math.inf, -math.inf, "", "a", "12", "\ud800",
               "<｜Assistant｜>", "x" * 3000, b"ab", 3 + 4j, object(), range(3), self_containing()]
    pick = rng.random()
    if pick < 0.6:
        return rng.choice(scalars)
    if pick < 0.8:
        return [rng.choice(scalars) for _ in range(rng.randrange(4))]
    if pick < 0.9:
        return {rng.choice([1, "a", -5, 2 ** 40, None]): rng.choice(scalars) for _ in range(rng.randrange(3))}
    return tuple(rng.choice([0, 1, 5, 2 ** 31]) for _ in range(rng.randrange(4)))


FIELDS = [f.name for f in dataclasses.fields(SamplingParams)]
SCHEMA_TYPES = ["regex", "json", "json_schema", "ebnf", "choice", "json_object", "grammar", "", None, 5]
SCHEMAS = ["[a-z]{1,3}", "(a|b)*c", "((((", '{"type": "integer"}', '{"$ref": "#"}', "root ::= \"a\" root",
           'root ::= "x" | "y"', ["yes", "no"], [], {"type": "object", "properties": {"a": {"type": "string"}}},
           {"type": "array", "items": {"$ref": "#"}}, {"enum": [1, "a", None]}, "\\", "a{99999}", "[^]"]


def random_params(rng):
    kw = {}
    for name in rng.sample(FIELDS, rng.randrange(1, 4)):
        kw[name] = values(rng)
    if rng.random() < 0.3:
        kw["so_args"] = {"schema_type": rng.choice(SCHEMA_TYPES), "schema": rng.choice(SCHEMAS + [values(rng)])}
    # Keep each run short: valid but long-running counts are capped, the values stay hostile otherwise.
    if type(kw.get("max_tokens")) is int and kw["max_tokens"] > 3:
        kw["max_tokens"] = 3
    kw.setdefault("max_tokens", 3)
    if type(kw.get("n")) is int and kw["n"] > 3:
        kw["n"] = 3
    if type(kw.get("min_tokens")) is int and kw["min_tokens"] > 3:
        kw["min_tokens"] = 3
    return kw


def random_prompt(rng):
    ids = [rng.choice([0, 1, 5, 100, 2 ** 31 - 1, -1, 2 ** 31, 2 ** 70]) for _ in range(rng.randrange(0, 4))]
    return rng.choice([
        values(rng), {"prompt_token_ids": values(rng)}, {"prompt_token_ids": ids}, {"prompt": values(rng)},
        {"prompt": "hi", "prompt_token_ids": [1, 2], "multi_modal_data": values(rng)},
        {"prompt_token_ids": [1, 2], "multi_modal_data": {"image": values(rng)}}, "hello"])


def random_message(rng):
    m = {}
    if rng.random() < 0.9:
        m["role"] = rng.choice(["user", "assistant", "system", "tool", "developer", "", "bad", values(rng)])
    content = rng.choice([
        "hi", values(rng), [{"type": "text", "text": values(rng)}], [{"type": values(rng), "text": "x"}],
        [{"type": "image_url", "image_url": {"url": rng.choice(["data:image/png;base64,AAAA", "/nonexistent.png",
                                                                 "http://x/y.png", values(rng)])}}],
        [values(rng)]])
    if rng.random() < 0.9:
        m["content"] = content
    if rng.random() < 0.2:
        m["tool_calls"] = rng.choice([values(rng), [{"type": "function", "function": {"name": values(rng),
                                                                                      "arguments": values(rng)}}]])
    if rng.random() < 0.1:
        m[rng.choice(["tool_call_id", "reasoning_content", "name", "x"])] = values(rng)
    return m


def check_error(e):
    assert isinstance(e, (TypeError, ValueError)), f"{type(e).__name__}: {e}"
    text = str(e)
    assert text and not any(s in text for s in INTERNAL), text


@pytest.fixture(scope="module")
def llm(demo_model):
    return LLM(demo_model, max_num_seqs=8)


@pytest.fixture(scope="module")
def canary(llm):
    prompt, params = {"prompt_token_ids": [5, 6, 7]}, SamplingParams(temperature=0, max_tokens=6)
    before = llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids
    yield lambda: llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids == before
    stats = llm.stats()
    assert not llm._engine.has_unfinished()
    assert stats["live_states"] == 0


def run(call):
    try:
        call()
        return "ok"
    except Exception as e:  # noqa: BLE001: which exceptions escape is what is tested
        check_error(e)
        return "refused"


def test_random_sampling_params_and_prompts(llm, canary):
    rng = random.Random(1701)
    seen = {"ok": 0, "refused": 0}
    for _ in range(CASES):
        kw, prompt = random_params(rng), random_prompt(rng) if rng.random() < 0.5 else {"prompt_token_ids": [3, 4]}
        seen[run(lambda: llm.generate(prompt, SamplingParams(**kw), use_tqdm=False))] += 1
        seen[run(lambda: llm.generate([prompt, "x"], [kw, {"max_tokens": 2}], use_tqdm=False))] += 1
    assert canary()
    assert seen["ok"] > 0 and seen["refused"] > 0, seen  # both paths were exercised


def test_random_chat_messages_tools_and_template_arguments(llm, canary):
    rng = random.Random(1702)
    seen = {"ok": 0, "refused": 0}
    for _ in range(CASES):
        messages = rng.choice([[random_message(rng) for _ in range(rng.randrange(1, 4))], values(rng),
                               [[random_message(rng)], [random_message(rng)]]])
        kw = {}
        if rng.random() < 0.3:
            kw["tools"] = rng.choice([values(rng), [{"type": "function", "function": {"name": values(rng),
                                                                                      "parameters": values(rng)}}]])
        if rng.random() < 0.3:
            kw["chat_template_kwargs"] = rng.choice([values(rng), {"thinking": values(rng)},
                                                     {"reasoning_effort": values(rng)}])
        if rng.random() < 0.2:
            kw["add_generation_prompt"] = values(rng)
        seen[run(lambda: llm.chat(messages, SamplingParams(max_tokens=2), use_tqdm=False, **kw))] += 1
    assert canary()
    assert seen["ok"] > 0 and seen["refused"] > 0, seen


def test_random_encode_and_decode_arguments(llm):
    rng = random.Random(1703)
    seen = {"ok": 0, "refused": 0}
    for _ in range(CASES):
        text = values(rng)
        seen[run(lambda: llm.encode(text))] += 1
        ids = rng.choice([values(rng), [rng.choice([0, 1, 5, 100, -1, 2 ** 31 - 1, 2 ** 31, 10 ** 6, True, 1.0])
                                        for _ in range(rng.randrange(4))]])
        kw = {"skip_special_tokens": values(rng)} if rng.random() < 0.3 else {}
        seen[run(lambda: llm.decode(ids, **kw))] += 1
    assert seen["ok"] > 0 and seen["refused"] > 0, seen


def test_what_the_random_test_found(llm):
    # a list holding itself: dataclasses.asdict recursed without bound (RecursionError)
    with pytest.raises(TypeError, match="SamplingParams.stop_token_ids\\[1\\] must be an int"):
        SamplingParams(stop_token_ids=self_containing())
    msgs = [{"role": "user", "content": "hi"}]
    # non-bool flags reached the core as pybind11's "incompatible function arguments"
    with pytest.raises(TypeError, match="chat: add_generation_prompt must be a bool, got int"):
        llm.chat(msgs, use_tqdm=False, add_generation_prompt=1)
    with pytest.raises(TypeError, match="chat: chat_template_kwargs.thinking must be a bool, got str"):
        llm.chat(msgs, use_tqdm=False, chat_template_kwargs={"thinking": "no"})  # bool("no") was True
    # a lone surrogate in a message or a tool: the same pybind11 message
    with pytest.raises(ValueError, match="chat: conversation 0 is not valid Unicode"):
        llm.chat([{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}], use_tqdm=False)
    with pytest.raises(ValueError, match="chat: tools is not valid Unicode"):
        llm.chat(msgs, use_tqdm=False, tools=[{"type": "function", "function": {"name": "f\udc00"}}])
