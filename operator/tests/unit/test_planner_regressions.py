"""Planner regressions seen on a real cluster."""

from __future__ import annotations

import pathlib

import yaml

from switchyard import planner
from switchyard.api import AnalysisFacilitySpec
from switchyard.planner.model import Placement, PoolRequest
from switchyard.topology import load_topology, snapshot

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_a_pool_without_fleets_gets_its_hosts_even_from_an_empty_current_placement():
    """The operator passes the current (empty) placement on a facility's first reconcile; with
    no readers every plan delivers 0 Gbps, and staying put (no caches) must not win the tie."""
    spec = AnalysisFacilitySpec.model_validate({
        "targetGbps": 100, "routing": "local",
        "network": {"switches": [{"name": n, "uplinkGbps": 80} for n in ("rack-a", "rack-b", "rack-c")]},
        "cachePools": [{"name": "xcache", "serveGbps": 45, "origin": {"host": "origin.example.org"},
                        "storage": {"dataPaths": ["/mnt/nvme0"]}}],
    })
    path = REPO / "e2e" / "topologies" / "mini.yaml"
    topology = snapshot(load_topology(yaml.safe_load(path.read_text()), str(path)).node_infos(), spec.network)
    pools = [PoolRequest(p.name, p) for p in spec.cache_pools]
    fresh = planner.plan(topology, pools, [], spec.routing)
    from_empty = planner.plan(topology, pools, [], spec.routing, current=Placement(caches={}, workers={}, hashed={}))
    assert sum(len(n) for by in fresh.placement.caches.values() for n in by.values()) == 6
    assert from_empty.placement.caches == fresh.placement.caches


def test_a_replan_whose_packing_cut_leaves_no_feasible_point_still_plans():
    """bench-planner's gen-500n-10s-5f-s1 losing its first cache host: the second packing
    round (its cut plus what the re-plan keeps) was infeasible and the planner raised."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("planner_bench", REPO / "bench" / "planner_bench.py")
    bench = sys.modules.setdefault("planner_bench", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(bench)
    case = bench.generated_case(500, 10, 5, 1)
    first = planner.plan(case.topology, case.pools, case.fleets)
    again = planner.plan(bench.without(case.topology, "sw002-nvme-0"), case.pools, case.fleets, current=first.placement)
    for fleet in case.fleets:
        placed = sum(again.placement.workers.get(fleet.name, {}).values())
        assert placed + again.unplaced.get(fleet.name, 0) == fleet.body.replicas
