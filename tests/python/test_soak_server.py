"""The OpenAI server soak (scripts/soak_server.py) in its CI size: 120 HTTP requests from 6 client threads into
`deepinfer serve` on the demo model, batch-invariant, under a state budget that preempts. The script checks
every good answer against the quiet server's, every malformed request's status and error, clients that leave
mid-stream or before the answer (aborted by the server), and that /metrics shows no request, live state or
reserved state memory afterwards (docs/reliability.md)."""
import importlib.util
import json
import os
import subprocess
import sys

from engine_helpers import ROOT


def test_soak_120_http_requests_on_the_demo_model(demo_model, tmp_path):
    report = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak_server.py"), "--model", demo_model,
                          "--requests", "120", "--templates", "16", "--threads", "6", "--num-state-blocks", "80",
                          "--report", str(report)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    r = json.loads(report.read_text())
    assert r["failures"] == 0 and r["mismatched"] == 0
    assert r["good"] > 50 and r["bad"] > 10 and r["leave"] > 0
    assert r["state_budget_bytes"] > 0  # --num-state-blocks reached the engine


def test_the_server_runs_the_package_under_test(monkeypatch):
    """With DEEPINFER_TEST_INSTALLED the server imports the installed package (scripts/sanitize.sh's sanitized
    one, test.sh's venv), not the source tree's, which shadowed it: under sanitize.sh the soak's server died
    at import (the source tree has no extension there) and the soak failed before its first request."""
    spec = importlib.util.spec_from_file_location("soak_server", ROOT / "scripts" / "soak_server.py")
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    monkeypatch.setenv("PYTHONPATH", "/installed")
    monkeypatch.setenv("DEEPINFER_TEST_INSTALLED", "1")
    assert soak.package_env(X="1")["PYTHONPATH"] == "/installed" and soak.package_env(X="1")["X"] == "1"
    monkeypatch.delenv("DEEPINFER_TEST_INSTALLED")
    assert soak.package_env()["PYTHONPATH"] == os.pathsep.join([str(ROOT / "python"), "/installed"])
