#!/usr/bin/env bash
# Regenerate the bundled demo captures in samples/ from the ground-truth lab.
# Needs root (network namespaces) and the lab tools (scripts/install-lab-deps.sh).
# Runs a handful of scenarios (about 15 s), checks the size budget (each pcap
# < 300 kB, all < 1.5 MB) and rewrites samples/index.json and samples/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"   # the lab is standard library only; any Python >= 3.10
if [ "$(id -u)" -ne 0 ]; then
  echo "make-samples: needs root (network namespaces); try: sudo $0" >&2
  exit 1
fi
# Remove namespaces of earlier runs that died, then generate (bounded in time).
timeout 60 "$PY" -m tests.lab.run --cleanup >/dev/null
exec timeout 600 "$PY" -m tests.lab.samples --out samples "$@"
