"""The README's environment table lists every registered DEEPINFER_* variable (src/core/env.cpp) with its
default, so the table a user reads cannot drift from what the engine accepts."""
import re
from pathlib import Path

import deepinfer

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_env_var_has_a_readme_row_with_its_default():
    rows = {}
    for line in README.read_text().splitlines():
        m = re.match(r"\| `(DEEPINFER_[A-Z0-9_]+)` \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    missing = [name for name, _, _ in deepinfer.env_vars() if name not in rows]
    assert not missing, f"README env table lacks {missing}"
    for name, default, _ in deepinfer.env_vars():
        assert rows[name] == (default or "—"), f"{name}: README default {rows[name]!r}, registered {default!r}"
