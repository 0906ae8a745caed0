#!/bin/sh
# The planner benchmark: writes bench/results/planner.md, planner.json and planner.png.
# Needs the operator package's dependencies and matplotlib (pip install -e 'operator[bench]').
set -eu
cd "$(dirname "$0")/.."
exec python3 bench/planner_bench.py "$@"
