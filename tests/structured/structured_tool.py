"""Client for the grammar_tool test driver (one JSON request per line) and the V3 tokenizer."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "tests/data/tokenizer/deepseek-v3/tokenizer.json"


class GrammarTool:
    def __init__(self):
        exe = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tests/structured/grammar_tool"
        if not exe.exists():
            pytest.skip(f"{exe} not built")
        self.proc = subprocess.Popen([str(exe)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def request(self, **req):
        if not isinstance(req.get("schema", ""), str):
            req["schema"] = json.dumps(req["schema"])  # keep the key order of "properties"
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        assert "fatal" not in out, out["fatal"]
        return out

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def load_tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(TOKENIZER))


def assert_agrees_with(validator, grammar_tool, tokenizer, schema, instances, **request):
    """The grammar's verdict on each instance (compact JSON, tokenized) is the `jsonschema` validator's."""
    texts = [json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in instances]
    inputs = [tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    resp = grammar_tool.request(cmd="check", schema_type="json", schema=schema, inputs=inputs, **request)
    assert not resp.get("error"), resp["error"]
    for text, x, got in zip(texts, instances, resp["results"]):
        assert got == validator.is_valid(x), f"{text}: grammar says {got}, jsonschema says {not got}"
