"""Images of a prompt (vLLM's multi_modal_data) as the encoded file bytes the engine decodes."""
from typing import Any


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
        elif hasattr(x, "save"):  # PIL.Image: lossless PNG bytes
            import io
            buf = io.BytesIO()
            x.save(buf, format="PNG")
            out.append(buf.getvalue())
        else:
            raise TypeError(f"prompt {i}: image {k} must be a PIL.Image, bytes or a file path, "
                            f"got {type(x).__name__}")
    return out
