"""Tokens/s of greedy generation with DSpark speculation off, fixed-count and confidence-scheduled, with
the drafts verified/accepted and tau, on a V4.1 model folder (default: the demo from make-demo-model).

    python bench/spec/cpu_speculative.py MODEL_DIR [--requests 8] [--tokens 32]

No library does the same job on this engine, so there is no peer column; the floor of speculation is
the plain decode (row "off") times tau, which a random-weight head cannot approach (tau ~ 1)."""
import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
from deepinfer import LLM, SamplingParams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    prompts = [{"prompt_token_ids": [(i * 131 + j * 37 + 11) % 300 for j in range(20)]} for i in range(a.requests)]
    params = SamplingParams(temperature=0, max_tokens=a.tokens, ignore_eos=True)
    modes = [("off", None), ("fixed 4", {"num_draft_tokens": 4, "schedule": "fixed"}),
             ("confidence", {"schedule": "confidence"})]
    print(f"{'mode':11s} {'tok/s':>7s} {'verified':>9s} {'accepted':>9s} {'tau':>6s}")
    for name, spec in modes:
        llm = LLM(a.model, max_num_seqs=a.requests, max_model_len=256, **({"speculative": spec} if spec else {}))
        llm.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)  # warm-up
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        dt = time.perf_counter() - t
        n = sum(len(o.outputs[0].token_ids) for o in outs)
        m = [o.metrics.speculative for o in outs]
        ver, acc, steps = sum(x.verified for x in m), sum(x.accepted for x in m), sum(x.decode_steps for x in m)
        print(f"{name:11s} {n / dt:7.1f} {ver:9d} {acc:9d} {(acc + steps) / steps if steps else 1.0:6.3f}")


if __name__ == "__main__":
    main()
