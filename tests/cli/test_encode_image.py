"""`deepinfer encode-image`: the vision stage alone from the command line. On the tiny-vision goldens the
pixel values equal the reference's and the aligner rows are within VISION.md's tolerance (rel. rms <= 0.02,
max |d| <= 0.06); the demo model's random vision tower encodes a JPEG; bad input is a clear error."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"
VIS = ROOT / "tests/data/goldens/v41/tiny-vision"

pytestmark = pytest.mark.skipif(not BIN.exists(), reason="deepinfer CLI not built")


def read_goldens(path):
    """The goldens' tensors as numpy (BF16 widened to float32; numpy has no bfloat16)."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    types = {"F32": np.float32, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BF16": np.uint16}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        v = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=types[t["dtype"]]).reshape(t["shape"])
        out[name] = (v.astype(np.uint32) << 16).view(np.float32) if t["dtype"] == "BF16" else v
    return out


def encode(model, images, out=None):
    args = [str(BIN), "encode-image", "--model", str(model)]
    for im in images:
        args += ["--image", str(im)]
    if out:
        args += ["--output", str(out)]
    return subprocess.run(args, capture_output=True, text=True)


def test_goldens(tmp_path):
    out = tmp_path / "enc.safetensors"
    r = encode(VIS, [VIS / f"image_{k}.png" for k in range(3)], out)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    gold = read_goldens(VIS / "goldens.safetensors")
    mine = load_file(str(out))
    for k, line in enumerate(lines):
        grid = gold[f"img{k}.grid"]
        assert line["vit_grid_hw"] == grid[:2].tolist() and line["llm_grid_hw"] == grid[2:4].tolist()
        assert line["canvas_wh"] == [int(grid[5]), int(grid[4])]
        assert line["span_len"] == gold[f"img{k}.token_types"].size
        assert np.array_equal(mine[f"img{k}.pixel_values"], gold[f"img{k}.pixel_values"])
        ref = gold[f"img{k}.aligner_out"]
        d = mine[f"img{k}.aligner_out"] - ref
        assert np.linalg.norm(d) / np.linalg.norm(ref) <= 0.02 and np.abs(d).max() <= 0.06


def test_demo_model_has_a_vision_tower(tmp_path):
    demo = tmp_path / "demo"
    subprocess.run([str(BIN), "make-demo-model", str(demo)], check=True, capture_output=True)
    assert "vision_config" in json.loads((demo / "config.json").read_text())
    out = tmp_path / "enc.safetensors"
    r = encode(demo, [ROOT / "tests/data/vision/photo.jpg"], out)
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    h, w = line["llm_grid_hw"]
    rows = load_file(str(out))["img0.aligner_out"]
    assert rows.shape == (h * w, 128) and np.isfinite(rows).all() and rows.std() > 0.1


def test_bad_input(tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("not a picture")
    r = encode(VIS, [bad])
    assert r.returncode == 1
    assert f"{bad}: not an image file (13 bytes; PNG, JPEG and WebP are supported)" in r.stderr
    cut = tmp_path / "cut.png"
    cut.write_bytes((VIS / "image_1.png").read_bytes()[:3000])
    r = encode(VIS, [cut])
    assert r.returncode == 1 and "corrupt or truncated PNG" in r.stderr
    r = encode(ROOT / "tests/data/goldens/v41/tiny-a", [VIS / "image_0.png"])
    assert r.returncode == 1 and "the model has no vision tower" in r.stderr
