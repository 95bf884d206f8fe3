# Puts python/ (where ./build.sh writes the extension next to the package) on sys.path.
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


import subprocess  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory):
    """A random-weight V4.1 model with the DeepSeek V4 tokenizer (deepinfer make-demo-model)."""
    cli = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"
    if not cli.exists():
        pytest.skip("build/tools/deepinfer not built")
    path = tmp_path_factory.mktemp("demo") / "model"
    subprocess.run([str(cli), "make-demo-model", str(path)], check=True, capture_output=True)
    return str(path)
