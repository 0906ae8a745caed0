#!/usr/bin/env bash
# make bench-fleet: switchyard's fleet start-up (2,500 workers by default) against a
# plain Deployment and the dask-kubernetes operator on a 500-node simulated cluster.
# Writes bench/results/fleet.md and bench/results/fleet.json (--out to change).
# Extra arguments (make bench-fleet FLEET_ARGS=...) go to bench/fleet_bench.py, e.g.
# --workers 10000 --fleets 3 --name sy-fleet10k, or --workers 1000 --repeats 1.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
# the dask-kubernetes operator is the comparison; it lives in the `bench` extra
"$PY" -c 'import dask_kubernetes' 2>/dev/null || "$PY" -m pip install -q 'dask-kubernetes>=2026.3.0'
exec "$PY" bench/fleet_bench.py "$@"
