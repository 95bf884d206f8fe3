"""LLMEngine: the request-level API (vLLM's names) — add and abort requests at any time, and step."""
from __future__ import annotations

from typing import Optional, Union

from . import _core
from .outputs import RequestOutput, _from_core
from .sampling_params import SamplingParams


class LLMEngine:
    """Drives the engine one step at a time; `LLM.llm_engine` is one. Do not step it while an
    `LLM.generate` call on the same engine runs (the outputs of a step serve every request)."""

    def __init__(self, core: "_core.Engine") -> None:
        self._core = core
        self._params: dict[str, SamplingParams] = {}

    def add_request(self, request_id: str, prompt: Union[str, dict],
                    params: Optional[SamplingParams] = None) -> None:
        """prompt: a string, {"prompt": str} or {"prompt_token_ids": [...]}. Raises ValueError."""
        params = params or SamplingParams()
        if isinstance(prompt, str):
            text, ids = prompt, []
        else:
            text, ids = prompt.get("prompt", "") or "", [int(t) for t in prompt.get("prompt_token_ids", [])]
        self._core.add_request(text, ids, params._to_core(), str(request_id))
        self._params[str(request_id)] = params

    def abort_request(self, request_id: Union[str, list[str]]) -> None:
        """The request finishes with finish_reason "abort", keeping what it generated."""
        for rid in [request_id] if isinstance(request_id, str) else request_id:
            self._core.abort(rid)

    def step(self) -> list[RequestOutput]:
        """One engine step; cumulative outputs of every request that changed (finished or not)."""
        decode = (lambda t: self._core.decode([t], False)) if self._core.has_tokenizer() else (lambda t: None)
        outs = []
        for d in self._core.step(True):
            sp = self._params.get(d["request_id"])
            if sp is None:
                continue  # a request of a concurrent LLM.generate call
            outs.append(_from_core(d, sp.logprobs is not None, sp.prompt_logprobs is not None, decode))
            if d["finished"]:
                del self._params[d["request_id"]]
        return outs

    def has_unfinished_requests(self) -> bool:
        return self._core.has_unfinished()
