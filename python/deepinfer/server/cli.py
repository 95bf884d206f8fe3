"""`deepinfer serve`: loads the model once and serves it over HTTP with uvicorn."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Optional, Sequence


def _draft_count(text: str) -> int:
    k = int(text)  # argparse turns the ValueError into "invalid _draft_count value"
    if k < 1:
        raise argparse.ArgumentTypeError(f"the draft count must be >= 1, got {k}")
    return k


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="deepinfer serve", description="OpenAI-compatible server over DeepInfer's engine")
    p.add_argument("model_pos", nargs="?", metavar="MODEL", help="model folder or Hugging Face repo id")
    p.add_argument("--model", help="model folder or Hugging Face repo id (or give it first)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=os.environ.get("DEEPINFER_API_KEY"),
                   help="refuse /v1 requests without 'Authorization: Bearer KEY' (default: DEEPINFER_API_KEY)")
    p.add_argument("--served-model-name", help="the name clients give as 'model' (default: --model)")
    p.add_argument("--tokenizer")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--state-memory-mb", type=int, help="state budget in MiB (default DEEPINFER_STATE_MEMORY_MB)")
    p.add_argument("--num-state-blocks", type=int,
                   help="state budget in blocks of the model's state block size (instead of --state-memory-mb)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", help="cpu, cuda or cuda:N (default DEEPINFER_DEVICE, else cpu)")
    p.add_argument("--speculative", nargs="?", type=_draft_count, const=True, metavar="K",
                   help="DSpark speculative decoding (V4.1), up to K draft tokens a step (default "
                        "DEEPINFER_USE_NEXTN_DECODE); /metrics then reports the acceptance")
    p.add_argument("--speculative-schedule", choices=["confidence", "fixed"],
                   help="per-request draft lengths from the drafts' confidences, or K every step")
    p.add_argument("--allowed-local-media-path", metavar="DIR",
                   help="chat image_url parts may name image files inside DIR (default: data: URLs only)")
    p.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false",
                   help="recompute every prompt from its first token (prefix caching is on by default)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    args = p.parse_args(list(argv))
    if bool(args.model) == bool(args.model_pos):
        p.error("give the model once: deepinfer serve MODEL or --model MODEL")
    args.model = args.model or args.model_pos
    if args.num_state_blocks is not None and args.state_memory_mb is not None:
        p.error("give the state budget once: --state-memory-mb or --num-state-blocks")
    if args.speculative_schedule and args.speculative is None:
        p.error("--speculative-schedule needs --speculative")
    if args.allowed_local_media_path is not None and not os.path.isdir(args.allowed_local_media_path):
        p.error(f"--allowed-local-media-path {args.allowed_local_media_path}: not a folder")
    return args


def chat_format(model_dir: str, has_tokenizer: bool) -> Optional[str]:
    """'v41' or 'v4': the DeepSeek chat encoding of the model (the engine's own choice, llm.cpp)."""
    if not has_tokenizer:
        return None
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            model_type = json.load(f).get("model_type", "")
    except (OSError, ValueError):
        model_type = ""
    return "v41" if model_type == "deepseek_v41" else "v4"


def speculative(args: argparse.Namespace) -> Optional[dict]:
    """LLM(speculative=...) of --speculative [K] and --speculative-schedule (None: the engine's default)."""
    if args.speculative is None:
        return None
    spec: dict = {} if args.speculative is True else {"num_draft_tokens": args.speculative}
    if args.speculative_schedule:
        spec["schedule"] = args.speculative_schedule
    return spec


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    import uvicorn

    from ..llm import LLM
    from .app import build_app
    from .engine_loop import AsyncEngine

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        llm = LLM(args.model, tokenizer=args.tokenizer, device=args.device, seed=args.seed,
                  max_model_len=args.max_model_len, speculative=speculative(args),
                  max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                  state_memory_bytes=None if args.state_memory_mb is None else args.state_memory_mb << 20,
                  num_state_blocks=args.num_state_blocks,
                  enable_prefix_caching=args.prefix_caching)
    except (ValueError, OSError) as e:
        print(f"deepinfer serve: error: {e}", file=sys.stderr)
        return 1
    engine = AsyncEngine(llm)
    name = args.served_model_name or args.model
    app = build_app(engine, name, chat_format(llm.model_dir, llm._engine.has_tokenizer()), api_key=args.api_key,
                    allowed_local_media_path=args.allowed_local_media_path)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    finally:
        engine.shutdown()
    return 0
