"""eval/: the scorers against scripted backends (an oracle scores 1, a wrong one 0), and run_eval.py on
the demo model in process and through the server (scores meaningless there, the pipeline real: both
ways give the same scores)."""
import importlib.util
import json
import re
import subprocess
import sys

import pytest

from conftest import API_KEY, ROOT

pytest.importorskip("jsonschema")
TASKS = ["gsm8k", "multiple_choice", "json_schema", "needle"]


def run_eval(tmp_path, *args):
    out = tmp_path / "results.json"
    r = subprocess.run([sys.executable, str(ROOT / "eval" / "run_eval.py"), *args, "--limit", "2",
                        "--max-tokens", "64", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())
    assert [row["task"] for row in rows] == TASKS
    for row in rows:
        assert 0.0 <= row["score"] <= 1.0 and row["n"] == 2
        assert f"| {row['task']:<16} |" in r.stdout
    by_task = {row["task"]: row for row in rows}
    assert by_task["json_schema"]["score"] == 1.0  # constrained decoding always validates
    return by_task


def test_eval_in_process_and_through_server_agree(tmp_path, demo_model, server):
    local = run_eval(tmp_path, "--model", demo_model)
    remote = run_eval(tmp_path, "--server", server, "--api-key", API_KEY)
    assert {t: r["score"] for t, r in local.items()} == {t: r["score"] for t, r in remote.items()}  # greedy


def test_eval_refuses_unknown_task(tmp_path, demo_model):
    r = subprocess.run([sys.executable, str(ROOT / "eval" / "run_eval.py"), "--model", demo_model, "--tasks", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown tasks" in r.stderr


def load_tasks():
    spec = importlib.util.spec_from_file_location("eval_tasks", ROOT / "eval" / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def instance(schema):
    """A valid instance of the bundled schemas' kinds (objects of enums, strings, integers, booleans, arrays)."""
    if "enum" in schema:
        return schema["enum"][0]
    return {"object": lambda: {k: instance(v) for k, v in schema["properties"].items()}, "string": lambda: "Ada",
            "integer": lambda: 36, "boolean": lambda: True, "array": lambda: []}[schema["type"]]()


class ScriptedBackend:
    """Characters as tokens; answers from the task files' gold (right=True) or wrong ones."""

    def __init__(self, right: bool, task_dir) -> None:
        self.right = right
        self.gold = {}
        for line in (task_dir / "gsm8k_tiny.jsonl").read_text().splitlines():
            r = json.loads(line)
            self.gold[r["question"]] = r["answer"].split("####")[-1].strip()
        self.mc = {}
        for line in (task_dir / "mc_tiny.jsonl").read_text().splitlines():
            r = json.loads(line)
            self.mc[r["question"]] = r["choices"][r["answer"]]

    def tokenize(self, text):
        return [ord(c) for c in text]

    def prompt_logprobs(self, ids):
        text = "".join(map(chr, ids))
        question = re.search(r"Question: (.*)\nAnswer:", text).group(1)
        good = text.endswith(" " + self.mc[question]) == self.right
        return [0.0 if good else -1.0] * (len(ids) - 1)

    def generate(self, prompts, max_tokens, so_args=None):
        outs = []
        for p in prompts:
            if so_args:  # json_schema: a valid instance, or one missing the required keys
                outs.append(json.dumps(instance(so_args["schema"]) if self.right else {}))
            elif "secret number" in p:
                secret = re.search(r"The secret number is (\d+)\.", p).group(1)
                outs.append(f" {secret}." if self.right else " 12.")
            else:
                gold = self.gold[re.search(r"Question: (.*)\nAnswer:", p).group(1)]
                outs.append(f" First 3, then 4. The answer is {gold if self.right else gold + '1'}.")
        return outs


@pytest.mark.parametrize("right", [True, False])
def test_scorers_against_scripted_backends(right):
    tasks = load_tasks()
    task_dir = ROOT / "eval" / "tasks"
    backend = ScriptedBackend(right, task_dir)
    for name, (fn, filename) in tasks.TASKS.items():
        metric, score, n = fn(backend, task_dir / filename, None, 64)
        assert n > 0 and score == (1.0 if right else 0.0), (name, metric, score)


def test_last_number():
    tasks = load_tasks()
    assert tasks.last_number("so 3 + 4 = 1,234.") == "1234"
    assert tasks.last_number("it is -7.5 degrees") == "-7.5"
    assert tasks.last_number("no digits") is None
