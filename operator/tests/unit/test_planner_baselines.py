"""The baselines: what they place, that they are reproducible, and that one flow model judges all."""

from __future__ import annotations

import pytest

from switchyard.planner import baselines, plan
from switchyard.planner.packing import witness

from test_planner_cases import fleet, nodes, pool, switch, topology, total_workers


def racks():
    """Caches on two of four racks; every rack has identical worker nodes; 10 Gbps uplinks."""
    cache = nodes("cache", cpu=6, nic=100, nvme=4)
    return topology([switch("r0", 10, cache, nodes("w", count=3)), switch("r1", 10, cache, nodes("w", count=3)),
                     switch("r2", 10, nodes("w", count=3)), switch("r3", 10, nodes("w", count=1))])


POOLS = [pool()]
FLEETS = [fleet(replicas=40, cores=8, read=2)]


def test_default_scheduler_spreads_by_count_and_hashes_over_all_caches():
    result = baselines.default_scheduler(racks(), POOLS, FLEETS)
    # least-allocated scoring on identical nodes: 40 workers over 10 nodes, 4 each
    assert result.placement.workers["f"] == {"r0": 12, "r1": 12, "r2": 12, "r3": 4}
    assert result.placement.hashed == result.placement.workers
    assert result.placement.caches == {"xc": {"r0": ("r0-cache",), "r1": ("r1-cache",)}}
    assert result.routing == {s: "hashed" for s in ("r0", "r1", "r2", "r3")}


def test_every_baseline_is_judged_by_the_same_flow_model_against_the_same_bound():
    topo = racks()
    ours = plan(topo, POOLS, FLEETS)
    for other in (baselines.default_scheduler(topo, POOLS, FLEETS), baselines.random_placement(topo, POOLS, FLEETS),
                  baselines.spread_baseline(topo, POOLS, FLEETS)):
        assert other.bound_gbps == ours.bound_gbps
        assert other.predicted_gbps <= ours.bound_gbps + 1e-6
        assert other.predicted_gbps < ours.predicted_gbps
        for load in other.uplinks:
            assert max(load.in_gbps, load.out_gbps) <= load.capacity_gbps + 1e-3


def test_random_placement_is_reproducible_by_seed_and_fits_the_nodes():
    topo = racks()
    first = baselines.random_placement(topo, POOLS, FLEETS, seed=7)
    assert baselines.random_placement(topo, POOLS, FLEETS, seed=7) == first
    others = {str(baselines.random_placement(topo, POOLS, FLEETS, seed=s).placement.workers) for s in range(5)}
    assert len(others) > 1
    assert total_workers(first, "f") == 40
    assert not witness(topo, POOLS, FLEETS, first.placement).shortfall


def test_random_placement_uses_local_caches_where_a_rack_has_them():
    result = baselines.random_placement(racks(), POOLS, FLEETS, seed=1)
    for rack, count in result.placement.workers["f"].items():
        ring = result.placement.hashed.get("f", {}).get(rack, 0)
        assert ring == (0 if rack in ("r0", "r1") else count)


@pytest.mark.parametrize("make", [baselines.default_scheduler, baselines.random_placement])
def test_baselines_leave_pending_what_no_node_holds(make):
    topo = topology([switch("r0", 10, nodes("cache", cpu=6, nvme=2), nodes("w", cpu=16))])
    result = make(topo, POOLS, [fleet(replicas=10, cores=4)])
    assert total_workers(result, "f") == 4
    assert result.unplaced == {"f": 6}
