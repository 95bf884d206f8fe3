"""OpenAI request fields (and vLLM's extras) → SamplingParams; OpenAI-style errors."""
from __future__ import annotations

import json
from typing import Any, Optional

from ..sampling_params import SamplingParams, refuse_extra_args


class APIError(Exception):
    """Answered as OpenAI's {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 type_: str = "invalid_request_error", code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type_, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(message: str, param: Optional[str] = None) -> APIError:
    return APIError(400, message, param)


def get(body: dict, key: str, types: tuple, default: Any = None) -> Any:
    """body[key] checked against types (None and a missing key give default)."""
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in types:  # JSON true is not a number here
        raise bad(f"'{key}' must be {' or '.join(t.__name__ for t in types)}, got {json.dumps(v)}", key)
    if not isinstance(v, types):
        raise bad(f"'{key}' must be {' or '.join(t.__name__ for t in types)}, got {type(v).__name__}", key)
    return v


NUM = (int, float)
# vLLM's structured_outputs fields that tune its backends; the constraint is the same without them.
_SO_OPTIONS = {"disable_fallback", "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern",
               "_backend", "_backend_was_auto"}


def structured_args(body: dict) -> Optional[dict]:
    """response_format, vLLM's guided_* fields and structured_outputs ({json, regex, choice, grammar,
    json_object}) → so_args (at most one)."""
    found: list[tuple[str, dict]] = []
    rf = get(body, "response_format", (dict,))
    if rf is not None:
        kind = rf.get("type")
        if kind == "json_object":
            found.append(("response_format", {"schema_type": "json_object"}))
        elif kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
                raise bad("response_format.json_schema must be an object with a 'schema' object", "response_format")
            found.append(("response_format", {"schema_type": "json", "schema": js.get("schema", {})}))
        elif kind != "text":
            raise bad(f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
                      "response_format")
    spellings = {"json": "json", "regex": "regex", "choice": "choice", "grammar": "ebnf"}
    for key, schema_type in spellings.items():
        if body.get(f"guided_{key}") is not None:
            found.append((f"guided_{key}", {"schema_type": schema_type, "schema": body[f"guided_{key}"]}))
    so = get(body, "structured_outputs", (dict,))
    unknown = sorted(set(so or {}) - set(spellings) - _SO_OPTIONS - {"json_object"})
    if unknown:
        raise bad(f"structured_outputs: {', '.join(unknown)} not supported (json, regex, choice, grammar, "
                  "json_object)", "structured_outputs")
    for key, schema_type in spellings.items():
        if so and so.get(key) is not None:
            found.append(("structured_outputs", {"schema_type": schema_type, "schema": so[key]}))
    if so and so.get("json_object"):
        found.append(("structured_outputs", {"schema_type": "json_object"}))
    if len(found) > 1:
        raise bad(f"give one structured-output constraint, got {', '.join(k for k, _ in found)}", found[1][0])
    if not found:
        return None
    args = found[0][1]
    if args["schema_type"] == "json" and isinstance(args["schema"], str):
        try:
            args["schema"] = json.loads(args["schema"])
        except json.JSONDecodeError as e:
            raise bad(f"{found[0][0]}: the JSON schema is not valid JSON ({e})", found[0][0]) from None
    if args["schema_type"] == "choice":
        if not isinstance(args["schema"], list) or not all(isinstance(c, str) for c in args["schema"]):
            raise bad(f"{found[0][0]}: choice must be a list of strings", found[0][0])
        args["schema"] = json.dumps(args["schema"])
    return args


def sampling_params(body: dict, *, max_tokens_default: Optional[int], logprobs: Optional[int],
                    so_args: Optional[dict], skip_special_tokens: bool = True) -> SamplingParams:
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))):
        raise bad("'stop' must be a string or a list of strings", "stop")
    bias = get(body, "logit_bias", (dict,))
    try:
        bias = {int(k): float(v) for k, v in bias.items()} if bias else None
    except (TypeError, ValueError):
        raise bad("'logit_bias' maps token ids to numbers", "logit_bias") from None
    max_tokens = get(body, "max_completion_tokens", (int,), None)
    if max_tokens is None:
        max_tokens = get(body, "max_tokens", (int,), max_tokens_default)
    seed = get(body, "seed", (int,))
    if seed is not None and not -(1 << 63) <= seed < (1 << 64):  # OpenAI's seeds are int64: negatives wrap
        raise bad(f"'seed' = {seed} is outside [-2^63, 2^64)", "seed")
    kw = dict(
        n=get(body, "n", (int,), 1),
        temperature=float(get(body, "temperature", NUM, 1.0)),
        top_p=float(get(body, "top_p", NUM, 1.0)),
        top_k=get(body, "top_k", (int,), 0),
        min_p=float(get(body, "min_p", NUM, 0.0)),
        presence_penalty=float(get(body, "presence_penalty", NUM, 0.0)),
        frequency_penalty=float(get(body, "frequency_penalty", NUM, 0.0)),
        repetition_penalty=float(get(body, "repetition_penalty", NUM, 1.0)),
        max_tokens=max_tokens,
        min_tokens=get(body, "min_tokens", (int,), 0),
        stop=stop,
        stop_token_ids=get(body, "stop_token_ids", (list,)),
        ignore_eos=get(body, "ignore_eos", (bool,), False),
        include_stop_str_in_output=get(body, "include_stop_str_in_output", (bool,), False),
        skip_special_tokens=get(body, "skip_special_tokens", (bool,), skip_special_tokens),
        logit_bias=bias,
        logprobs=logprobs,
        seq_seed=seed if seed is None or seed >= 0 else seed & ((1 << 64) - 1),
        so_args=so_args,
    )
    try:  # vLLM's channel to SamplingParams.extra_args
        refuse_extra_args(get(body, "vllm_xargs", (dict,)), "'vllm_xargs'")
    except ValueError as e:
        raise bad(str(e), "vllm_xargs") from None
    best_of = get(body, "best_of", (int,))
    if best_of is not None and best_of != kw["n"]:
        raise bad("best_of other than n is not supported", "best_of")
    try:
        return SamplingParams(**kw)
    except (ValueError, TypeError) as e:
        raise bad(str(e)) from None
