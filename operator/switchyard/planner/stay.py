"""Stay or move: a re-plan is taken only if it beats leaving every surviving pod where it is.

Weighed by the flow model in the plan's own order: more Gbps, or as many at a
lower peak, or fewer pods moved (`better`), with the tolerances below.
"""

from __future__ import annotations

from ..api.uplinkscore import UTIL_TOLERANCE
from ..topology import Topology
from .flow import ring_weights
from .formulation import formulate_fixed
from .lp import Infeasible
from .model import FleetRequest, Placement, Plan, PoolRequest
from .packing import capacity_split, pack, relocate
from .problem import Problem, build_problem, fleet_pool_index, host_eligible

from .realise import plan_of, planned_ring_weights, to_current, to_placement
from .stages import STAGE1_GAP, pin_gbps, upper_bound

# Gbps this close (relative) count as equal when a re-plan is weighed against staying put.
GBPS_TOLERANCE = STAGE1_GAP


def better(a: Plan, b: Plan) -> bool:
    """Whether `a` beats `b` in the objective order, with the planner's tolerances: more Gbps (by more
    than GBPS_TOLERANCE), else (Gbps equal within it) a lower peak (by more than UTIL_TOLERANCE), else
    (both equal) fewer pods moved, else more cache hosts. A re-plan that moves more pods than staying put is only taken if it
    is better in this sense, so every move beyond the lost pods raises the Gbps or lowers the peak."""
    scale = max(1.0, a.predicted_gbps, b.predicted_gbps)
    if abs(a.predicted_gbps - b.predicted_gbps) > GBPS_TOLERANCE * scale:
        return a.predicted_gbps > b.predicted_gbps
    if abs(a.peak - b.peak) > UTIL_TOLERANCE:
        return a.peak < b.peak
    if a.moves != b.moves:
        return a.moves < b.moves
    # Last, as in stage 3: more cache hosts (a pool with no readers yet still gets its hosts).
    return cache_hosts(a) > cache_hosts(b)


def cache_hosts(p: Plan) -> int:
    return sum(len(nodes) for by_switch in p.placement.caches.values() for nodes in by_switch.values())


def stay_placement(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest],
                   current: Placement) -> Placement | None:
    """Every surviving pod where it is: cache hosts whose node is gone (or no longer eligible) dropped,
    readers of a switch left without a cache of their pool on the ring. None if a switch with workers
    is gone (they cannot stay)."""
    hosts = {h.name: h for h in topology.hosts}
    switches = {sw.name for sw in topology.switches}
    by_pool = {p.name: p for p in pools}
    caches = {}
    for pool, by_switch in current.caches.items():
        for switch, nodes in by_switch.items():
            kept = tuple(n for n in nodes if n in hosts and hosts[n].switch == switch and pool in by_pool
                         and host_eligible(hosts[n], by_pool[pool]))
            if kept:
                caches.setdefault(pool, {})[switch] = kept
    pool_of = {f.name: fleet_pool_index(f, pools) for f in fleets}
    hashed: dict[str, dict[str, int]] = {}
    for fleet, by_switch in current.workers.items():
        for switch, n in by_switch.items():
            if not n:
                continue
            if switch not in switches:
                return None
            index = pool_of.get(fleet)
            pool = pools[index].name if index is not None else None
            ring = n if pool is not None and switch not in caches.get(pool, {}) else \
                min(n, current.hashed.get(fleet, {}).get(switch, 0))
            if ring:
                hashed.setdefault(fleet, {})[switch] = ring
    return Placement(caches=caches, workers=current.workers, hashed=hashed)


def planned_weights(topology: Topology, problem: Problem, routing: str, placement: Placement) -> dict:
    """Ring weights for a placement that packs: its flows planned with every count fixed (the most
    Gbps, then the lowest peak at that Gbps), host weights proportional to what each switch serves."""
    fm = formulate_fixed(problem, routing, to_current(problem, placement))
    m = fm.model
    gbps = m.solve(fm.delivered(), maximise=True, relax=True)
    pin_gbps(fm, gbps.objective)
    return planned_ring_weights(topology, problem, fm, m.solve({fm.util: 1.0}, relax=True), placement)


def staying(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], current: Placement,
            routing: str = "auto", bound: float | None = None, problem: Problem | None = None,
            placement: Placement | None = None, memo: dict | None = None, quick: bool = False) -> Plan | None:
    """The plan that keeps every surviving pod where it is (stay_placement), with ring weights re-planned
    for it (weights move no pod). Pods that no longer fit their switch (those of a lost node, if its
    switch has no room) go where there is room, as a final plan's leftovers do (packing.relocate).
    None if the fleets or pools changed so that staying is no candidate, or the pods fit nowhere.

    `problem`: the re-plan's own (same input). `placement`: a placement to judge instead of staying
    put (the repair's, with a lost cache host replaced on its switch); moves still count from `current`.
    `memo`, `quick`: packing.pack's (a memo shared by the candidates of one re-plan; no packing MILP
    where a switch's workers exceed its room in sum)."""
    if placement is None:
        placement = stay_placement(topology, pools, fleets, current)
    if placement is None:
        return None
    if problem is None:
        problem = build_problem(topology, pools, fleets)
    switch = {sw.name: s for s, sw in enumerate(problem.switches)}
    pool = {p.name: i for i, p in enumerate(problem.pools)}
    fleet = {f.name: j for j, f in enumerate(problem.fleets)}
    caches = {(pool[p], switch[s]): nodes for p, by in placement.caches.items() for s, nodes in by.items()}
    workers = {(fleet[f], switch[s]): n for f, by in placement.workers.items() if f in fleet
               for s, n in by.items() if n}
    hosts = [n for nodes in caches.values() for n in nodes]
    if sum(workers.values()) != sum(f.replicas for f in problem.fleets) or len(hosts) != len(set(hosts)) \
            or any(len(nodes) > problem.pools[p].max_hosts_per_switch for (p, _), nodes in caches.items()):
        return None     # a fleet rescaled or a pool's limits changed: staying is no candidate
    packing = pack(problem, caches, workers, per_class=capacity_split(problem, workers, caches),
                   memo=memo, quick=quick)
    if packing.shortfall:
        hashed = {(fleet[f], switch[s]): n for f, by in placement.hashed.items() if f in fleet
                  for s, n in by.items() if s in switch}
        for key, short in packing.shortfall.items():
            workers[key] -= short
            hashed[key] = min(hashed.get(key, 0), workers[key])
        if relocate(problem, caches, workers, hashed, packing).shortfall:
            return None
        placement = to_placement(problem, caches, workers, hashed)
    weights = None
    try:
        weights = planned_weights(topology, problem, routing, placement)
    except Infeasible:
        pass    # a routing the model does not hold (e.g. ring reading next to ring serving): capacity weights
    if bound is None:
        bound = upper_bound(problem)
    if weights is None:     # by serving capacity, normalised like the planned weights
        weights = {p: {n: round(w / sum(ws.values()), 6) for n, w in ws.items()} if ws else {}
                   for p, ws in ring_weights(topology, pools, placement).items()}
    return plan_of(topology, pools, fleets, problem, routing, placement, weights, bound, current, {})
