"""The switch-aware planner on small facilities whose best plan can be worked out by hand."""

from __future__ import annotations

import dataclasses

import pytest

from switchyard.planner import Unsatisfiable, baselines, plan
from switchyard.planner.baselines import spread
from switchyard.planner.packing import witness
from switchyard.api.uplinkscore import UTIL_TOLERANCE
from switchyard.planner.stay import better, staying
from switchyard.topology import SwitchNodes, Topology

from test_planner_cases import fleet, nodes, pool, switch, topology, total_workers


def cache_racks_and_a_worker_rack(uplink: float = 10) -> Topology:
    """Two racks with a 45 Gbps cache host and workers, a third with workers only."""
    with_cache = (nodes("cache", cpu=16, memory=64, nic=50, nvme=4), nodes("w", count=2))
    return topology([switch("s0", uplink, *with_cache), switch("s1", uplink, *with_cache),
                     switch("s2", uplink, nodes("w", count=2))])


def without(topo: Topology, node: str) -> Topology:
    return dataclasses.replace(topo, switches=tuple(
        SwitchNodes(s.name, s.uplink_gbps, tuple(h for h in s.hosts if h.name != node)) for s in topo.switches))


def test_workers_go_to_the_cache_racks_and_read_locally():
    topo = cache_racks_and_a_worker_rack()
    pools, fleets = [pool()], [fleet(replicas=30, read=2)]
    result = plan(topo, pools, fleets)
    assert result.predicted_gbps == pytest.approx(60)
    assert result.bound_gbps == pytest.approx(60)
    assert "s2" not in result.placement.workers["f"]          # its uplink would carry every byte
    assert result.peak == pytest.approx(0)
    assert total_workers(result, "f") == 30
    assert result.routing == {"s0": "local", "s1": "local", "s2": "local"}
    default = baselines.default_scheduler(topo, pools, fleets)
    assert default.predicted_gbps < result.predicted_gbps


def test_cache_serving_bounds_the_plan():
    topo = topology([switch("s0", 100, nodes("cache", nic=100, nvme=2), nodes("w"))])
    result = plan(topo, [pool(serve=40)], [fleet(replicas=12, read=8, cores=4)])
    assert result.predicted_gbps == pytest.approx(40)
    assert result.bound_gbps == pytest.approx(40)
    assert result.demand_gbps == pytest.approx(96)
    assert result.bottleneck == "cache serving"


def test_an_uplink_bounds_reads_from_a_remote_cache():
    # s0's only node is a cache host with no room for a worker; every byte crosses s0's uplink.
    topo = topology([switch("s0", 10, nodes("cache", cpu=6, nic=100, nvme=2)), switch("s1", 100, nodes("w", count=3))])
    result = plan(topo, [pool()], [fleet(replicas=20, cores=8, read=2)])
    assert result.predicted_gbps == pytest.approx(10)
    assert result.bound_gbps == pytest.approx(10)
    assert result.uplink("s0").out_gbps == pytest.approx(10)
    assert result.uplink("s1").in_gbps == pytest.approx(10)
    assert result.bottleneck.startswith("uplink s0")
    assert result.routing["s1"] == "hashed"
    assert result.placement.hashed["f"] == {"s1": 20}


def test_cache_fills_enter_the_cache_uplink_and_share_the_wan():
    topo = topology([switch("s0", 100, nodes("cache", nic=100, nvme=2), nodes("w"))], wan=10)
    result = plan(topo, [pool(serve=40, miss=0.5)], [fleet(replicas=10, read=4)])
    assert result.predicted_gbps == pytest.approx(20)     # half of every byte served is fetched over a 10 Gbps WAN
    assert result.bound_gbps == pytest.approx(20)
    assert result.uplink("s0").in_gbps == pytest.approx(10)
    assert result.bottleneck == "wan"


