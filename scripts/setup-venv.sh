#!/usr/bin/env bash
# Create .venv and install tailscope into it (builds the Rust core in release mode; the cargo
# target/ directory is reused between runs, so a rebuild only compiles what changed).
# Usage: scripts/setup-venv.sh [EXTRAS]   e.g. scripts/setup-venv.sh test
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-}
python=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
spec="."
[[ -n "$extras" ]] && spec=".[$extras]"
.venv/bin/python -m pip install -q "$spec"
