"""Incremental re-plan after a node loss (repair.py): proven within its gap, deterministic (issue 17)."""

from __future__ import annotations

import dataclasses

import pytest

from switchyard.planner import plan
from switchyard.planner import solver
from switchyard.planner.packing import witness
from switchyard.planner.problem import build_problem
from switchyard.planner.repair import REPAIR_GAP, large, quick_bound, repair
from switchyard.planner.stages import upper_bound
from switchyard.topology import SwitchNodes

from test_planner_bounded import bench_case
from test_planner_cases import fleet, nodes, pool, switch, topology


def without(topo, node: str):
    return dataclasses.replace(topo, switches=tuple(
        SwitchNodes(s.name, s.uplink_gbps, tuple(h for h in s.hosts if h.name != node)) for s in topo.switches))


@pytest.fixture(scope="module")
def facility():
    """gen-1000n-20s-10f-s2 (a model past EXACT_LIMIT, so a re-plan tries the repair) and its first plan."""
    case = bench_case(1000, 20, 10, 2)
    return case, plan(case.topology, case.pools, case.fleets)


def lost(case, first, kind: str) -> str:
    if kind == "cache host":
        return sorted(n for by in first.placement.caches.values() for nodes in by.values() for n in nodes)[0]
    packing = witness(case.topology, case.pools, case.fleets, first.placement)
    workers = {n: sum(c for k, c in kinds.items() if not k.startswith("cache:")) for n, kinds in packing.nodes.items()}
    return max(sorted(workers), key=lambda n: workers[n])


def full(topo, pools, fleets, current, monkeypatch):
    """The re-plan from the whole model, as before the repair existed."""
    with monkeypatch.context() as m:
        m.setattr(solver, "large", lambda problem: False)
        return plan(topo, pools, fleets, current=current)


@pytest.mark.parametrize("kind", ["worker node", "cache host"])
def test_a_repair_is_proven_within_its_gap_of_the_bound_and_of_the_full_replan(facility, kind, monkeypatch):
    case, first = facility
    topo = without(case.topology, lost(case, first, kind))
    problem = build_problem(topo, case.pools, case.fleets)
    assert large(problem)
    again = plan(topo, case.pools, case.fleets, current=first.placement)
    assert again == repair(topo, case.pools, case.fleets, "auto", first.placement, problem)    # the repair decided
    # the bound it reports holds: no less than the LP bound of the new input
    assert again.bound_gbps >= upper_bound(problem) - 1e-3
    assert again.predicted_gbps >= again.bound_gbps * (1 - REPAIR_GAP) - 1e-3
    whole = full(topo, case.pools, case.fleets, first.placement, monkeypatch)
    assert again.predicted_gbps >= whole.predicted_gbps * (1 - REPAIR_GAP) - 1e-3
    # what it keeps packs on the nodes left
    assert not witness(topo, case.pools, case.fleets, again.placement).shortfall
    assert sum(again.placement.workers[f.name].get(s, 0) for f in case.fleets for s in again.placement.workers[f.name]) \
        == sum(f.body.replicas for f in case.fleets)


def test_a_lost_cache_host_is_replaced_on_its_switch_and_few_pods_move(facility, monkeypatch):
    case, first = facility
    node = lost(case, first, "cache host")
    topo = without(case.topology, node)
    again = plan(topo, case.pools, case.fleets, current=first.placement)
    switch_of = {h.name: h.switch for h in case.topology.hosts}
    pool = next(p for p, by in first.placement.caches.items() if any(node in n for n in by.values()))
    kept = first.placement.caches[pool][switch_of[node]]
    assert len(again.placement.caches[pool][switch_of[node]]) == len(kept)
    assert node not in again.placement.caches[pool][switch_of[node]]
    # far fewer than the whole model's re-plan, which moved thousands for 0.1% more Gbps
    assert again.moves <= full(topo, case.pools, case.fleets, first.placement, monkeypatch).moves


@pytest.mark.parametrize("kind", ["worker node", "cache host"])
def test_the_same_input_and_placement_give_the_same_replan(facility, kind):
    """The repair depends on the input and the current placement only: no state kept between calls."""
    case, first = facility
    topo = without(case.topology, lost(case, first, kind))
    once = plan(topo, case.pools, case.fleets, current=first.placement)
    plan(case.topology, case.pools, case.fleets)          # anything in between changes nothing
    assert plan(topo, case.pools, case.fleets, current=first.placement) == once


def test_a_repair_that_loses_more_than_its_gap_falls_back_to_the_whole_model(monkeypatch):
    """gen-1000n-20s-10f-s1 plans 0.6% below its bound: no repair is proven, the whole model decides."""
    case = bench_case(1000, 20, 10, 1)
    first = plan(case.topology, case.pools, case.fleets)
    topo = without(case.topology, lost(case, first, "worker node"))
    again = plan(topo, case.pools, case.fleets, current=first.placement)
    assert again == full(topo, case.pools, case.fleets, first.placement, monkeypatch)


