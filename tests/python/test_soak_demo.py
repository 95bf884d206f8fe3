"""The hostile-traffic soak (scripts/soak.py) in its CI size: 200 requests from 4 threads on the demo
model, with a state budget tight enough to preempt. The script checks every good request against its
solo run, every malformed one's error, aborts, and that state blocks and memory return (docs/reliability.md).
Prefix caching is off here: with it on, about one run in four stops on "state memory exhausted" (the
pool holds more blocks than the state manager accounts for under concurrent aborts / preemption; an open
bug, docs/prefix_caching.md), and CI must not be flaky; scripts/soak.py reproduces it with the default."""
import json
import subprocess
import sys

from engine_helpers import ROOT


def test_soak_200_requests_on_the_demo_model(demo_model, tmp_path):
    report = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "--model", demo_model, "--requests", "200",
                          "--templates", "24", "--num-state-blocks", "80", "--prefix-caching", "0", "--report", str(report)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    r = json.loads(report.read_text())
    assert r["mismatched"] == 0 and r["failures"] == 0 and r["state_blocks_end"] <= r["prefix_cached_blocks"]
    assert r["good"] > 100 and r["refused"] > 20 and r["aborted"] > 5
