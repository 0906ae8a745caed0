"""The placement model counts only what nodes hold, and every solve is bounded (issue 17)."""

from __future__ import annotations

import pytest

from switchyard.planner import plan
from switchyard.planner.formulation import formulate, granule
from switchyard.planner.packing import witness
from switchyard.planner.problem import build_problem

from test_planner_cases import fleet, nodes, pool, switch, topology


def cache_nodes_only(count: int = 4):
    """One switch of 32-core NVMe nodes, each to carry an 8-core cache pod (8.05 cores with its exporter)."""
    return topology([switch("s0", 400, nodes("nvme", count=count, cpu=32, memory=256, nic=100, nvme=2))])


def most(fm, terms: dict[int, float]) -> float:
    return fm.model.solve(terms, maximise=True, relax=True).objective


def test_granule_of_sizes():
    assert granule([8000, 4000]) == 4000
    assert granule([0.46, 0.2]) == pytest.approx(0.02)
    assert granule([8000, 0]) == 0.0


@pytest.mark.parametrize("fleets, most_cores", [
    # 8-core workers: two per node beside the cache pod (23.95 cores left), so 8 on 4 nodes, never 11
    ([fleet("big", replicas=40, cores=8, memory=8)], 64),
    # with 4-core workers too: 20 of the 23.95 cores per node hold workers, 80 in all (not 95.8)
    ([fleet("big", replicas=40, cores=8, memory=8), fleet("small", replicas=40, cores=4, memory=4)], 80),
])
def test_the_model_counts_only_what_a_node_holds_beside_a_cache(fleets, most_cores):
    topo = cache_nodes_only()
    problem = build_problem(topo, [pool(resources={"cpu": "8", "memory": "16Gi"}, maxHostsPerSwitch=4)], fleets)
    fm = formulate(problem, "auto")
    for v in fm.caches.values():            # a cache pod on every node
        fm.model.lb[v] = fm.model.ub[v]
    for j, v in fm.unplaced.items():        # more workers than fit: the rest may stay Pending
        fm.model.ub[v] = problem.fleets[j].replicas
    cores = {}
    for (j, _), v in list(fm.local.items()) + list(fm.ring.items()):
        cores[v] = problem.fleets[j].cpu_millis / 1000
    # the LP relaxation, not only the integers: the rows themselves say it
    assert most(fm, cores) == pytest.approx(most_cores)


def test_a_mix_that_fills_cache_nodes_packs_without_a_shortfall():
    """Mixed worker sizes on nodes with cache pods: the plan's counts pack node by node."""
    topo = topology([switch("s0", 400, nodes("nvme", count=4, cpu=32, memory=256, nic=100, nvme=2),
                            nodes("w", count=2, cpu=64, memory=256, nic=100))])
    fleets = [fleet("big", replicas=20, cores=8, memory=8, read=2), fleet("small", replicas=12, cores=4, memory=4, read=1)]
    pools = [pool(serve=100, resources={"cpu": "8", "memory": "16Gi"}, maxHostsPerSwitch=4)]
    result = plan(topo, pools, fleets)
    assert not witness(topo, pools, fleets, result.placement).shortfall
    assert sum(result.placement.workers["big"].values()) + result.unplaced.get("big", 0) == 20