def test_the_quick_bound_holds_and_is_the_lp_bound_when_demand_binds():
    topo = topology([switch("s0", 100, nodes("cache", nic=100, nvme=2), nodes("w", count=2))])
    pools = [pool(serve=40, miss=0.1)]
    for read in (0.5, 2, 8):
        problem = build_problem(topo, pools, [fleet(replicas=12, read=read, cores=4)])
        assert quick_bound(problem) >= upper_bound(problem) - 1e-6
    # demand binds (12 workers at 0.5 Gbps, a 40 Gbps cache): the bound is exact
    problem = build_problem(topo, pools, [fleet(replicas=12, read=0.5, cores=4)])
    assert quick_bound(problem) == pytest.approx(upper_bound(problem)) == pytest.approx(6)


def test_the_operator_replans_a_node_loss_by_repair_and_says_so(facility):
    """The facility's reconcile plans through plan_with_attached with the placement its children hold."""
    from switchyard.api import AnalysisFacilitySpec
    from switchyard.desired.facility import plan_with_attached, summary

    case, first = facility
    spec = AnalysisFacilitySpec.model_validate(case.docs["spec"])
    topo = without(case.topology, lost(case, first, "worker node"))
    again, refused = plan_with_attached(topo, spec, [], first.placement)
    assert not refused
    assert summary(again)["planner"] == "milp-repair"
    direct = plan(topo, case.pools, case.fleets, current=first.placement)
    assert (again.placement, again.predicted_gbps, again.bound_gbps) == \
        (direct.placement, direct.predicted_gbps, direct.bound_gbps)


def test_a_switch_known_to_fit_evenly_does_fit_node_by_node(facility):
    """The repair's quick packing skips switches whose split spreads evenly with room to spare: each of
    those packs node by node without a shortfall, and the quick packing reports the same shortfall."""
    from switchyard.planner import packing

    case, first = facility
    problem = build_problem(case.topology, case.pools, case.fleets)
    index = {sw.name: s for s, sw in enumerate(problem.switches)}
    pools = {p.name: i for i, p in enumerate(problem.pools)}
    fleets = {f.name: j for j, f in enumerate(problem.fleets)}
    caches = {(pools[p], index[s]): nodes for p, by in first.placement.caches.items() for s, nodes in by.items()}
    workers = {(fleets[f], index[s]): n for f, by in first.placement.workers.items() for s, n in by.items() if n}
    split = packing.capacity_split(problem, workers, caches)
    quick = packing.pack(problem, caches, workers, per_class=split, quick=True)
    whole = packing.pack(problem, caches, workers, per_class=split)
    assert quick.shortfall == whole.shortfall
    skipped = [s for s in range(len(problem.switches))
               if not any(n in quick.free for nc in problem.switches[s].classes for n in nc.nodes)]
    assert skipped      # the check passes somewhere, or it saves nothing
    for s in skipped:
        free = packing._free_after_caches(problem, s, {k: v for k, v in caches.items() if k[1] == s}, {})
        wanted = {j: n for (j, ss), n in workers.items() if ss == s}
        placed = packing._spread(problem, s, free, wanted, split)
        assert packing._count(placed) == wanted


def test_a_lost_cache_host_without_a_free_node_beside_it_takes_another_pools_host_when_that_keeps_the_gbps():
    """gen-5000n-100s-20f-s2 is WAN-bound: losing a host of pool main (miss 0.05) on sw002, whose other
    NVMe node hosts pool fast (miss 0.1), staying put falls 0.3% short of the bound. The repair gives
    main that node (fast's readers there turn to its ring) and keeps the Gbps within its gap, moving
    a few dozen pods where the whole model moved thousands."""
    case = bench_case(5000, 100, 20, 2)
    first = plan(case.topology, case.pools, case.fleets)
    node = lost(case, first, "cache host")
    assert node == "sw002-nvme-0" and "sw002-nvme-3" in first.placement.caches["fast"]["sw002"]
    topo = without(case.topology, node)
    problem = build_problem(topo, case.pools, case.fleets)
    again = plan(topo, case.pools, case.fleets, current=first.placement)
    assert again == repair(topo, case.pools, case.fleets, "auto", first.placement, problem)
    assert again.placement.caches["main"]["sw002"] == ("sw002-nvme-1", "sw002-nvme-2", "sw002-nvme-3")
    assert "sw002" not in again.placement.caches["fast"]
    assert again.predicted_gbps >= quick_bound(problem) * (1 - REPAIR_GAP) - 1e-3
    assert again.moves <= 50
    assert not witness(topo, case.pools, case.fleets, again.placement).shortfall