def test_each_fleet_reads_through_its_own_pool():
    topo = topology([
        switch("s0", 1, nodes("cache", nic=100, nvme=2, labels={"pool": "a"}), nodes("w")),
        switch("s1", 1, nodes("cache", nic=100, nvme=2, labels={"pool": "b"}), nodes("w")),
    ])
    pools = [pool("a", nodeSelector={"pool": "a"}), pool("b", nodeSelector={"pool": "b"})]
    fleets = [fleet("fa", replicas=8, read=1, pool="a"), fleet("fb", replicas=8, read=1, pool="b"),
              fleet("fdefault", replicas=4, read=1)]
    result = plan(topo, pools, fleets)
    assert result.placement.caches == {"a": {"s0": ("s0-cache",)}, "b": {"s1": ("s1-cache",)}}
    assert result.placement.workers["fa"] == {"s0": 8}
    assert result.placement.workers["fb"] == {"s1": 8}
    assert result.placement.workers["fdefault"] == {"s0": 4}   # no pool named: the first pool
    assert result.predicted_gbps == pytest.approx(20)


def test_caches_only_on_eligible_nvme_nodes_one_per_node_within_the_cap():
    topo = topology([switch("s0", 100, nodes("nvme", count=3, nvme=2), nodes("fast", nvme=2, labels={"disk": "fast"}),
                            nodes("plain", count=2))])
    pools = [pool("a", maxHostsPerSwitch=1), pool("b", maxHostsPerSwitch=2), pool("c", nodeSelector={"disk": "fast"})]
    result = plan(topo, pools, [fleet(replicas=4, pool="b")])
    hosts = {p: nodes_ for p, by in result.placement.caches.items() for nodes_ in by.values()}
    assert len(hosts.get("a", ())) <= 1
    assert len(hosts["b"]) == 2                               # its readers want both it may have
    assert hosts["c"] == ("s0-fast",)                          # the only node its selector matches
    every = [n for ns in hosts.values() for n in ns]
    assert len(every) == len(set(every)) == 4                  # one cache per node; every NVMe node used
    assert not any(n.startswith("s0-plain") for n in every)


@pytest.mark.parametrize("pools, fleets, reason", [
    ([pool()], [fleet()], "NoEligibleCacheNodes"),
    ([], [fleet(cores=128)], "NoNodeFitsWorker"),
    ([pool()], [fleet(pool="nope")], "UnknownPool"),
])
def test_impossible_input_is_refused_with_a_reason(pools, fleets, reason):
    topo = topology([switch("s0", 10, nodes("w", count=2))])
    with pytest.raises(Unsatisfiable) as err:
        plan(topo, pools, fleets)
    assert err.value.reason == reason


def test_workers_that_fit_nowhere_are_reported_unplaced():
    topo = topology([switch("s0", 10, nodes("cache", nvme=2, cpu=8), nodes("w", cpu=64))])
    result = plan(topo, [pool()], [fleet(replicas=20, cores=4)])
    # 64 cores; the cache pod (4 cores for xrootd, 50m for its exporter) leaves 3.95: no room for a 4-core worker.
    assert total_workers(result, "f") == 16
    assert result.unplaced == {"f": 4}


def test_among_equal_gbps_the_lowest_peak_utilisation_wins():
    # Fills load each cache rack's uplink by half what it serves: 10 Gbps and 40 Gbps uplinks
    # balance at 8 and 32 Gbps served, 40% each.
    rack = (nodes("cache", nic=50, cpu=16, memory=64, nvme=2), nodes("w", count=2))
    topo = topology([switch("s0", 10, *rack), switch("s1", 40, *rack)])
    result = plan(topo, [pool(miss=0.5)], [fleet(replicas=20, read=2)])
    assert result.predicted_gbps == pytest.approx(40)
    assert result.placement.workers["f"] == {"s0": 4, "s1": 16}
    assert result.peak == pytest.approx(0.4)


def mixing_case() -> Topology:
    """s0: a 20 Gbps cache and room for 10 workers; s1: a 20 Gbps cache and no room; 10 Gbps uplinks."""
    return topology([
        switch("s0", 10, nodes("cache", cpu=6, nic=20, nvme=2), nodes("w", cpu=80, nic=100)),
        switch("s1", 10, nodes("cache", cpu=6, nic=20, nvme=2)),
    ])


