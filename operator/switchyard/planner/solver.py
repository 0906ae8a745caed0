"""The switch-aware planner: the placement model solved with HiGHS, stage by stage.

The stages are in stages.py, their realisation on nodes in realise.py, and the
weighing of a re-plan against staying put in stay.py; this module runs them.

1. deliverable Gbps, as high as it goes (if the cluster cannot hold every
   worker: then, at that Gbps, as many workers as fit);
2. then the lowest peak uplink utilisation that keeps that Gbps;
3. then the fewest pods moved from the current placement, and among equals
   the most cache hosts (spare serving and a warm cache to lose).

Each stage pins what the earlier ones achieved, so the order is strict. The
integer solution is then realised on nodes (packing.py), judged by the same
flow model as every baseline (flow.py), and reported with the LP relaxation of
the routing-free model as the bound.

A re-plan is finally weighed against staying put (`staying`: every surviving
pod where it is) by that flow model, in the same order with the same
tolerances (`better`): it is taken only if it delivers more Gbps, or as many
at a lower peak, or moves fewer pods. So a pod beyond a lost node's moves only
for Gbps or headroom, judged on what is realised, not on the model.
"""

from __future__ import annotations

import dataclasses

from ..topology import Topology
from .formulation import formulate, ring_shares
from .lp import Infeasible
from .model import OPTIMAL_GAP, FleetRequest, Placement, Plan, PoolRequest
from .problem import build_problem
from .repair import large, repair
from .realise import fit_to_packing, plan_of, planned_ring_weights, realise, to_current
from .stages import EXACT_LIMIT, solve, upper_bound
from .stay import better, stay_placement, staying

# Re-solves when a switch's planned workers do not pack onto its nodes.
PACKING_ROUNDS = 4


def plan(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], routing: str = "auto",
         current: Placement | None = None) -> Plan:
    """The plan; see the module's docstring. When the fleets ask for more than the nodes hold, what runs
    keeps its place: a newcomer (or a fleet's growth) gets what remains (`keeping`)."""
    result = _replan(topology, pools, fleets, routing, current)
    if current is None or not result.unplaced or not displaced(topology, pools, fleets, current, result):
        return result
    kept = keeping(topology, pools, fleets, routing, current)
    return kept if kept is not None else result


def displaced(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], current: Placement,
              result: Plan) -> bool:
    """Whether `result` takes a running pod from where it is: a cache host that could stay, or a worker of
    a fleet that did not shrink, on its switch and with its routing (local or ring)."""
    today = stay_placement(topology, pools, fleets, current)
    if today is None:
        return True
    after = result.placement
    for pool, by_switch in today.caches.items():
        for switch, nodes in by_switch.items():
            if set(nodes) - set(after.caches.get(pool, {}).get(switch, ())):
                return True
    replicas = {f.name: f.body.replicas for f in fleets}
    for fleet, by_switch in today.workers.items():
        if fleet not in replicas or sum(by_switch.values()) > replicas[fleet]:
            continue    # gone, or shrunk: its own choice frees room
        for switch, n in by_switch.items():
            now = after.workers.get(fleet, {}).get(switch, 0)
            ring = min(n, today.hashed.get(fleet, {}).get(switch, 0))
            ring_after = min(now, after.hashed.get(fleet, {}).get(switch, 0))
            if ring_after < ring or now - ring_after < n - ring:
                return True
    return False


def keeping(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], routing: str,
            current: Placement) -> Plan | None:
    """The plan that keeps every running pod where it is (cache hosts, and the workers of every fleet that
    did not shrink, each on its switch with its routing) and places the rest into what remains, in the
    plan's own order (Gbps, then the fewest unplaced, the calmest peak, the fewest moves).

    A newcomer asking for more than the facility holds gets what is left, not what others run. None when
    what runs can no longer stay (a node or a switch lost): then the whole re-plan stands."""
    problem = build_problem(topology, pools, fleets)
    today = to_current(problem, current)
    fm = formulate(problem, routing, today)
    m = fm.model
    running = {j: sum(current.workers.get(f.name, {}).values()) for j, f in enumerate(problem.fleets)}
    pins = [(fm.local.get(key), n) for key, n in today.workers.items()
            if running[key[0]] <= problem.fleets[key[0]].replicas]
    pins += [(fm.ring.get(key), n) for key, n in today.ring.items()
             if running[key[0]] <= problem.fleets[key[0]].replicas]
    pins += [(fm.caches.get(key), n) for key, n in today.caches.items()]
    for v, n in pins:
        if not n:
            continue
        if v is None or m.ub[v] < n:
            return None
        m.lb[v] = n
    try:
        return _solved(topology, pools, fleets, problem, fm, routing, current)[0]
    except Infeasible:
        return None


