"""`deepinfer generate`: greedy --json output reproduces the goldens; errors exit non-zero."""
import json
import subprocess

import pytest

from engine_helpers import CLI, GOLDENS, golden

pytestmark = pytest.mark.skipif(not CLI.exists(), reason="build/tools/deepinfer not built")


def run(*args):
    return subprocess.run([str(CLI), "generate", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", ["tiny-a", "tiny-b"])
def test_greedy_json_matches_the_golden_alone_and_batched(case):
    prompt, expect = golden(case)
    ids = ",".join(map(str, prompt))
    r = run("--model", str(GOLDENS / case), "--prompt-ids", "5,6,7", "--prompt-ids", ids, "--prompt-ids", "9",
            "--temperature", "0", "--max-tokens", str(len(expect)), "--ignore-eos", "--json")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(lines) == 3
    assert lines[1]["token_ids"] == expect
    assert lines[1]["finish_reason"] == "length" and lines[1]["text"] == ""


def test_seeded_sampling_is_reproducible():
    args = ("--model", str(GOLDENS / "tiny-a"), "--prompt-ids", "1,2,3", "--temperature", "1.0", "--top-p", "0.9",
            "--top-k", "50", "--seed", "7", "--max-tokens", "12", "--json")
    a, b = run(*args), run(*args)
    assert a.returncode == 0 and a.stdout == b.stdout
    assert len(json.loads(a.stdout)["token_ids"]) <= 12


@pytest.mark.parametrize("flags", [(), ("--no-async",), ("--no-device-sampling",)])
def test_stats_line_and_ablations_give_the_same_tokens(flags):
    """--stats prints what the run cost; --no-async / --no-device-sampling change how, never what."""
    prompt, expect = golden("tiny-b")
    r = run("--model", str(GOLDENS / "tiny-b"), "--prompt-ids", ",".join(map(str, prompt)), "--prompt-ids", "4,5",
            "--temperature", "0", "--max-tokens", str(len(expect)), "--ignore-eos", "--json", "--stats", *flags)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[0])["token_ids"] == expect
    stats = json.loads(r.stderr.strip().splitlines()[-1])
    assert stats["generated_tokens"] == len(expect) * 2 and stats["steps"] >= len(expect)
    assert stats["tokens_per_second"] > 0
    drawn = 0 if "--no-device-sampling" in flags else 2 * len(expect)  # every greedy sample row
    assert stats["device_drawn_rows"] >= drawn and (drawn or stats["device_drawn_rows"] == 0)
    assert stats["device_idle_ms_per_forward"] == -1  # the CPU backend has no device clock


def test_errors():
    assert "--model is required" in run("--prompt-ids", "1").stderr
    r = run("--model", str(GOLDENS / "tiny-a"), "--prompt-ids", "1,x")
    assert r.returncode != 0 and "not a token id" in r.stderr
    r = run("--model", str(GOLDENS / "tiny-a"), "--prompt", "hello")
    assert r.returncode != 0 and "no tokenizer" in r.stderr
    r = run("--model", str(GOLDENS / "tiny-a"), "--prompt-ids", "1", "--bogus", "1")
    assert r.returncode != 0 and "unknown option" in r.stderr
    assert run("--help").returncode == 0


def test_chat_on_the_demo_model(demo_model):
    r = run("--model", demo_model, "--prompt", "Hello!", "--chat", "--max-tokens", "4", "--seed", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert 1 <= len(out["token_ids"]) <= 4 and out["finish_reason"] in ("length", "stop")
    r = run("--model", demo_model, "--prompt", "Hello!", "--max-tokens", "3", "--temperature", "0")
    assert r.returncode == 0 and r.stdout.strip()  # plain text output
