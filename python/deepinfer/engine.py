"""LLMEngine: the request-level API (vLLM's names) — add and abort requests at any time, and step."""
from __future__ import annotations

import threading
from typing import Optional, Union

from . import _core
from ._images import image_bytes
from .outputs import RequestOutput, _from_core
from .sampling_params import SamplingParams


class LLMEngine:
    """Drives the engine one step at a time; `LLM.llm_engine` is one. Safe next to `LLM.generate` in
    another thread: step() waits while that call owns the steps, and the outputs it stepped for the
    requests added here come back from the next step(). Nothing is dropped."""

    def __init__(self, core: "_core.Engine", generate_lock: Optional[threading.Lock] = None) -> None:
        self._core = core
        self._params: dict[str, SamplingParams] = {}
        self._generate_lock = generate_lock
        self._delivered: list[dict] = []  # outputs of our requests that a generate() call stepped
        self._delivered_lock = threading.Lock()

    def add_request(self, request_id: str, prompt: Union[str, dict],
                    params: Optional[SamplingParams] = None) -> None:
        """prompt: a string, {"prompt": str} or {"prompt_token_ids": [...]}. Raises ValueError."""
        params = params or SamplingParams()
        if isinstance(params, dict):
            params = SamplingParams(**params)
        if not isinstance(params, SamplingParams):
            raise TypeError(f"add_request: params must be SamplingParams or a dict, got {type(params).__name__}")
        images = []
        if isinstance(prompt, str):
            text, ids = prompt, []
        elif isinstance(prompt, dict):
            text, ids = prompt.get("prompt", "") or "", prompt.get("prompt_token_ids", [])
            images = image_bytes(prompt.get("multi_modal_data"), 0)
        else:
            raise TypeError(f"add_request: prompt must be a str or a dict, got {type(prompt).__name__}")
        self._params[str(request_id)] = params  # before the core sees it: a concurrent generate() may step it
        try:
            self._core.add_request(text, ids, params._to_core(), str(request_id), images)
        except BaseException:
            del self._params[str(request_id)]
            raise

    def abort_request(self, request_id: Union[str, list[str]]) -> None:
        """The request finishes with finish_reason "abort", keeping what it generated."""
        for rid in [request_id] if isinstance(request_id, str) else request_id:
            self._core.abort(rid)

    def step(self) -> list[RequestOutput]:
        """One engine step; cumulative outputs of every request that changed (finished or not)."""
        decode = (lambda t: self._core.decode([t], False)) if self._core.has_tokenizer() else (lambda t: None)
        if self._generate_lock is not None:
            with self._generate_lock:  # waits while an LLM.generate call owns the steps
                stepped = self._core.step(True)
        else:
            stepped = self._core.step(True)
        with self._delivered_lock:
            stepped, self._delivered = self._delivered + list(stepped), []
        latest: dict[str, dict] = {}
        for d in stepped:  # cumulative outputs: the latest one of each request is all it needs
            latest[d["request_id"]] = d
        outs = []
        for d in latest.values():
            sp = self._params.get(d["request_id"])
            if sp is None:
                continue  # a request of a concurrent LLM.generate call
            outs.append(_from_core(d, sp.logprobs is not None, sp.prompt_logprobs is not None, decode))
            if d["finished"]:
                del self._params[d["request_id"]]
        return outs

    def _deliver(self, d: dict) -> None:
        """An output a generate() call stepped for one of our requests: returned by our next step()."""
        if d["request_id"] in self._params:
            with self._delivered_lock:
                self._delivered.append(d)

    def has_unfinished_requests(self) -> bool:
        return self._core.has_unfinished()