def test_auto_routing_mixes_local_and_ring_readers_on_one_switch():
    result = plan(mixing_case(), [pool(serve=20)], [fleet(replicas=10, cores=8, read=4)], routing="auto")
    # 20 Gbps from the local cache plus 10 across the uplinks from s1's: the routing-free optimum.
    assert result.predicted_gbps == pytest.approx(30)
    assert result.bound_gbps == pytest.approx(30)
    assert 0 < result.placement.hashed["f"]["s0"] < 10
    assert result.routing["s0"] == "hashed"
    assert set(result.hash_weights["xc"]) == {"s0-cache", "s1-cache"}
    assert result.hash_weights["xc"]["s0-cache"] == 0          # s0's cache serves its own switch only


def test_local_routing_keeps_readers_on_their_switch_cache():
    result = plan(mixing_case(), [pool(serve=20)], [fleet(replicas=10, cores=8, read=4)], routing="local")
    assert result.predicted_gbps == pytest.approx(20)
    assert result.bound_gbps == pytest.approx(30)             # the bound is routing-free
    assert result.placement.hashed == {}
    assert result.routing == {"s0": "local", "s1": "local"}


def test_hashed_routing_sends_every_worker_through_the_ring():
    result = plan(mixing_case(), [pool(serve=20)], [fleet(replicas=10, cores=8, read=4)], routing="hashed")
    assert result.routing == {"s0": "hashed", "s1": "hashed"}
    assert result.placement.hashed["f"] == {"s0": 10}
    assert 10 - 1e-6 <= result.predicted_gbps <= result.bound_gbps
    assert sum(result.hash_weights["xc"].values()) == pytest.approx(1)


def test_ring_weights_follow_what_each_cache_serves_remote_racks():
    topo = topology([
        switch("caches", 200, nodes("cache", count=2, nic=100, cpu=6, memory=64, nvme=8)),
        switch("r1", 80, nodes("w", count=4)), switch("r2", 80, nodes("w", count=4)),
    ])
    result = plan(topo, [pool()], [fleet(replicas=40, read=2)])
    assert result.predicted_gbps == pytest.approx(80)
    assert result.routing == {"caches": "local", "r1": "hashed", "r2": "hashed"}
    assert result.hash_weights["xc"] == pytest.approx({"caches-cache-0": 0.5, "caches-cache-1": 0.5})
    assert result.uplink("caches").out_gbps == pytest.approx(80)


def test_same_input_same_plan():
    topo = cache_racks_and_a_worker_rack()
    args = (topo, [pool(miss=0.1)], [fleet(replicas=30, read=2), fleet("g", replicas=7, cores=2, read=1)])
    assert plan(*args) == plan(*args)


def test_replanning_its_own_placement_moves_nothing():
    topo = cache_racks_and_a_worker_rack()
    args = (topo, [pool(miss=0.1)], [fleet(replicas=30, read=2), fleet("g", replicas=7, cores=2, read=1)])
    first = plan(*args)
    again = plan(*args, current=first.placement)
    assert again.moves == 0
    assert again.placement == first.placement


def test_losing_a_worker_node_moves_only_what_no_longer_fits_its_switch():
    topo = cache_racks_and_a_worker_rack()
    pools, fleets = [pool()], [fleet(replicas=30, read=2)]
    first = plan(topo, pools, fleets)
    busiest = max(("s0", "s1"), key=lambda s: first.placement.workers["f"].get(s, 0))
    before = first.placement.workers["f"][busiest]
    lost = f"{busiest}-w-0"
    on_lost = witness(topo, pools, fleets, first.placement).nodes.get(lost, {}).get("f", 0)
    again = plan(without(topo, lost), pools, fleets, current=first.placement)
    # Left on that switch: 2 workers next to the cache pod (xrootd and its exporter)
    # and 12 (NIC-bound) on the other node.
    assert again.predicted_gbps == pytest.approx(60)
    assert again.moves == max(0, before - 14)
    assert again.moves <= on_lost


