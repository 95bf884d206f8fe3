"""Chat about an image with DeepInfer (DeepSeek-V4.1 sees images through its vision tower).

    python examples/image_chat.py [--model DIR_OR_REPO_ID] [--image FILE] [--max-tokens N]

Images go in OpenAI's content parts: {"type": "image_url", "image_url": {"url": U}} with U a
"data:image/png;base64,..." URL or a local file path (also file://); http(s) URLs are not downloaded.
The same messages work against `deepinfer serve` (/v1/chat/completions; file paths only inside
--allowed-local-media-path). Without the real model this runs the random-weight demo model, whose
vision tower is small and random: the pipeline is real, the text is random.
"""
import argparse
import base64
import pathlib
import sys

from offline_inference import DEFAULT_MODEL, ROOT, demo_model  # the demo fallback and the package path

from deepinfer import LLM, SamplingParams  # noqa: E402

DEFAULT_IMAGE = ROOT / "tests" / "data" / "vision" / "photo.jpg"


def image_part(path: pathlib.Path) -> dict:
    """An image_url part with the image inline (what an OpenAI client sends)."""
    mime = "image/jpeg" if path.suffix.lower() in (".jpg", ".jpeg") else f"image/{path.suffix.lower().lstrip('.')}"
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--image", type=pathlib.Path, default=DEFAULT_IMAGE)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    try:
        llm = LLM(model=args.model)
    except ValueError as e:
        print(f"deepinfer: cannot use {args.model} ({str(e).splitlines()[0]}); running the random-weight demo "
              "model instead, so the text below is random.", file=sys.stderr)
        llm = LLM(model=demo_model())

    params = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    question = {"type": "text", "text": "What is in this image? Answer in one sentence."}
    inline = [{"role": "user", "content": [image_part(args.image), question]}]
    by_path = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(args.image)}}, question]}]
    text_only = [{"role": "user", "content": question["text"]}]
    a, b, c = llm.chat([inline, by_path, text_only], params, use_tqdm=False)
    print(f"Image ({args.image.name}, {len(a.prompt_token_ids) - len(c.prompt_token_ids)} more prompt tokens than "
          f"the text alone): {a.outputs[0].text!r}")
    print(f"The same image by path gives the same answer: {a.outputs[0].text == b.outputs[0].text}")
    print(f"Without the image: {c.outputs[0].text!r}")

    try:
        llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}],
                 use_tqdm=False)
    except ValueError as e:  # bad images are clear errors, and the engine carries on
        print(f"An http URL: {e}")


if __name__ == "__main__":
    main()
