"""OpenAI response bodies built from the engine's raw outputs (dicts of deepinfer._core.step)."""
from __future__ import annotations

from typing import Callable, Optional

Decode = Callable[[int], str]

def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI usage; cached_tokens: prompt tokens served from the prefix cache."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def _chosen_and_top(position: list, token_id: int, k: int) -> tuple[float, list]:
    """(logprob of the sampled token, the top-k entries by rank) of one position."""
    chosen = next((lp for t, lp, _ in position if t == token_id), float("nan"))
    top = sorted(position, key=lambda e: e[2])[:k]
    return chosen, top


def completion_logprobs(choice: dict, start: int, k: int, decode: Decode, text_offset: int) -> dict:
    """OpenAI completions logprobs for the tokens from `start` on."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    offset = text_offset
    for pos, tid in zip(choice["logprobs"][start:], choice["token_ids"][start:]):
        lp, top = _chosen_and_top(pos, tid, k)
        tok = decode(tid)
        out["tokens"].append(tok)
        out["token_logprobs"].append(lp)
        out["top_logprobs"].append({decode(t): l for t, l, _ in top})
        out["text_offset"].append(offset)
        offset += len(tok)
    return out


def chat_logprobs(choice: dict, start: int, k: int, decode: Decode) -> dict:
    def entry(tid: int, lp: float) -> dict:
        tok = decode(tid)
        return {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8"))}

    content = []
    for pos, tid in zip(choice["logprobs"][start:], choice["token_ids"][start:]):
        lp, top = _chosen_and_top(pos, tid, k)
        content.append({**entry(tid, lp), "top_logprobs": [entry(t, l) for t, l, _ in top]})
    return {"content": content}


def prompt_logprobs(raw: dict, decode: Decode) -> Optional[list]:
    """vLLM's prompt_logprobs: None for the first token, then {id: {logprob, rank, decoded_token}}."""
    positions = raw.get("prompt_logprobs") or []
    if not positions:
        return None
    out: list = [None]
    for pos in positions[1:]:
        out.append({str(t): {"logprob": lp, "rank": r, "decoded_token": decode(t)} for t, lp, r in pos})
    return out
