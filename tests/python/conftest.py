# Puts python/ (where ./build.sh writes the extension next to the package) on sys.path, unless
# DEEPINFER_TEST_INSTALLED=1 (test.sh after `pip install .`) or =editable (after `pip install -e .`):
# then the installed package is tested.
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSTALLED = os.environ.get("DEEPINFER_TEST_INSTALLED") in ("1", "editable")
EDITABLE = os.environ.get("DEEPINFER_TEST_INSTALLED") == "editable"
if not INSTALLED:
    sys.path.insert(0, str(ROOT / "python"))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), *filter(None, [os.environ.get("PYTHONPATH")])])


def deepinfer_command() -> list[str]:
    """The `deepinfer` command: the installed entry point, or `python -m deepinfer` on the source tree."""
    if INSTALLED:
        exe = shutil.which("deepinfer")
        if exe is None:
            pytest.fail("DEEPINFER_TEST_INSTALLED is set but no `deepinfer` command is on PATH")
        return [exe]
    return [sys.executable, "-m", "deepinfer"]


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory):
    """A random-weight V4.1 model with the DeepSeek V4 tokenizer (deepinfer make-demo-model)."""
    if not INSTALLED:
        cli = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"
        if not cli.exists():
            pytest.skip("build/tools/deepinfer not built")
    path = tmp_path_factory.mktemp("demo") / "model"
    subprocess.run(deepinfer_command() + ["make-demo-model", str(path)], check=True, capture_output=True)
    return str(path)


API_KEY = "test-key-123"
SERVED_NAME = "demo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(model: str, log_dir: pathlib.Path, *extra: str):
    """Runs `deepinfer serve MODEL` (with --api-key API_KEY and extra arguments) on a free loopback
    port; yields its base URL, stops it afterwards."""
    port = _free_port()
    cmd = deepinfer_command() + ["serve", model, "--port", str(port), "--api-key", API_KEY,
                                 "--served-model-name", SERVED_NAME, "--log-level", "warning", *extra]
    log = log_dir / "server.log"
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the server exited ({proc.returncode}): {log.read_text()}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the server did not come up within 120 s")
        time.sleep(0.25)
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def server(demo_model, tmp_path_factory):
    """`deepinfer serve` of the demo model on a free loopback port (with --api-key API_KEY)."""
    yield from serve(demo_model, tmp_path_factory.mktemp("server"))