def test_losing_a_cache_host_moves_only_what_the_objective_needs():
    topo = cache_racks_and_a_worker_rack()
    pools, fleets = [pool()], [fleet(replicas=30, read=2)]
    first = plan(topo, pools, fleets)
    on_s1 = first.placement.workers["f"].get("s1", 0)
    again = plan(without(topo, "s0-cache"), pools, fleets, current=first.placement)
    # One 45 Gbps cache left: at peak utilisation 0 its rack needs 23 two-Gbps readers.
    assert again.predicted_gbps == pytest.approx(45)
    assert again.placement.workers["f"]["s1"] >= 23
    # Moved: the lost cache pod, and every s0 reader: to s1, or to the ring (a new endpoint).
    assert again.moves == 1 + (30 - on_s1)


def test_every_planned_pod_has_a_node_with_room():
    topo = cache_racks_and_a_worker_rack()
    pools = [pool(miss=0.2)]
    fleets = [fleet(replicas=30, read=2), fleet("g", replicas=7, cores=2, read=1)]
    result = plan(topo, pools, fleets)
    packing = witness(topo, pools, fleets, result.placement)
    assert not packing.shortfall
    for host in topo.hosts:
        on = packing.nodes.get(host.name, {})
        cpu = sum(n * {"f": 4000, "g": 2000}.get(k, 4000) for k, n in on.items())
        assert cpu <= host.cpu_millis


def test_spread_planner_still_plans_and_is_judged_by_the_flow_model():
    topo = cache_racks_and_a_worker_rack()
    pools, fleets = [pool()], [fleet(replicas=30, read=2)]
    assert spread.plan(topo, pools, fleets).planner == "spread"
    judged = baselines.spread_baseline(topo, pools, fleets)
    assert judged.predicted_gbps <= judged.bound_gbps + 1e-6
    assert judged.predicted_gbps < plan(topo, pools, fleets).predicted_gbps


def test_objective_order_with_tolerances_decides_between_a_replan_and_staying():
    topo = cache_racks_and_a_worker_rack()
    p = plan(topo, [pool()], [fleet(replicas=30, read=2)])
    stay = dataclasses.replace(p, predicted_gbps=100.0, moves=1)
    # Gbps equal within GBPS_TOLERANCE, same peak: fewer moves wins
    assert better(stay, dataclasses.replace(p, predicted_gbps=100.05, moves=9))
    # more Gbps beyond the tolerance wins whatever it moves
    assert better(dataclasses.replace(p, predicted_gbps=100.5, moves=90), stay)
    # at equal Gbps, a peak lower by more than UTIL_TOLERANCE wins
    calmer = tuple(dataclasses.replace(u, in_gbps=u.in_gbps / 2, out_gbps=u.out_gbps / 2) for u in p.uplinks)
    if p.peak > 2 * UTIL_TOLERANCE:
        assert better(dataclasses.replace(p, predicted_gbps=100.0, moves=40, uplinks=calmer), stay)


def test_a_replan_moves_more_than_staying_only_when_it_is_better():
    topo = cache_racks_and_a_worker_rack()
    pools, fleets = [pool()], [fleet(replicas=30, read=2), fleet("g", replicas=7, cores=2, read=1)]
    first = plan(topo, pools, fleets)
    for lost in sorted(h.name for h in topo.hosts):
        reduced = without(topo, lost)
        again = plan(reduced, pools, fleets, current=first.placement)
        stay = staying(reduced, pools, fleets, first.placement)
        assert stay is not None
        assert again.moves <= stay.moves or better(again, stay), lost
        assert not better(stay, again), lost


def a_large_facility(cpu: int = 64):
    """Enough (fleet, switch) integers for the large-model path (stages.EXACT_LIMIT)."""
    switches = [switch(f"s{i:02d}", (40, 80, 100)[i % 3], nodes("w", count=6, cpu=cpu, nic=25),
                       *([nodes("c", count=2, cpu=32, nic=100, nvme=2)] if i % 2 == 0 else []))
                for i in range(20)]
    fleets = [fleet(f"f{j}", replicas=60 + 10 * j, cores=(1, 2, 4, 8)[j % 4], memory=2 * (1, 2, 4, 8)[j % 4],
                    read=(0.2, 0.5, 1.0, 1.5)[j % 4]) for j in range(9)]
    return topology(switches), [pool(maxHostsPerSwitch=2)], fleets


