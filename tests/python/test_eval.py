"""eval/run_eval.py on the demo model: every task, in process and through the server (scores
meaningless, the pipeline real)."""
import json
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


def test_eval_in_process(tmp_path, demo_model):
    run_eval(tmp_path, "--model", demo_model)


def test_eval_through_server(tmp_path, server):
    run_eval(tmp_path, "--server", server, "--api-key", API_KEY)


def test_eval_refuses_unknown_task(tmp_path, demo_model):
    r = subprocess.run([sys.executable, str(ROOT / "eval" / "run_eval.py"), "--model", demo_model, "--tasks", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown tasks" in r.stderr
