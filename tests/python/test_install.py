"""The `deepinfer` package and command as a user gets them: from any folder, after `pip install .`
(test.sh sets DEEPINFER_TEST_INSTALLED=1) or `pip install -e .` (=editable, test.sh's Python 3.12 run),
or from the source tree after ./build.sh."""
import os
import pathlib
import subprocess
import sys

import sysconfig

from conftest import EDITABLE, INSTALLED, ROOT, deepinfer_command


def run(cmd, cwd, **kw):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, **kw)


def test_import_from_any_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} if INSTALLED else None
    r = run([sys.executable, "-c", "import deepinfer, deepinfer.server; print(deepinfer.__file__); "
             "print(deepinfer._core.__file__); print(deepinfer.LLM.__name__, deepinfer.SamplingParams().max_tokens)"],
            tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    where, core = (pathlib.Path(line).resolve() for line in r.stdout.splitlines()[:2])
    assert core.name.endswith(sysconfig.get_config_var("EXT_SUFFIX"))  # built for this interpreter
    if EDITABLE:  # the sources, with the extension built beside them
        assert where == ROOT / "python" / "deepinfer" / "__init__.py" and core.parent == where.parent, (where, core)
    elif INSTALLED:  # the installed copy, not the source tree
        assert ROOT / "python" not in where.parents, where
        assert (where.parent / "_bin" / "deepinfer").is_file()
    assert r.stdout.splitlines()[2] == "LLM 16"


def test_command_lists_native_and_python_commands(tmp_path):
    r = run(deepinfer_command() + ["--help"], tmp_path)
    assert r.returncode == 0, r.stderr
    for name in ("generate", "make-demo-model", "tokenize", "serve"):
        assert f"  {name} " in r.stdout, r.stdout
    r = run(deepinfer_command() + ["serve", "--help"], tmp_path)
    assert r.returncode == 0 and "--api-key" in r.stdout
    r = run(deepinfer_command() + ["no-such-command"], tmp_path)
    assert r.returncode == 2 and "unknown command" in r.stderr


def test_generate_through_the_command(tmp_path, demo_model):
    r = run(deepinfer_command() + ["generate", "--model", demo_model, "--prompt", "Hello", "--max-tokens", "3"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_serve_refuses_a_missing_model(tmp_path):
    r = run(deepinfer_command() + ["serve", str(tmp_path / "nothing-here"), "--port", "1"], tmp_path,
            env={**os.environ, "DEEPINFER_HF_ENDPOINT": "http://127.0.0.1:9"})
    assert r.returncode != 0 and "error" in r.stderr.lower()
