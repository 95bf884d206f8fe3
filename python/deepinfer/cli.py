"""The `deepinfer` command: Python subcommands (serve) here, the others in the C++ binary.

`pip install .` puts the binary inside the package (deepinfer/_bin/deepinfer); in a source tree
after ./build.sh it is build/tools/deepinfer (DEEPINFER_BUILD_DIR), after `pip install -e .` alone
build/<wheel tag>/tools/deepinfer (pyproject.toml's build-dir). `python -m deepinfer` is the same.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Optional, Sequence

PYTHON_COMMANDS = {
    "serve": "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /metrics)",
}


def native_binary() -> Optional[pathlib.Path]:
    """The C++ `deepinfer` binary: the installed one, else the source tree's build."""
    here = pathlib.Path(__file__).resolve().parent
    candidates = [here / "_bin" / "deepinfer"]
    if os.environ.get("DEEPINFER_CLI"):
        candidates.insert(0, pathlib.Path(os.environ["DEEPINFER_CLI"]))
    root = here.parents[1]
    candidates.append(root / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer")
    candidates += sorted(root.glob("build/*/tools/deepinfer"), key=lambda p: p.stat().st_mtime, reverse=True)
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def _run_native(args: Sequence[str]) -> int:
    binary = native_binary()
    if binary is None:
        print("deepinfer: the C++ command-line tool is missing: run ./build.sh or pip install .", file=sys.stderr)
        return 2
    return subprocess.call([str(binary), *args])


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "serve":
        from .server.cli import main as serve_main
        return serve_main(args[1:])
    rc = _run_native(args)
    if not args or args[0] in ("--help", "-h", "help"):
        print("python commands:")
        for name, summary in PYTHON_COMMANDS.items():
            print(f"  {name:<16} {summary}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
