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


def bench_case(nodes: int, switches: int, fleets: int, seed: int):
    import importlib.util
    import pathlib
    import sys

    path = pathlib.Path(__file__).resolve().parents[3] / "bench" / "planner_bench.py"
    spec = importlib.util.spec_from_file_location("planner_bench", path)
    bench = sys.modules.setdefault("planner_bench", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(bench)
    return bench.generated_case(nodes, switches, fleets, seed)


def test_a_small_model_searched_to_the_end_is_proven_optimal():
    topo = topology([switch("s0", 100, nodes("cache", nic=100, nvme=2), nodes("w"))])
    result = plan(topo, [pool(serve=40)], [fleet(replicas=12, read=8, cores=4)])
    assert result.optimal and result.gap == 0.0


def test_a_large_model_cut_at_its_limit_reports_its_proven_gap():
    """gen-1000n-20s-10f-s1: the boxed search is a heuristic, and no placement is known to meet the bound."""
    case = bench_case(1000, 20, 10, 1)
    result = plan(case.topology, case.pools, case.fleets)
    assert not result.optimal
    assert result.gap == pytest.approx(1 - result.predicted_gbps / result.bound_gbps, abs=1e-6)
    assert 0 < result.gap <= 0.01


def test_the_facility_status_carries_the_gap_and_whether_the_plan_is_proven():
    from switchyard.api.analysisfacility import PlanSummary
    from switchyard.desired.facility import summary

    case = bench_case(1000, 20, 10, 1)
    result = plan(case.topology, case.pools, case.fleets)
    written = PlanSummary.model_validate(summary(result))
    assert written.optimal is False and written.gap == pytest.approx(result.gap) and written.gap > 0


def test_an_empty_current_placement_is_a_first_plan():
    """A facility's first reconcile passes the (empty) placement its children hold: nothing to keep,
    so the same plan as without one, not a re-plan's exact packing and weighing against staying."""
    from switchyard.planner.model import Placement

    case = bench_case(1000, 20, 10, 2)
    fresh = plan(case.topology, case.pools, case.fleets)
    empty = plan(case.topology, case.pools, case.fleets,
                 current=Placement(caches={}, workers={f.name: {} for f in case.fleets}, hashed={}))
    assert empty == fresh


def test_the_node_budget_shrinks_with_the_model_and_never_vanishes():
    from switchyard.planner.lp import MIN_NODES, NODE_LIMIT, node_budget

    sizes = [100, 1_000, 10_000, 50_000, 10**7]
    budgets = [node_budget(s) for s in sizes]
    assert budgets[0] == NODE_LIMIT and budgets[-1] == MIN_NODES
    assert budgets == sorted(budgets, reverse=True)


def test_a_milp_cut_at_its_node_budget_returns_its_incumbent_not_proven():
    """A packing MILP too large to finish in 3 nodes: the best point found is kept, marked not optimal."""
    from switchyard.planner.lp import LinearModel

    m = LinearModel()
    xs = [m.var(0, 1, integer=True) for _ in range(30)]
    weights = [(7 * i) % 11 + 3 for i in range(30)]
    for k in range(5):
        m.row([(x, w + k) for x, w in zip(xs, weights)], ub=40 + k)
    found = m.solve({x: w for x, w in zip(xs, weights)}, maximise=True, gap=0.0, nodes=3)
    assert not found.optimal and found.objective > 0
    again = m.solve({x: w for x, w in zip(xs, weights)}, maximise=True, gap=0.0, nodes=3)
    assert list(again.x) == list(found.x)      # deterministic at the limit


def test_highs_gets_each_variable_integer_or_continuous_as_declared_and_all_continuous_when_relaxed():
    """solve() hands HiGHS the integrality as bytes (HighsVarType is a uint8): the same as the enum's values."""
    import highspy

    from switchyard.planner.lp import LinearModel

    m = LinearModel()
    x, y, z = m.var(0, 3.5, integer=True), m.var(0, 3.5), m.var(0, 2, integer=True)
    m.row([(x, 1.0), (y, 1.0), (z, 1.0)], ub=6.2)
    kinds = highspy.HighsVarType
    assert m.solve({x: 1.0, y: 0.1, z: 1.0}, maximise=True, relax=True).objective == pytest.approx(5.5 + 0.07)
    assert kinds.kInteger not in m._highs.getLp().integrality_      # HiGHS keeps none when all are continuous
    found = m.solve({x: 1.0, y: 0.1, z: 1.0}, maximise=True)
    assert m._highs.getLp().integrality_ == [kinds.kInteger, kinds.kContinuous, kinds.kInteger]
    assert (found.x[0], found.x[2]) == (3.0, 2.0) and found.x[1] == pytest.approx(1.2)
