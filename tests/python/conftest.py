# Puts python/ (where ./build.sh writes the extension next to the package) on sys.path.
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
