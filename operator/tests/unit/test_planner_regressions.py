"""Planner regressions seen on a real cluster."""

from __future__ import annotations

import pathlib

import yaml

from switchyard import planner
from switchyard.api import AnalysisFacilitySpec
from switchyard.planner.model import FleetRequest, Placement, PoolRequest
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


def test_a_plan_read_back_in_part_after_a_restart_is_the_first_plan_again():
    """test_faults' operator, killed after writing its pool's plan and before its fleet's: re-planned
    with the cache hosts as the current placement and no workers, the planner chose another of the equal
    worker splits (rack-a 80, rack-b 120, none on rack-c for the first plan's 120/20/60), and the killed
    run ended unlike an undisturbed one. A first plan that moves nothing running is the plan."""
    spec = AnalysisFacilitySpec.model_validate({
        "targetGbps": 100, "routing": "local",
        "network": {"switches": [{"name": "rack-a", "uplinkGbps": 80}, {"name": "rack-b", "uplinkGbps": 80},
                                 {"name": "rack-c", "uplinkGbps": 40}]},
        "cachePools": [{"name": "xcache", "serveGbps": 45, "origin": {"host": "origin.example.org"},
                        "storage": {"dataPaths": ["/mnt/nvme0", "/mnt/nvme1"]}, "resources": {"cpu": "2", "memory": "12Gi"}}],
        "fleets": [{"name": "dask", "replicas": 200, "cores": 1, "memoryGiB": 2, "readGbps": 0.1,
                    "dask": {"schedulerAddress": "tcp://scheduler.example.org:8786"}}],
    })
    path = REPO / "e2e" / "topologies" / "mini.yaml"
    topology = snapshot(load_topology(yaml.safe_load(path.read_text()), str(path)).node_infos(), spec.network)
    pools = [PoolRequest(p.name, p) for p in spec.cache_pools]
    fleets = [FleetRequest(f.name, f) for f in spec.fleets]
    first = planner.plan(topology, pools, fleets, spec.routing)
    assert len(first.placement.workers["dask"]) == 3      # the case has equal optima to choose among
    written = first.placement
    for part in (Placement(caches=written.caches, workers={}, hashed={}),
                 Placement(caches={}, workers=written.workers, hashed=written.hashed), written):
        again = planner.plan(topology, pools, fleets, spec.routing, current=part)
        assert again.placement == first.placement
        assert again.moves == 0