def test_large_models_replan_their_own_plan_stably_and_a_loss_only_for_gain():
    from switchyard.planner.formulation import formulate
    from switchyard.planner.problem import build_problem
    from switchyard.planner.stages import EXACT_LIMIT

    topo, pools, fleets = a_large_facility()
    assert len(formulate(build_problem(topo, pools, fleets), "auto").integers()) > EXACT_LIMIT
    first = plan(topo, pools, fleets)
    assert first.predicted_gbps >= 0.99 * first.bound_gbps
    again = plan(topo, pools, fleets, current=first.placement)
    # The large-model path's first plan can be bettered: a re-plan moves only for
    # a gain, and the plan it gives then holds.
    if again.moves:
        assert better(again, staying(topo, pools, fleets, first.placement))
    assert plan(topo, pools, fleets, current=again.placement).moves == 0
    for lost in ("s03-w-0", "s04-c-0"):
        reduced = without(topo, lost)
        assert len(reduced.hosts) == len(topo.hosts) - 1
        after = plan(reduced, pools, fleets, current=first.placement)
        stay = staying(reduced, pools, fleets, first.placement)
        assert stay is not None
        assert after.moves <= stay.moves or better(after, stay), lost


def test_slot_rows_left_out_of_a_large_model_are_implied_by_what_stays():
    """formulation.PRUNE_LIMIT: every fleet slot row a large model leaves out holds at every point
    of the model without it (its left side maximised over the LP relaxation stays within its bound),
    so the bound and every stage see the same feasible set."""
    from switchyard.planner import formulation
    from switchyard.planner.problem import build_problem

    # the rule: 30 cores a node hold 3 8-core workers (the CPU row allows 3.75), 15 2-core ones (as
    # the CPU row); a cache pod taking 3 slots must take at least 3 workers' CPU in the CPU row too
    assert not formulation._implies(8000, 30000, {}, 3, {})
    assert formulation._implies(2000, 30000, {}, 15, {})
    assert formulation._implies(2000, 30000, {0: 6000}, 15, {0: 3})
    assert not formulation._implies(2000, 30000, {0: 4000}, 15, {0: 3})
    topo, pools, fleets = a_large_facility(cpu=30)
    problem = build_problem(topo, pools, fleets)
    full = formulation.formulate(problem, "auto")
    limit, formulation.PRUNE_LIMIT = formulation.PRUNE_LIMIT, 0
    try:
        pruned = formulation.formulate(problem, "auto")
    finally:
        formulation.PRUNE_LIMIT = limit

    def rows(m):
        ends = m._row_start[1:] + [len(m._cols)]
        return [(tuple(m._cols[a:b]), tuple(m._vals[a:b]), lo, hi)
                for a, b, lo, hi in zip(m._row_start, ends, m.row_lb, m.row_ub)]

    kept = set(rows(pruned.model))
    left_out = [r for r in rows(full.model) if r not in kept]
    assert pruned.model.size == full.model.size
    assert len(kept) + len(left_out) == len(full.model.row_lb) and left_out and len(kept) < len(rows(full.model))
    for cols, vals, _, bound in left_out:
        most = pruned.model.solve(dict(zip(cols, vals)), maximise=True, relax=True).objective
        assert most <= bound + 1e-6 * max(1.0, bound), (cols, vals, bound, most)
    # the plan on the pruned model still delivers what the full model's bound allows
    limit, formulation.PRUNE_LIMIT = formulation.PRUNE_LIMIT, 0
    try:
        result = plan(topo, pools, fleets)
    finally:
        formulation.PRUNE_LIMIT = limit
    assert result.predicted_gbps >= 0.99 * result.bound_gbps
