"""The server's /metrics from the engine's counters, without HTTP: queue depth, state memory and, when
speculative decoding is on, its acceptance, each equal to what the engine reports."""
import asyncio
import re

import pytest

prometheus_client = pytest.importorskip("prometheus_client")

from deepinfer import LLM, SamplingParams  # noqa: E402
from deepinfer.server.engine_loop import AsyncEngine  # noqa: E402
from deepinfer.server.metrics import Metrics  # noqa: E402


def scrape(metrics: Metrics) -> dict[str, float]:
    text = prometheus_client.generate_latest(metrics.registry).decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+) (\S+)$", text, re.M)}


def serve_requests(llm: LLM, prompts: list[str], params: SamplingParams) -> tuple[AsyncEngine, dict]:
    """Runs the prompts through the server's AsyncEngine to the end; (engine, the scraped metrics)."""
    engine = AsyncEngine(llm)

    async def run():
        queues = [engine.add(f"m{i}", {"prompt": p}, params) for i, p in enumerate(prompts)]
        for q in queues:
            while not (await q.get())["finished"]:
                pass

    try:
        asyncio.run(run())
        return engine, scrape(Metrics(engine))
    finally:
        engine.shutdown()


def test_queue_depth_counts_the_schedulers_sequences(demo_model):
    llm = LLM(demo_model, max_num_seqs=1, max_model_len=128)
    sp = SamplingParams(max_tokens=3, ignore_eos=True)
    for i in range(3):
        llm.llm_engine.add_request(f"q{i}", {"prompt": f"request {i}"}, sp)
    llm.llm_engine.step()
    stats = llm.stats()
    assert (stats["running_seqs"], stats["waiting_seqs"]) == (1, 2)  # one sequence a step, two queued
    while llm.llm_engine.has_unfinished_requests():
        llm.llm_engine.step()
    assert (llm.stats()["running_seqs"], llm.stats()["waiting_seqs"]) == (0, 0)


def test_state_memory_and_queue_gauges(demo_model):
    llm = LLM(demo_model, max_num_seqs=4, max_model_len=512, state_memory_bytes=64 << 20)
    # long enough to be snapshotted before its decoder window (n - 140, SWA bounded replay)
    engine, m = serve_requests(llm, ["a shared prefix " * 120 + str(i) for i in range(3)],
                               SamplingParams(max_tokens=4, ignore_eos=True))
    opts, stats = llm.engine_options(), engine.stats
    block = opts["state_block_bytes"]
    assert m["deepinfer_state_memory_budget_bytes"] == opts["num_state_blocks"] * block > 0
    assert m["deepinfer_state_memory_used_bytes"] == stats["state_blocks_allocated"] * block
    assert m["deepinfer_prefix_cache_blocks"] > 0 and m["deepinfer_state_memory_used_bytes"] > 0  # snapshots stay
    assert m["deepinfer_state_memory_usage_ratio"] == pytest.approx(
        m["deepinfer_state_memory_used_bytes"] / m["deepinfer_state_memory_budget_bytes"])
    assert m["deepinfer_state_memory_reserved_bytes"] == 0 and m["deepinfer_engine_live_states"] == 0  # idle
    assert m["deepinfer_engine_waiting_seqs"] == m["deepinfer_engine_running_seqs"] == 0
    assert m["deepinfer_generation_tokens_total"] == 12
    assert "deepinfer_spec_decode_draft_tokens_total" not in m  # speculation is off


def test_speculative_acceptance(demo_model):
    llm = LLM(demo_model, max_num_seqs=2, max_model_len=256, speculative={"num_draft_tokens": 4, "schedule": "fixed"})
    engine, m = serve_requests(llm, ["1, 2, 3, 4,", "The quick brown fox"],
                               SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    drafts, accepted = engine.stats["draft_tokens_verified"], engine.stats["draft_tokens_accepted"]
    assert drafts > 0
    assert m["deepinfer_spec_decode_draft_tokens_total"] == drafts
    assert m["deepinfer_spec_decode_accepted_tokens_total"] == accepted
    assert m["deepinfer_spec_decode_acceptance_ratio"] == pytest.approx(accepted / drafts)


def test_serve_speculative_flags():
    from deepinfer.server.cli import parse_args, speculative
    assert speculative(parse_args(["m"])) is None
    assert speculative(parse_args(["m", "--speculative"])) == {}
    assert speculative(parse_args(["m", "--speculative", "3", "--speculative-schedule", "fixed"])) == {
        "num_draft_tokens": 3, "schedule": "fixed"}
    for bad in (["m", "--speculative", "0"], ["m", "--speculative-schedule", "fixed"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
