"""`deepinfer generate --json-schema FILE | --regex R | --grammar FILE`: constrained output, clear errors."""
import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"

pytestmark = pytest.mark.skipif(not BIN.exists(), reason="deepinfer CLI not built")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "model"
    subprocess.run([str(BIN), "make-demo-model", str(path)], check=True, capture_output=True)
    return path


def generate(model, *args):
    r = subprocess.run([str(BIN), "generate", "--model", str(model), "--prompt", "hello", "--json", *args],
                       capture_output=True, text=True, timeout=120)
    return r


@pytest.mark.parametrize("seed", ["1", "2", "3"])
def test_regex(model, seed):
    r = generate(model, "--regex", "[0-9]{3}-[a-z]{2}", "--max-tokens", "20", "--temperature", "1", "--seed", seed)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["finish_reason"] == "stop"
    assert re.fullmatch("[0-9]{3}-[a-z]{2}", out["text"])


@pytest.mark.parametrize("seed", ["1", "2"])
def test_json_schema(model, tmp_path, seed):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
              "required": ["color", "ok"], "additionalProperties": False}
    f = tmp_path / "schema.json"
    f.write_text(json.dumps(schema))
    r = generate(model, "--json-schema", str(f), "--max-tokens", "40", "--temperature", "1", "--seed", seed)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["finish_reason"] == "stop"
    jsonschema.validate(json.loads(out["text"]), schema)


def test_grammar(model, tmp_path):
    f = tmp_path / "g.ebnf"
    f.write_text('root ::= "yes" | "no" | "maybe"\n')
    r = generate(model, "--grammar", str(f), "--max-tokens", "10")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["text"] in ("yes", "no", "maybe")


def test_errors(model, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases = [
        (["--regex", "a", "--regex", "b"], "only one of"),
        (["--json-schema", str(tmp_path / "missing.json")], "cannot read"),
        (["--json-schema", str(bad)], "not valid JSON"),
        (["--regex", "a(b"], "regex"),
    ]
    for args, needle in cases:
        r = generate(model, *args)
        assert r.returncode != 0, args
        assert needle in r.stderr, (args, r.stderr)
