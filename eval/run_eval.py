#!/usr/bin/env python3
"""Scores a model on local task files and prints a table (see eval/README.md).

  python3 eval/run_eval.py --model DIR_OR_ID [--tasks gsm8k,multiple_choice,json_schema,needle]
  python3 eval/run_eval.py --server http://127.0.0.1:8000 [--api-key KEY]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backends import LocalBackend, ServerBackend  # noqa: E402
from tasks import TASKS  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="model folder or Hugging Face repo id (runs in process through deepinfer.LLM)")
    where.add_argument("--server", help="base URL of an OpenAI-compatible server (deepinfer serve)")
    p.add_argument("--api-key")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {', '.join(TASKS)}")
    p.add_argument("--task-dir", type=Path, default=Path(__file__).resolve().parent / "tasks",
                   help="folder of the task files (default: the tiny bundled ones)")
    p.add_argument("--limit", type=int, help="at most this many items per task")
    p.add_argument("--max-tokens", type=int, default=256, help="generation budget per answer")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = p.parse_args(argv)

    names = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        p.error(f"unknown tasks {unknown} (known: {', '.join(TASKS)})")
    backend = LocalBackend(args.model) if args.model else ServerBackend(args.server, args.api_key)
    rows = []
    for name in names:
        fn, filename = TASKS[name]
        path = args.task_dir / filename
        if not path.exists():
            p.error(f"task '{name}': {path} is missing (eval/README.md says where to get it)")
        t0 = time.monotonic()
        metric, score, n = fn(backend, path, args.limit, args.max_tokens)
        rows.append({"task": name, "metric": metric, "score": score, "n": n, "seconds": time.monotonic() - t0})
    print(f"| {'task':<16} | {'metric':<13} | {'score':>6} | {'n':>4} | {'seconds':>8} |")
    print(f"|{'-' * 18}|{'-' * 15}|{'-' * 8}|{'-' * 6}|{'-' * 10}|")
    for r in rows:
        print(f"| {r['task']:<16} | {r['metric']:<13} | {r['score']:>6.3f} | {r['n']:>4} | {r['seconds']:>8.1f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
