"""Images of a prompt (vLLM's multi_modal_data) as the encoded file bytes the engine decodes."""
import base64
import io
from typing import Any


def png_bytes(image: Any) -> bytes:
    """A PIL.Image as lossless PNG bytes."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def inline_pil_images(messages: list) -> list:
    """Chat messages with vLLM's {"type": "image_pil", "image_pil": PIL.Image} parts as image_url parts
    (PNG data: URLs), so that the messages are JSON; other messages are returned as they are."""
    out = []
    for m in messages:
        parts = m.get("content") if isinstance(m, dict) else None
        if isinstance(parts, list) and any(isinstance(p, dict) and p.get("type") == "image_pil" for p in parts):
            parts = [{"type": "image_url", "image_url": {
                        "url": "data:image/png;base64," + base64.b64encode(png_bytes(p["image_pil"])).decode()}}
                     if isinstance(p, dict) and p.get("type") == "image_pil" else p for p in parts]
            m = {**m, "content": parts}
        out.append(m)
    return out


def image_bytes(mm: Any, i: int) -> list[bytes]:
    """multi_modal_data={"image": x or [x, ...]}: each x a PIL.Image, encoded file bytes or a file path;
    one per image placeholder of the prompt, in order."""
    if mm is None:
        return []
    if not isinstance(mm, dict) or set(mm) - {"image"}:
        raise ValueError(f"prompt {i}: multi_modal_data must be {{'image': ...}} (images only)")
    items = mm.get("image")
    items = list(items) if isinstance(items, (list, tuple)) else [items]
    out = []
    for k, x in enumerate(items):
        if isinstance(x, (bytes, bytearray)):
            out.append(bytes(x))
        elif isinstance(x, str):
            with open(x, "rb") as f:
                out.append(f.read())
        elif hasattr(x, "save"):  # PIL.Image
            out.append(png_bytes(x))
        else:
            raise TypeError(f"prompt {i}: image {k} must be a PIL.Image, bytes or a file path, "
                            f"got {type(x).__name__}")
    return out
