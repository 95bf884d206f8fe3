"""`deepinfer forward`: logits for every position, in the three step modes, and clear errors."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"
TINY_A = ROOT / "tests/data/goldens/v4/tiny-a"

pytestmark = pytest.mark.skipif(not BIN.exists(), reason="deepinfer CLI not built")


def run(*args):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def goldens():
    return load_file(str(TINY_A / "goldens.safetensors"))


@pytest.mark.parametrize(
    "mode,key",
    [([], "prefill_logits"), (["--chunk", "7"], "chunk7_logits"), (["--decode-after", "5"], "decode_logits")],
)
def test_forward_matches_goldens(tmp_path, goldens, mode, key):
    ids = goldens["s17.input_ids"]
    assert goldens["s17.decode_prefix_len"][0] == 5
    out = tmp_path / "out.safetensors"
    r = run("forward", "--model", TINY_A, "--input-ids", ",".join(map(str, ids)), *mode, "--output", out)
    assert r.returncode == 0, r.stderr
    logits = load_file(str(out))["logits"]
    assert logits.dtype == np.float32 and logits.shape == (17, 1000)
    assert np.abs(logits - goldens[f"s17.{key}"]).max() <= 1e-4


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", TINY_A, "--input-ids", "1,x,3", "--output", "o.st"], "'x' is not a token id"),
        (["--model", TINY_A, "--input-ids", "1,2000", "--output", "o.st"], "outside the vocabulary"),
        (["--model", "/nonexistent", "--input-ids", "1", "--output", "o.st"], "is not a folder"),
        (["--model", TINY_A, "--input-ids", "1,2", "--chunk", "0", "--output", "o.st"], "positive integer"),
        (["--model", TINY_A, "--input-ids", "1,2", "--chunk", "1", "--decode-after", "1", "--output", "o.st"],
         "exclude each other"),
        (["--model", TINY_A, "--output", "o.st"], "required"),
        (["--model", TINY_A, "--input-ids", "1", "--output", "o.st", "--bogus", "1"], "unknown option"),
    ],
)
def test_forward_bad_arguments(tmp_path, args, needle):
    r = subprocess.run([str(BIN), "forward", *map(str, args)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0
    assert needle in r.stderr
    assert not (tmp_path / "o.st").exists()


def test_help_lists_commands():
    r = run("--help")
    assert r.returncode == 0
    assert "forward" in r.stdout
    bad = run("no-such-command")
    assert bad.returncode == 2 and "unknown command" in bad.stderr
