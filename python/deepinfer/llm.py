"""LLM: offline generation over DeepInfer's C++ engine (continuous batching, async scheduling)."""
from __future__ import annotations

import json
import threading
from typing import Any, Optional, Sequence, Union

from ._images import image_bytes as _image_bytes, inline_pil_images as _inline_pil_images

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


_SPECULATIVE_KEYS = {"method", "num_draft_tokens", "num_speculative_tokens", "schedule", "step_costs", "log_steps"}


def speculative_config(value: Union[bool, int, dict, None]) -> Optional[dict]:
    """LLM(speculative=...) as the engine's fields. True: on (draft count DEEPINFER_USE_NEXTN_DECODE, schedule
    by DEEPINFER_ENABLE_MTP_VARLEN); K: on with K draft tokens; a dict: num_draft_tokens (alias
    num_speculative_tokens), schedule "confidence" (per-request lengths from the drafts' confidences and the
    measured step cost) or "fixed" (K every step), step_costs (seconds of a step of 1, 2, 4, ... tokens instead
    of measuring), log_steps, method ("dspark", the only one); False: off."""
    if value is None:
        return None
    if isinstance(value, bool):
        return {"enabled": value}
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"LLM.speculative = {value}: a draft count must be >= 1")
        return {"enabled": True, "num_draft_tokens": value}
    if not isinstance(value, dict):
        raise TypeError(f"LLM.speculative must be a bool, an int or a dict, got {type(value).__name__}")
    unknown = sorted(set(value) - _SPECULATIVE_KEYS)
    if unknown:
        raise ValueError(f"LLM.speculative: unknown keys {unknown} (known: {sorted(_SPECULATIVE_KEYS)})")
    if value.get("method", "dspark") != "dspark":
        raise ValueError(f"LLM.speculative: method {value['method']!r} is not supported (only 'dspark')")
    out: dict = {"enabled": True}
    k = value.get("num_draft_tokens", value.get("num_speculative_tokens"))
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"LLM.speculative.num_draft_tokens = {k!r} must be an int >= 1")
        out["num_draft_tokens"] = k
    if "schedule" in value:
        if value["schedule"] not in ("confidence", "fixed"):
            raise ValueError(f"LLM.speculative.schedule = {value['schedule']!r} must be 'confidence' or 'fixed'")
        out["confidence_scheduling"] = value["schedule"] == "confidence"
    if "step_costs" in value:
        out["step_costs"] = [float(x) for x in value["step_costs"]]
    if "log_steps" in value:
        out["log_steps"] = bool(value["log_steps"])
    return out


