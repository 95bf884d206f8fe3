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


def test_report_shapes_dspark_cost_table(capsys):
    """The verification / draft table of bench_v41_shapes' rows: tau tokens per (verify(block + 1) + draft)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("report_shapes", ROOT / "bench" / "sweep" / "report_shapes.py")
    rs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rs)
    rows = [{"decode_batch": 2, "step_seconds": 0.05},
            {"verify_batch": 2, "tokens_per_seq": 1, "step_seconds": 0.05},
            {"verify_batch": 2, "tokens_per_seq": 5, "step_seconds": 0.15},
            {"draft_batch": 2, "block": 4, "seconds": 0.05}]
    rs.verify_table(rows)
    out = capsys.readouterr().out
    assert "| 2 | 50.00 | 150.00 | 50.00 |" in out  # verify 1 / 5 tokens, draft, in ms
    # plain 1 / 0.05 = 20 tokens/s per user; tau 1..5 over 0.15 + 0.05 s: 5, 10, 15, 17.5, 20, 25
    assert "| 2 | 20.0 | 5.0 | 10.0 | 15.0 | 17.5 | 20.0 | 25.0 |" in out
    rs.verify_table([{"decode_batch": 1, "step_seconds": 0.1}])  # no verify rows: no table
    assert capsys.readouterr().out == ""
