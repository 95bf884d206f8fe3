"""SamplingParams: vLLM's field names and defaults, plus seq_seed (alias of seed) and so_args."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Union


@dataclass
class SamplingParams:
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, list[str]]] = None
    stop_token_ids: Optional[list[int]] = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    logit_bias: Optional[dict[int, float]] = None
    # DeepInfer: per-sequence seed (same as seed) and structured output
    # ({"schema_type": "regex" | "json" | "json_schema" | "ebnf" | "choice" | "json_object", "schema": ...}).
    seq_seed: Optional[int] = None
    so_args: Optional[dict[str, Any]] = None
    # vLLM hands these to custom logits processors and plugins; DeepInfer has neither, so a non-empty
    # dict is refused (refuse_extra_args) rather than accepted without effect.
    extra_args: Optional[dict[str, Any]] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.seq_seed is not None and self.seed is not None and self.seq_seed != self.seed:
            raise ValueError(f"SamplingParams: seed={self.seed} and seq_seed={self.seq_seed} disagree")
        if self.seq_seed is None:
            self.seq_seed = self.seed
        self.seed = self.seq_seed
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        refuse_extra_args(self.extra_args, "SamplingParams.extra_args")
        if self.so_args is not None and not isinstance(self.so_args, dict):
            raise ValueError("SamplingParams.so_args must be a dict like {'schema_type': ..., 'schema': ...}")
        from . import _core

        _core.validate_params(self._to_core())

    def _to_core(self) -> dict:
        # Shallow (not dataclasses.asdict, which recurses into lists without bound: a list holding
        # itself was a RecursionError); the core copies what it reads.
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        # Passed as given: the core checks every type and names the field (no silent "12" -> 12).
        d["stop"] = [] if self.stop is None else self.stop
        d["stop_token_ids"] = [] if self.stop_token_ids is None else self.stop_token_ids
        d["logit_bias"] = {} if self.logit_bias is None else self.logit_bias
        if self.max_tokens is None:
            d["max_tokens"] = 1 << 30  # until EOS or max_model_len
        if self.top_k == -1 and type(self.top_k) is int:
            d["top_k"] = 0
        if self.so_args is not None:
            so = dict(self.so_args)
            if not isinstance(so.get("schema", ""), str):
                so["schema"] = json.dumps(so["schema"])
            d["so_args"] = json.dumps(so)
        else:
            d["so_args"] = ""
        for key in ("seq_seed", "extra_args"):
            d.pop(key)
        return d


def refuse_extra_args(extra_args: Any, name: str) -> None:
    """None or {} pass; anything else is an error naming its keys (nothing in DeepInfer reads them)."""
    if extra_args is None:
        return
    if not isinstance(extra_args, dict):
        raise TypeError(f"{name} must be a dict, got {type(extra_args).__name__}")
    if extra_args:
        keys = [repr(k)[:40] for k in list(extra_args)[:8]]
        more = f" and {len(extra_args) - 8} more" if len(extra_args) > 8 else ""
        raise ValueError(f"{name} has {', '.join(keys)}{more}: DeepInfer has no custom logits processors or "
                         f"plugins to read extra arguments, so they would have no effect")
