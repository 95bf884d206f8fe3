"""Prometheus metrics of the server (/metrics), in a registry of its own."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self, engine) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("deepinfer_requests", "HTTP API requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.ttft = Histogram("deepinfer_time_to_first_token_seconds", "time from arrival to the first token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("deepinfer_e2e_request_latency_seconds", "time from arrival to the last token",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("deepinfer_inter_token_latency_seconds", "time between two streamed outputs of a request",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.waiting = Gauge("deepinfer_num_requests_waiting", "requests in the engine without a first token yet", registry=r)
        r.register(_EngineCollector(engine))


class _EngineCollector:
    """Gauges and counters read from the engine at scrape time."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def collect(self):
        e = self.engine
        yield GaugeMetricFamily("deepinfer_num_requests_running", "requests in the engine (queued or running)",
                                value=e.num_running())
        opts, s = e.llm.engine_options(), e.stats
        block = opts["state_block_bytes"]
        budget = opts["num_state_blocks"] * block if opts["num_state_blocks"] > 0 else 0
        yield GaugeMetricFamily("deepinfer_state_memory_budget_bytes", "state budget of the engine (0: unlimited)",
                                value=budget)
        # State memory after the last step: what the pool handed out (prefix-cache snapshots included) and
        # what the scheduler reserved for live sequences.
        used = s.get("state_blocks_allocated", 0) * block
        yield GaugeMetricFamily("deepinfer_state_memory_used_bytes", "state memory the block pool has handed out",
                                value=used)
        yield GaugeMetricFamily("deepinfer_state_memory_reserved_bytes", "state memory reserved for live sequences",
                                value=s.get("state_blocks_reserved", 0) * block)
        yield GaugeMetricFamily("deepinfer_state_memory_usage_ratio", "used / budget (0 without a budget)",
                                value=used / budget if budget else 0.0)
        yield GaugeMetricFamily("deepinfer_engine_live_states", "sequences holding a model state",
                                value=s.get("live_states", 0))
        # Queue depth: the scheduler's sequences after the last step.
        yield GaugeMetricFamily("deepinfer_engine_waiting_seqs", "sequences queued for their first schedule",
                                value=s.get("waiting_seqs", 0))
        yield GaugeMetricFamily("deepinfer_engine_running_seqs", "sequences being prefilled or decoded",
                                value=s.get("running_seqs", 0))
        for key, doc in (("steps", "engine steps"), ("forward_tokens", "tokens through the model's forward"),
                         ("preemptions", "sequences preempted for lack of state memory"),
                         ("failed_batches", "steps whose forward failed"),
                         ("prefix_hits", "sequences restored from the prefix cache"),
                         ("prefix_cached_tokens", "prompt tokens restored from the prefix cache"),
                         ("prefix_evictions", "prefix-cache snapshots evicted for state memory")):
            yield CounterMetricFamily(f"deepinfer_engine_{key}", doc, value=s.get(key, 0))
        yield GaugeMetricFamily("deepinfer_prefix_cache_blocks", "state blocks the prefix cache holds",
                                value=s.get("prefix_cached_blocks", 0))
        yield GaugeMetricFamily("deepinfer_engine_max_seqs_in_step", "most sequences one engine step has run",
                                value=s.get("max_seqs_in_step", 0))
        if opts.get("speculative"):  # DSpark drafting is on: how many drafts verification accepts
            drafts, accepted = s.get("draft_tokens_verified", 0), s.get("draft_tokens_accepted", 0)
            yield CounterMetricFamily("deepinfer_spec_decode_draft_tokens", "draft tokens verified", value=drafts)
            yield CounterMetricFamily("deepinfer_spec_decode_accepted_tokens", "draft tokens accepted", value=accepted)
            yield GaugeMetricFamily("deepinfer_spec_decode_acceptance_ratio", "accepted / verified draft tokens so far",
                                    value=accepted / drafts if drafts else 0.0)
        yield CounterMetricFamily("deepinfer_prompt_tokens", "prompt tokens of finished requests", value=e.prompt_tokens)
        yield CounterMetricFamily("deepinfer_generation_tokens", "generated tokens of finished requests",
                                  value=e.generation_tokens)
        finished = CounterMetricFamily("deepinfer_request_finished", "finished sequences by finish reason", labels=["reason"])
        for reason, count in sorted(e.finish_reasons.items()):
            finished.add_metric([reason], count)
        yield finished
        yield CounterMetricFamily("deepinfer_aborted_requests", "requests aborted (client gone or cancelled)",
                                  value=e.aborted)
