"""The eval tasks: each reads its local file and scores a backend, returning (metric, score, n)."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Optional


def read_jsonl(path: Path, limit: Optional[int]) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def last_number(text: str) -> Optional[str]:
    nums = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return nums[-1].replace(",", "").rstrip(".") if nums else None


def gsm8k(backend, path: Path, limit: Optional[int], max_tokens: int) -> tuple[str, float, int]:
    """GSM8K format ({"question", "answer": "... #### 42"}): the last number of a greedy answer."""
    rows = read_jsonl(path, limit)
    prompts = [f"Question: {r['question']}\nAnswer: Let's think step by step." for r in rows]
    outs = backend.generate(prompts, max_tokens)
    gold = [r["answer"].split("####")[-1].strip().replace(",", "") for r in rows]
    hits = sum(last_number(o) == g for o, g in zip(outs, gold))
    return "exact_match", hits / len(rows), len(rows)


def continuation_logprob(backend, context: str, continuation: str) -> float:
    """Sum of log p(continuation tokens | context): the tokens past the context's own tokens."""
    ctx, full = backend.tokenize(context), backend.tokenize(context + continuation)
    n = len(ctx) if full[:len(ctx)] == ctx else len(full) - len(backend.tokenize(continuation))
    n = max(n, 1)
    return sum(backend.prompt_logprobs(full)[n - 1:])


def multiple_choice(backend, path: Path, limit: Optional[int], max_tokens: int) -> tuple[str, float, int]:
    """MMLU/ARC style ({"question", "choices", "answer": index}): the choice of highest log-likelihood."""
    rows = read_jsonl(path, limit)
    hits = 0
    for r in rows:
        context = f"Question: {r['question']}\nAnswer:"
        scores = [continuation_logprob(backend, context, " " + c) for c in r["choices"]]
        hits += max(range(len(scores)), key=scores.__getitem__) == r["answer"]
    return "accuracy", hits / len(rows), len(rows)


def json_schema(backend, path: Path, limit: Optional[int], max_tokens: int,
                constrained: bool = True) -> tuple[str, float, int]:
    """{"prompt", "schema"}: the share of answers that parse and validate against the schema."""
    import jsonschema
    rows = read_jsonl(path, limit)
    valid = 0
    for r in rows:
        so = {"schema_type": "json", "schema": r["schema"]} if constrained else None
        (out,) = backend.generate([r["prompt"]], max_tokens, so)
        try:
            jsonschema.validate(json.loads(out), r["schema"])
            valid += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    return "schema_valid", valid / len(rows), len(rows)


def needle(backend, path: Path, limit: Optional[int], max_tokens: int) -> tuple[str, float, int]:
    """Needle in a haystack: a number hidden at several depths of filler text of several lengths
    (in tokens); the score is the share of answers that contain it."""
    cfg = json.loads(path.read_text())
    rng = random.Random(cfg.get("seed", 0))
    filler = cfg["filler"]
    cases = [(n, d) for n in cfg["lengths"] for d in cfg["depths"]][:limit or None]
    hits = 0
    for length, depth in cases:
        secret = str(rng.randrange(10000, 99999))
        sentences = []
        while len(backend.tokenize(" ".join(sentences))) < length:
            sentences.append(filler[len(sentences) % len(filler)])
        sentences.insert(int(depth * len(sentences)), cfg["needle"].format(secret=secret))
        prompt = " ".join(sentences) + "\n" + cfg["question"]
        (out,) = backend.generate([prompt], max_tokens)
        hits += secret in out
    return "retrieved", hits / len(cases), len(cases)


TASKS = {"gsm8k": (gsm8k, "gsm8k_tiny.jsonl"), "multiple_choice": (multiple_choice, "mc_tiny.jsonl"),
         "json_schema": (json_schema, "json_schema_tiny.jsonl"), "needle": (needle, "needle.json")}
