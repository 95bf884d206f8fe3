#!/usr/bin/env bash
# The benchmark entry point: the prefill/decode sweep with floors, printed as tables, and the two
# figures (prefill tokens/s against prompt length; decode tokens/s per user against tokens/s per
# device across batch sizes) as PNG in bench/results/ (or --out DIR). Options: bench/sweep/sweep.py --help.
#   bench/run_sweep.sh [--model DIR] [--prefill-lengths 64,128,...] [--batch-sizes 1,2,4,...]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import deepinfer" 2>/dev/null; then
  [[ -x "${DEEPINFER_BUILD_DIR:-build}/tools/deepinfer" ]] || ./build.sh
  export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install -q matplotlib || echo "run_sweep.sh: no matplotlib: tables and sweep.json only" >&2
exec python3 bench/sweep/sweep.py "$@"
