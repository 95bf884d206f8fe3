"""The hostile-traffic soak (scripts/soak.py) in its CI size: 200 requests from 4 threads on the demo
model. The script checks every good request against its solo run, every malformed one's error, aborts,
and that state blocks and memory return (docs/reliability.md). Prefix caching is on (the default): with a
budget tight enough to preempt, snapshots are taken and evicted between preemptions and aborts (the pool
bug this found is in docs/prefix_caching.md, "Released states and snapshots"); with a roomier one, the
requests behind the shared prefix hit the cache under the same concurrent traffic. How many preempt depends on
the threads' timing: at 80 blocks one CI run saw 0 and the dev box 2 (72: 2, 64: 8, 56: 11, 2026-12-03), so the
tight budget is 64 (there 1 snapshot and 1 eviction)."""
import json
import subprocess
import sys

import pytest

from engine_helpers import ROOT


@pytest.mark.parametrize("blocks", [64, 160])
def test_soak_200_requests_on_the_demo_model(demo_model, tmp_path, blocks):
    report = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "--model", demo_model, "--requests", "200",
                          "--templates", "24", "--num-state-blocks", str(blocks), "--report", str(report)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    r = json.loads(report.read_text())
    assert r["mismatched"] == 0 and r["failures"] == 0 and r["state_blocks_end"] <= r["prefix_cached_blocks"]
    assert r["good"] > 100 and r["refused"] > 20 and r["aborted"] > 5
    if blocks == 64:
        assert r["preemptions"] > 0
    else:
        assert r["prefix_hits"] > 0