def _replan(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], routing: str,
            current: Placement | None) -> Plan:
    if current is not None and not any(current.caches.values()) and not any(
            n for by_switch in current.workers.values() for n in by_switch.values()):
        current = None      # nothing runs yet (a facility's first reconcile): a first plan, nothing to keep
    problem = build_problem(topology, pools, fleets)
    if current is not None and not large(problem):
        # The first plan, if it keeps every running pod where it is: then what runs is the plan's own
        # choice among equal optima, whatever part of it was written before a restart (an operator killed
        # after writing a pool's plan and before its fleet's: its next re-plan, moves counted from the
        # pool alone, chose another of the equal worker splits, 80/120/0 for the first plan's 120/20/60).
        fresh = _replan(topology, pools, fleets, routing, None)
        if not displaced(topology, pools, fleets, current, fresh):
            return dataclasses.replace(fresh, moves=fresh.placement.moves_from(current))
    if current is not None and large(problem):
        # an incremental re-plan first: the current placement repaired where it broke, if that is
        # proven within REPAIR_GAP of the bound (repair.py); else the whole model below
        repaired = repair(topology, pools, fleets, routing, current, problem)
        if repaired is not None:
            return repaired
    today = to_current(problem, current) if current is not None else None
    fm = formulate(problem, routing, today)
    result, solution, bound = _solved(topology, pools, fleets, problem, fm, routing, current)
    if routing == "hashed":
        # The first model counts every ring byte as crossing both uplinks. With its ring shares
        # fixed, the bytes a switch's readers get from its own caches stay off its uplink, as in
        # the flow model: the second model plans what the placement really delivers.
        # Two candidate shares, each a model as costly as the first: each switch's planned serving
        # capacity (what the published weights default to), and what the first model's ring served.
        # The best realised plan wins. (Iterating from the best, shares from what it served, found
        # nothing more on 36 three-switch cases and three bench facilities planned hashed, at a
        # model's cost per round.)
        for shares in (ring_shares(fm, solution, by_capacity=True), ring_shares(fm, solution)):
            if not shares:
                continue
            shared = formulate(problem, routing, today, shares)
            second, _, _ = _solved(topology, pools, fleets, problem, shared, routing, current, bound)
            if better(second, result):
                result = second
    if current is not None:
        stay = staying(topology, pools, fleets, current, routing, bound=bound, problem=problem)
        if stay is not None and not better(result, stay):
            return _proven(stay, None)
    return result


def _solved(topology: Topology, pools, fleets, problem, fm, routing: str, current: Placement | None,
            bound: float | None = None) -> tuple[Plan, object, float]:
    """The stages solved on `fm`, realised on nodes and judged by the flow model: (plan, solution, bound)."""
    proven = None
    # Small models re-solve with a cut when a switch's workers do not pack; large ones
    # (and what is left after the rounds) move the leftover workers to nodes with room.
    rounds = PACKING_ROUNDS if len(fm.integers()) <= EXACT_LIMIT else 1
    for round_ in range(rounds):
        try:
            relaxed_gbps, solution, proven_gbps = solve(fm)
            # a later round's packing cut is a heuristic: only the first round's search proves anything
            proven = proven_gbps if round_ == 0 else None
        except Infeasible:
            if round_ == 0:
                raise
            # The packing cuts, with what a re-plan keeps, left no feasible point:
            # realise the last solution and move what does not pack to nodes with room.
            placement, packing = realise(problem, fm, solution, current, repair=True)
            break
        if bound is None:   # before any packing restriction: those are not valid inequalities
            bound = relaxed_gbps if routing == "auto" else upper_bound(problem)
        placement, packing = realise(problem, fm, solution, current, repair=round_ == rounds - 1)
        if not any(s >= 0 for _, s in packing.shortfall):
            break
        fit_to_packing(fm, packing, solution)
    weights = planned_ring_weights(topology, problem, fm, solution, placement)
    unplaced: dict[str, int] = {}
    for (j, _), count in packing.shortfall.items():
        name = problem.fleets[j].name
        unplaced[name] = unplaced.get(name, 0) + count
    result = plan_of(topology, pools, fleets, problem, routing, placement, weights, bound, current, unplaced)
    # hashed: the models count ring bytes conservatively (or at fixed shares), so their optimum proves nothing
    return _proven(result, proven if routing != "hashed" else None), solution, bound


def _proven(result: Plan, proven_gbps: float | None) -> Plan:
    """The plan, marked optimal if it meets the bound, or the model's proven best, within OPTIMAL_GAP."""
    optimal = result.gap <= OPTIMAL_GAP or (
        proven_gbps is not None and result.predicted_gbps >= proven_gbps * (1 - OPTIMAL_GAP) - 1e-6)
    return dataclasses.replace(result, optimal=optimal)