class LLM:
    """An offline LLM. `model` is a local folder or a Hugging Face repo id.

    Engine arguments: device ("cpu", "cuda", "cuda:N"; default DEEPINFER_DEVICE, else cpu; V4.1 runs on
    CUDA, V4 on the CPU), max_model_len (default: the checkpoint's max_position_embeddings; above it only
    with allow_long_max_model_len=True), max_num_seqs, max_num_batched_tokens, async_scheduling
    (default DEEPINFER_ASYNC_SCHEDULING), batch_invariant (default DEEPINFER_BATCH_INVARIANT),
    device_sampling (plain greedy / temperature rows drawn on the model's device, only tokens crossing to
    the host; the same tokens as the host sampler; default DEEPINFER_DEVICE_SAMPLING, on),
    state_memory_bytes / num_state_blocks (state budget: bytes, or blocks of the model's state block size),
    max_logprobs (most logprobs a request may ask for, default 20 as vLLM), seed,
    speculative (DSpark drafting with lossless verification, V4.1 checkpoints: True, a draft count K, or
    {"num_draft_tokens": K, "schedule": "confidence" | "fixed"}; default: on when
    DEEPINFER_ENABLE_MTP_VARLEN=1; see speculative_config()), load_format ("auto", or "dummy": random
    weights in the released formats from config.json alone, for benchmarks; default DEEPINFER_LOAD_FORMAT),
    enable_prefix_caching (default True: requests sharing a prompt prefix reuse its model state; models
    that cannot copy their states, DeepSeek-V4, run without; docs/prefix_caching.md),
    prefix_block_tokens (tokens per cache block, default 64),
    data_parallel_size (attention-DP engine ranks stepping in lock-step, CPU threads; default
    DEEPINFER_DATA_PARALLEL_SIZE), enable_expert_parallel (routed experts split over those ranks, V4.1;
    default DEEPINFER_ENABLE_EXPERT_PARALLEL), context_parallel_size (balanced context parallelism: each
    forward's tokens split over this many CPU-thread ranks, V4.1; default DEEPINFER_CONTEXT_PARALLEL_SIZE)
    with context_parallel_layout ("zigzag" or "round_robin"; default DEEPINFER_CONTEXT_PARALLEL_LAYOUT);
    combined with data_parallel_size each DP rank is a CP group, and enable_expert_parallel splits the
    experts over all dp * cp ranks; see docs/parallelism.md.
    Wrong types are TypeError, out-of-range values ValueError, each naming the argument.
    """

    def __init__(self, model: str, *, tokenizer: Optional[str] = None, device: Optional[str] = None, seed: int = 0,
                 max_model_len: Optional[int] = None, max_num_seqs: Optional[int] = None,
                 max_num_batched_tokens: Optional[int] = None, async_scheduling: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None, state_memory_bytes: Optional[int] = None,
                 device_sampling: Optional[bool] = None, num_state_blocks: Optional[int] = None, max_logprobs: int = 20,
                 allow_long_max_model_len: bool = False,
                 speculative: Union[bool, int, dict, None] = None, load_format: Optional[str] = None,
                 enable_prefix_caching: Optional[bool] = None, prefix_block_tokens: Optional[int] = None,
                 data_parallel_size: Optional[int] = None, enable_expert_parallel: Optional[bool] = None,
                 context_parallel_size: Optional[int] = None, context_parallel_layout: Optional[str] = None,
                 **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - _ACCEPTED_VLLM_ARGS)
        if unknown:
            raise TypeError(f"LLM() got unknown engine arguments: {', '.join(unknown)}")
        config = dict(tokenizer=tokenizer, device=device, seed=seed, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens, async_scheduling=async_scheduling,
                      batch_invariant=batch_invariant, state_memory_bytes=state_memory_bytes,
                      device_sampling=device_sampling,
                      num_state_blocks=num_state_blocks, max_logprobs=max_logprobs,
                      allow_long_max_model_len=allow_long_max_model_len,
                      speculative=speculative_config(speculative), load_format=load_format,
                      enable_prefix_caching=enable_prefix_caching, prefix_block_tokens=prefix_block_tokens,
                      data_parallel_size=data_parallel_size, enable_expert_parallel=enable_expert_parallel,
                      context_parallel_size=context_parallel_size, context_parallel_layout=context_parallel_layout)
        if not isinstance(model, str):
            raise TypeError(f"LLM: model must be a str (a folder or a repo id), got {type(model).__name__}")
        self._engine = _core.Engine(model, {k: v for k, v in config.items() if v is not None})
        self._lock = threading.Lock()  # one generate() at a time: step() serves every request
        # request-level API (add_request, abort_request, step); refuses to step while generate() runs
        self.llm_engine = LLMEngine(self._engine, self._lock)
        self._next_id = 0

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
             chat_template_kwargs: Optional[dict[str, Any]] = None, tools: Optional[list[dict]] = None,
             special_tokens_in_content: bool = False) -> list[RequestOutput]:
        """messages: one conversation (a list of OpenAI messages) or a list of them. content: a string or
        a list of parts: {"type": "text", "text": ...}, {"type": "image_url", "image_url": {"url": U}} with
        U a "data:image/...;base64," URL, a file path or a file:// URL (http(s) URLs are not downloaded),
        or {"type": "image_pil", "image_pil": PIL.Image}; each image goes where its part is (V4.1 models
        with a vision tower). Assistant messages may carry tool_calls, tool messages a tool_call_id. tools: the OpenAI tool list, rendered in DeepSeek's DSML format.
        Special-token strings typed in a message (e.g. "<｜User｜>") stay text unless
        special_tokens_in_content=True (trusted input only).
        chat_template_kwargs: {"thinking": bool} (or "enable_thinking") and {"reasoning_effort": str}."""
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
            raise TypeError(f"chat: chat_template_kwargs must be a dict, got {type(chat_template_kwargs).__name__}")
        kw = dict(chat_template_kwargs or {})
        thinking = kw.pop("thinking", kw.pop("enable_thinking", None))
        thinking = False if thinking is None else thinking
        effort = kw.pop("reasoning_effort", "") or ""
        if kw:
            raise ValueError(f"chat_template_kwargs: unknown keys {sorted(kw, key=repr)} (thinking, reasoning_effort)")
        # Checked here, not converted: bool("no") is True, and the core's own message names no argument.
        for name, value, kind in (("chat_template_kwargs.thinking", thinking, bool),
                                  ("chat_template_kwargs.reasoning_effort", effort, str),
                                  ("add_generation_prompt", add_generation_prompt, bool),
                                  ("special_tokens_in_content", special_tokens_in_content, bool)):
            if type(value) is not kind:
                raise TypeError(f"chat: {name} must be a {kind.__name__}, got {type(value).__name__}")
        if not isinstance(messages, (list, tuple)):
            raise TypeError(f"chat: messages must be a list of messages (dicts), got {type(messages).__name__}")
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        for i, conv in enumerate(conversations):
            if not isinstance(conv, (list, tuple)) or not all(isinstance(m, dict) for m in conv):
                what = type(conv).__name__ if not isinstance(conv, (list, tuple)) else "a list holding a non-dict"
                raise TypeError(f"chat: messages[{i}] must be a conversation (a list of message dicts), got {what}")
        try:
            tools_json = json.dumps(tools, ensure_ascii=False) if tools else ""
        except (TypeError, ValueError) as e:
            raise TypeError(f"chat: tools is not JSON-serializable: {e}") from None
        _unicode(tools_json, "chat: tools")
        _unicode(effort, "chat: chat_template_kwargs.reasoning_effort")
        prompts = []
        for i, conv in enumerate(conversations):
            try:
                text = json.dumps(_inline_pil_images(list(conv)), ensure_ascii=False)
            except (TypeError, ValueError) as e:
                raise TypeError(f"chat: conversation {i} is not JSON-serializable: {e}") from None
            _unicode(text, f"chat: conversation {i}")
            ids, images = self._engine.chat_prompt(text, tools_json, thinking, effort, add_generation_prompt,
                                                   special_tokens_in_content)
            prompts.append({"prompt_token_ids": ids, "multi_modal_data": {"image": images}} if images
                           else {"prompt_token_ids": ids})
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def encode(self, text: str) -> list[int]:
        return list(self._engine.encode(text))

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._engine.decode(token_ids, skip_special_tokens)  # checked there: a list of ids in the vocabulary

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
        if isinstance(sampling_params, (SamplingParams, dict)):
            return [_as_params(sampling_params)] * len(prompts)
        if not isinstance(sampling_params, (list, tuple)):
            raise TypeError("generate: sampling_params must be a SamplingParams, a dict of its fields, or a list "
                            f"of them, got {type(sampling_params).__name__}")
        sampling_params = [_as_params(p) for p in sampling_params]
        if len(sampling_params) != len(prompts):
            raise ValueError(f"generate: {len(sampling_params)} SamplingParams for {len(prompts)} prompts "
                             "(give one, or one per prompt)")
        return sampling_params

    def _parse_prompt(self, p: PromptType, i: int) -> tuple[str, list[int], list[bytes]]:
        if isinstance(p, str):
            text, ids = p, []
        elif isinstance(p, dict) and "prompt_token_ids" in p:
            text, ids = p.get("prompt", "") or "", p["prompt_token_ids"]
            if not isinstance(ids, (list, tuple)) or not all(type(t) is int for t in ids):
                bad = ids if not isinstance(ids, (list, tuple)) else next(t for t in ids if type(t) is not int)
                raise TypeError(f"prompt {i}: prompt_token_ids must be a list of ints, found {bad!r} "
                                f"({type(bad).__name__})")
            ids = list(ids)
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
        images = _image_bytes(p.get("multi_modal_data") if isinstance(p, dict) else None, i)
        return text, ids, images

    def _run(self, prompts: list[tuple[str, list[int]]], params: list[SamplingParams],
             use_tqdm: bool) -> list[RequestOutput]:
        with self._lock:
            return self._run_locked(prompts, params, use_tqdm)

    def _run_locked(self, prompts: list[tuple[str, list[int]]], params: list[SamplingParams],
                    use_tqdm: bool) -> list[RequestOutput]:
        self._engine.claim_driver()  # a step() from another thread is refused until this call returns
        try:
            return self._run_driven(prompts, params, use_tqdm)
        finally:
            self._engine.release_driver()

    def _run_driven(self, prompts: list[tuple[str, list[int]]], params: list[SamplingParams],
                    use_tqdm: bool) -> list[RequestOutput]:
        ids: list[str] = []
        try:
            for (text, token_ids, images), sp in zip(prompts, params):
                rid = f"generate-{self._next_id}"
                self._next_id += 1
                self._engine.add_request(text, token_ids, sp._to_core(), rid, images)
                ids.append(rid)
        except (ValueError, TypeError) as e:  # nothing half-runs: withdraw what was added
            for rid in ids:
                self._engine.abort(rid)
            self._drain(set(ids))
            raise type(e)(f"prompt {len(ids)}: {e}") from None
        index = {rid: i for i, rid in enumerate(ids)}
        results: list[Optional[RequestOutput]] = [None] * len(ids)
        bar = _progress(len(ids)) if use_tqdm else None
        decode = self._token_text if self._engine.has_tokenizer() else (lambda t: None)
        try:
            while self._engine.has_unfinished() and any(r is None for r in results):
                for d in self._engine.step(False):
                    i = index.get(d["request_id"])
                    if i is None:
                        self.llm_engine._deliver(d)  # a request of llm_engine's: its outputs, not ours
                        continue
                    if not d["finished"]:
                        continue
                    sp = params[i]
                    results[i] = _from_core(d, sp.logprobs is not None, sp.prompt_logprobs is not None, decode)
                    if bar is not None:
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()
            pending = {rid for rid, res in zip(ids, results) if res is None}
            if pending:  # interrupted (e.g. KeyboardInterrupt): withdraw the rest
                for rid in pending:
                    self._engine.abort(rid)
                self._drain(pending)
        return results  # type: ignore[return-value]

    def _drain(self, mine: set) -> None:
        """Steps until the requests in `mine` are gone; other requests' outputs go to llm_engine."""
        while mine and self._engine.has_unfinished():
            for d in self._engine.step(False):
                if d["request_id"] in mine:
                    if d["finished"]:
                        mine.discard(d["request_id"])
                else:
                    self.llm_engine._deliver(d)

    def _token_text(self, token_id: int) -> str:
        return self._engine.decode([token_id], False)


def _unicode(text: str, what: str) -> str:
    """text, if it can go to the core as UTF-8 (a lone surrogate cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode (it holds a lone surrogate)") from None
    return text


def _as_params(p) -> SamplingParams:
    if isinstance(p, SamplingParams):
        return p
    if isinstance(p, dict):
        return SamplingParams(**p)  # unknown keys: TypeError naming them
    raise TypeError(f"sampling_params entries must be SamplingParams or dicts, got {type(p).__name__}")


def _progress(total: int):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)
