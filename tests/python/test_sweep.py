"""bench/run_sweep.sh end to end on the demo model, tiny: both tables and both figures."""
import json
import subprocess

import pytest

from conftest import ROOT

pytest.importorskip("matplotlib")


def test_run_sweep(tmp_path, demo_model):
    r = subprocess.run([str(ROOT / "bench" / "run_sweep.sh"), "--model", demo_model, "--prefill-lengths", "8,32",
                        "--batch-sizes", "1,2", "--decode-steps", "2", "--reps", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "| prefill tokens | measured s | floor s |" in r.stdout and "| decode batch | tokens/s |" in r.stdout
    result = json.loads((tmp_path / "sweep.json").read_text())
    assert [row["prompt_tokens"] for row in result["prefill"]] == [8, 32]
    assert [row["batch"] for row in result["decode"]] == [1, 2]
    for row in result["prefill"] + result["decode"]:
        assert row["tokens_per_s"] > 0 and row["floor_tokens_per_s"] > 0
    for name in ("sweep_prefill_cpu.png", "sweep_decode_cpu.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
