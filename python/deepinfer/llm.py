"""LLM: offline generation over DeepInfer's C++ engine (continuous batching, async scheduling)."""
from __future__ import annotations

import threading
from typing import Any, Optional, Sequence, Union

from . import _core
from .engine import LLMEngine
from .outputs import RequestOutput, _from_core
from .sampling_params import SamplingParams

PromptType = Union[str, dict]

# vLLM engine arguments that have no meaning here yet: accepted so vLLM code runs unchanged.
_ACCEPTED_VLLM_ARGS = {
    "tensor_parallel_size", "dtype", "gpu_memory_utilization", "trust_remote_code", "enforce_eager",
    "tokenizer_mode", "quantization", "kv_cache_dtype", "block_size", "swap_space", "disable_log_stats",
    "revision", "download_dir",
}


def env_vars() -> list[tuple[str, str, str]]:
    """Every DEEPINFER_* environment variable: (name, default, meaning)."""
    return list(_core.env_vars())


def resolve_model(name: str, revision: str = "main") -> str:
    """The local folder of a model: a folder, or a Hugging Face repo id (cache, then download)."""
    return _core.resolve_model(name, revision)


class LLM:
    """An offline LLM. `model` is a local folder or a Hugging Face repo id.

    Engine arguments: max_model_len, max_num_seqs, max_num_batched_tokens, async_scheduling
    (default DEEPINFER_ASYNC_SCHEDULING), batch_invariant (default DEEPINFER_BATCH_INVARIANT),
    state_memory_bytes / num_state_blocks (state budget: bytes, or blocks of the model's state block size), seed.
    """

    def __init__(self, model: str, *, tokenizer: Optional[str] = None, seed: int = 0,
                 max_model_len: Optional[int] = None, max_num_seqs: Optional[int] = None,
                 max_num_batched_tokens: Optional[int] = None, async_scheduling: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None, state_memory_bytes: Optional[int] = None,
                 num_state_blocks: Optional[int] = None,
                 **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - _ACCEPTED_VLLM_ARGS)
        if unknown:
            raise TypeError(f"LLM() got unknown engine arguments: {', '.join(unknown)}")
        config = dict(tokenizer=tokenizer, seed=seed, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens, async_scheduling=async_scheduling,
                      batch_invariant=batch_invariant, state_memory_bytes=state_memory_bytes,
                      num_state_blocks=num_state_blocks)
        self._engine = _core.Engine(model, {k: v for k, v in config.items() if v is not None})
        self.llm_engine = LLMEngine(self._engine)  # request-level API (add_request, abort_request, step)
        self._next_id = 0
        self._lock = threading.Lock()  # one generate() at a time: step() serves every request

    # -- public API -------------------------------------------------------------------------------

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 *, use_tqdm: bool = True) -> list[RequestOutput]:
        """Prompts: a string, {"prompt": str}, {"prompt_token_ids": [...]}, or a list of them.
        sampling_params: one for all prompts or one per prompt. Results come in input order."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        prompts = list(prompts)
        params = self._params_for(prompts, sampling_params)
        parsed = [self._parse_prompt(p, i) for i, p in enumerate(prompts)]
        return self._run(parsed, params, use_tqdm)

    def chat(self, messages: Union[list[dict], list[list[dict]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             use_tqdm: bool = True, add_generation_prompt: bool = True,
             chat_template_kwargs: Optional[dict[str, Any]] = None) -> list[RequestOutput]:
        """messages: one conversation (a list of {"role", "content"} dicts) or a list of them.
        chat_template_kwargs: {"thinking": bool} (or "enable_thinking") and {"reasoning_effort": str}."""
        kw = dict(chat_template_kwargs or {})
        thinking = bool(kw.pop("thinking", kw.pop("enable_thinking", False)))
        effort = str(kw.pop("reasoning_effort", "") or "")
        if kw:
            raise ValueError(f"chat_template_kwargs: unknown keys {sorted(kw)} (thinking, reasoning_effort)")
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        prompts = []
        for conv in conversations:
            pairs = [(str(m["role"]), str(m.get("content") or "")) for m in conv]
            ids = self._engine.encode_chat(pairs, thinking, effort, add_generation_prompt)
            prompts.append({"prompt_token_ids": ids})
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def encode(self, text: str) -> list[int]:
        return list(self._engine.encode(text))

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._engine.decode(list(token_ids), skip_special_tokens)

    @property
    def model_dir(self) -> str:
        return self._engine.model_dir()

    def stats(self) -> dict:
        return dict(self._engine.stats())

    def engine_options(self) -> dict:
        return dict(self._engine.options())

    # -- internals --------------------------------------------------------------------------------

    def _params_for(self, prompts: list, sampling_params) -> list[SamplingParams]:
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * len(prompts)
        sampling_params = list(sampling_params)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"generate: {len(sampling_params)} SamplingParams for {len(prompts)} prompts "
                             "(give one, or one per prompt)")
        return sampling_params

    def _parse_prompt(self, p: PromptType, i: int) -> tuple[str, list[int]]:
        if isinstance(p, str):
            text, ids = p, []
        elif isinstance(p, dict) and "prompt_token_ids" in p:
            text, ids = p.get("prompt", "") or "", [int(t) for t in p["prompt_token_ids"]]
        elif isinstance(p, dict) and "prompt" in p:
            text, ids = p["prompt"], []
        else:
            raise ValueError(f"prompt {i}: expected a string, {{'prompt': str}} or {{'prompt_token_ids': [...]}}, "
                             f"got {type(p).__name__}")
        if not text and not ids:
            raise ValueError(f"prompt {i} is empty")
        if text and not ids and not self._engine.has_tokenizer():
            raise ValueError(f"prompt {i} is text, but this model has no tokenizer: pass "
                             "{'prompt_token_ids': [...]} instead")
        return text, ids

    def _run(self, prompts: list[tuple[str, list[int]]], params: list[SamplingParams],
             use_tqdm: bool) -> list[RequestOutput]:
        with self._lock:
            return self._run_locked(prompts, params, use_tqdm)

    def _run_locked(self, prompts: list[tuple[str, list[int]]], params: list[SamplingParams],
                    use_tqdm: bool) -> list[RequestOutput]:
        ids: list[str] = []
        try:
            for (text, token_ids), sp in zip(prompts, params):
                rid = f"generate-{self._next_id}"
                self._next_id += 1
                self._engine.add_request(text, token_ids, sp._to_core(), rid)
                ids.append(rid)
        except ValueError as e:  # nothing half-runs: withdraw what was added
            for rid in ids:
                self._engine.abort(rid)
            while self._engine.has_unfinished():
                self._engine.step()
            raise ValueError(f"prompt {len(ids)}: {e}") from None
        index = {rid: i for i, rid in enumerate(ids)}
        results: list[Optional[RequestOutput]] = [None] * len(ids)
        bar = _progress(len(ids)) if use_tqdm else None
        decode = self._token_text if self._engine.has_tokenizer() else (lambda t: None)
        try:
            while self._engine.has_unfinished():
                for d in self._engine.step(False):
                    i = index.get(d["request_id"])
                    if i is None or not d["finished"]:
                        continue
                    sp = params[i]
                    results[i] = _from_core(d, sp.logprobs is not None, sp.prompt_logprobs is not None, decode)
                    if bar is not None:
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()
            if self._engine.has_unfinished():  # interrupted (e.g. KeyboardInterrupt): withdraw the rest
                for rid, res in zip(ids, results):
                    if res is None:
                        self._engine.abort(rid)
                while self._engine.has_unfinished():
                    self._engine.step()
        return results  # type: ignore[return-value]

    def _token_text(self, token_id: int) -> str:
        return self._engine.decode([token_id], False)


def _progress(total: int):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)
