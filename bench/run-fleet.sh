#!/usr/bin/env bash
# make bench-fleet: switchyard's 2,500-worker fleet start-up against a plain
# Deployment and the dask-kubernetes operator on a 500-node simulated cluster.
# Writes bench/results/fleet.md and bench/results/fleet.json. Extra arguments go
# to bench/fleet_bench.py (e.g. --workers 1000 --dask-workers 1000 --repeats 1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
# the dask-kubernetes operator is the comparison; it lives in the `bench` extra
"$PY" -c 'import dask_kubernetes' 2>/dev/null || "$PY" -m pip install -q 'dask-kubernetes>=2026.3.0'
exec "$PY" bench/fleet_bench.py "$@"
