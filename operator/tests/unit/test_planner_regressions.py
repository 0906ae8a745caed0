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
