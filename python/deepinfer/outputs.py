"""RequestOutput / CompletionOutput with vLLM's field names."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# One dict per position: token id -> Logprob (the chosen token and the top-N).
PositionLogprobs = dict[int, Logprob]


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[list[PositionLogprobs]]
    finish_reason: Optional[str] = None  # "stop" | "length" | "abort" | "error"
    stop_reason: Union[int, str, None] = None  # the stop string or stop token id that matched

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class SpeculativeMetrics:
    """Speculative decoding counters of a request (all its samples); zero when speculation is off."""
    drafted: int = 0           # draft tokens proposed
    verified: int = 0          # of those, verified by the target model
    accepted: int = 0          # of those, accepted
    decode_steps: int = 0      # decode steps; each emits its accepted drafts + 1 token
    verified_at: list[int] = field(default_factory=list)  # per draft position
    accepted_at: list[int] = field(default_factory=list)

    @property
    def mean_accepted_length(self) -> float:
        """tau: tokens per decode step, (accepted + decode_steps) / decode_steps."""
        return (self.accepted + self.decode_steps) / self.decode_steps if self.decode_steps else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        """P(draft j accepted | drafts before it accepted), per position."""
        return [a / v if v else 0.0 for a, v in zip(self.accepted_at, self.verified_at)]


@dataclass
class RequestMetrics:
    speculative: SpeculativeMetrics = field(default_factory=SpeculativeMetrics)
    num_cached_tokens: int = 0  # prompt tokens whose state came from the prefix cache


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    prompt_logprobs: Optional[list[Optional[PositionLogprobs]]]
    outputs: list[CompletionOutput]
    finished: bool
    error: Optional[str] = field(default=None)
    metrics: Optional[RequestMetrics] = field(default=None)


def _logprobs(raw, decode) -> list[PositionLogprobs]:
    return [{t: Logprob(lp, rank, decode(t)) for t, lp, rank in pos} for pos in raw]


def _from_core(d: dict, want_logprobs: bool, want_prompt_logprobs: bool, decode) -> RequestOutput:
    outs = [
        CompletionOutput(
            index=c["index"],
            text=c["text"],
            token_ids=list(c["token_ids"]),
            cumulative_logprob=c["cumulative_logprob"],
            logprobs=_logprobs(c["logprobs"], decode) if want_logprobs else None,
            finish_reason=c["finish_reason"] or None,
            stop_reason=c["stop_reason"],
        )
        for c in d["outputs"]
    ]
    prompt_lps = None
    if want_prompt_logprobs:
        prompt_lps = [None] + _logprobs(d["prompt_logprobs"][1:], decode)
    return RequestOutput(
        request_id=d["request_id"],
        prompt=d["prompt"] or None,
        prompt_token_ids=list(d["prompt_token_ids"]),
        prompt_logprobs=prompt_lps,
        outputs=outs,
        finished=d["finished"],
        error=d["error"] or None,
        metrics=RequestMetrics(SpeculativeMetrics(**d["speculative"]), d.get("num_cached_tokens", 0))
        if "speculative" in d else None,
    )
