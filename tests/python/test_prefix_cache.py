"""Prefix caching through deepinfer.LLM and the server: on by default, the same tokens and logprobs as
with it off, cached tokens in RequestOutput.metrics and in the server's usage, the off switches, and
DeepSeek-V4 (no state copies) running with it off."""
import json
import urllib.request

import pytest

from conftest import API_KEY, SERVED_NAME
from deepinfer import LLM, SamplingParams
from engine_helpers import GOLDENS


def greedy(n):
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=2)


def ids(seed, n, vocab=1000):
    return [(seed * 7919 + j * 104729) % vocab + 10 for j in range(n)]


def same(a, b):
    assert [o.outputs[0].token_ids for o in a] == [o.outputs[0].token_ids for o in b]
    for x, y in zip(a, b):
        lx = [{t: v.logprob for t, v in p.items()} for p in x.outputs[0].logprobs]
        ly = [{t: v.logprob for t, v in p.items()} for p in y.outputs[0].logprobs]
        assert lx == ly  # bitwise


def test_shared_prefix_is_cached_and_changes_nothing(demo_model):
    on = LLM(demo_model, prefix_block_tokens=16)
    off = LLM(demo_model, enable_prefix_caching=False)
    prefix = ids(1, 100)
    prompts = [{"prompt_token_ids": prefix + ids(k, 3)} for k in (2, 3, 4)]
    first = on.generate(prompts[:1], greedy(6), use_tqdm=False)
    rest = on.generate(prompts[1:], greedy(6), use_tqdm=False)
    same(first + rest, off.generate(prompts, greedy(6), use_tqdm=False))
    assert first[0].metrics.num_cached_tokens == 0
    # the first prompt was snapshotted at its last block boundary before its last token: 102 // 16 * 16
    assert [o.metrics.num_cached_tokens for o in rest] == [96, 96]
    again = off.generate(prompts[1:], greedy(6), use_tqdm=False)
    assert [o.metrics.num_cached_tokens for o in again] == [0, 0]


def test_second_request_of_a_2k_prefix_prefills_only_its_suffix(demo_model, monkeypatch):
    monkeypatch.setenv("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "off")  # the hit may reach the prompt's end
    on = LLM(demo_model, max_model_len=4096)
    prefix = ids(5, 2048, vocab=100000)
    a, b = {"prompt_token_ids": prefix + ids(6, 3)}, {"prompt_token_ids": prefix + ids(7, 4)}
    on.generate(a, greedy(1), use_tqdm=False)
    before = on.stats()["forward_tokens"]
    warm = on.generate(b, greedy(4), use_tqdm=False)
    assert warm[0].metrics.num_cached_tokens == 2048  # 2051 // 64 * 64
    assert on.stats()["forward_tokens"] - before == 4 + 3  # its 4-token suffix, then one per later token
    same(warm, LLM(demo_model, max_model_len=4096, enable_prefix_caching=False).generate(b, greedy(4), use_tqdm=False))


@pytest.mark.parametrize("keep", [12, 140])  # the smallest KEEP (window + DSpark block), the default
def test_swa_bounded_replay_hits_give_the_cold_prefills_bits(demo_model, monkeypatch, keep):
    """With SWA bounded replay the decoder layers of a prefill start at n - KEEP; a hit lies at or before
    that point and the chunk crossing it starts the decoder rings there, so hits, chunked and one-chunk
    prefills all give the same bits (docs/prefix_caching.md)."""
    monkeypatch.setenv("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", str(keep))
    on = LLM(demo_model, prefix_block_tokens=16, max_num_batched_tokens=128)  # budget-chunked too
    off = LLM(demo_model, enable_prefix_caching=False)
    prefix = ids(11, 320)  # whole blocks: every hit below lies inside it
    prompts = [{"prompt_token_ids": prefix + ids(k, 5 + k)} for k in (12, 13, 14)]
    first = on.generate(prompts[:1], greedy(8), use_tqdm=False)
    rest = on.generate(prompts[1:], greedy(8), use_tqdm=False)
    want = off.generate(prompts, greedy(8), use_tqdm=False)
    same(first + rest, want)
    # the first prompt (337 tokens) was snapshotted at its last block boundary at or before 337 - KEEP
    hit = (337 - keep) // 16 * 16
    assert [o.metrics.num_cached_tokens for o in rest] == [hit, hit]
    if keep == 12:  # the demo model's three decoder layers look back 24 tokens: a full prefill differs
        monkeypatch.setenv("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "off")
        full = LLM(demo_model, enable_prefix_caching=False).generate(prompts, greedy(8), use_tqdm=False)
        with pytest.raises(AssertionError):
            same(full, want)


def test_bad_block_size_is_refused(demo_model):
    with pytest.raises(ValueError, match="prefix_block_tokens"):
        LLM(demo_model, prefix_block_tokens=0)


def test_v4_restores_cached_prefixes():
    llm = LLM(str(GOLDENS / "tiny-a"))  # V4 states copy (compressed rows shared): the second request hits
    p = {"prompt_token_ids": [(j * 37) % 700 for j in range(90)]}
    a, b = llm.generate([p], greedy(4), use_tqdm=False), llm.generate([p], greedy(4), use_tqdm=False)
    same(a, b)
    assert a[0].metrics.num_cached_tokens == 0 and b[0].metrics.num_cached_tokens > 0


def test_serve_flag():
    from deepinfer.server.cli import parse_args
    assert parse_args(["m"]).prefix_caching is True
    assert parse_args(["m", "--no-prefix-caching"]).prefix_caching is False


def complete(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_server_reports_cached_tokens(server):
    body = {"model": SERVED_NAME, "prompt": ids(9, 300), "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    cold = complete(server, body)
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    warm = complete(server, body)
    # the last block boundary at or before the decoder start of SWA bounded replay: (300 - 140) // 64 * 64
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == 128
    assert warm["choices"][0]["text"] == cold["choices"][0]["text"]
    with urllib.request.urlopen(server + "/metrics", timeout=60) as r:
        text = r.read().decode()
    hits = [line for line in text.splitlines() if line.startswith("deepinfer_engine_prefix_cached_tokens_total ")]
    assert hits and float(hits[0].split()[1]) >= 128
