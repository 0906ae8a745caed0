"""The switch-aware planner: the placement model solved with HiGHS, stage by stage.

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
import math
from contextlib import contextmanager

from ..topology import Topology
from .flow import evaluate, ring_weights
from .formulation import Current, Formulation, formulate
from .lp import Infeasible, LinearModel, Solution
from .model import FleetRequest, Placement, Plan, PoolRequest
from .packing import Packing, pack, relocate
from .problem import Problem, build_problem, fleet_pool_index, host_eligible

NAME = "milp"
GBPS_SLACK = 1e-6      # relative: later stages keep the Gbps within this of stage 1
UTIL_SLACK = 1e-6      # absolute, on utilisation (0..1)
# Peak utilisations this close count as equal in the integer stages, so a
# re-plan does not move pods for a gain nobody could measure.
UTIL_TOLERANCE = 0.005
# Large models solve stage 1 to this relative gap (the box is accepted within it).
STAGE1_GAP = 1e-3
# Gbps this close (relative) count as equal when a re-plan is weighed against staying put.
GBPS_TOLERANCE = STAGE1_GAP
# Up to this many integers, stages 2 and 3 search the whole space; above, the box.
EXACT_LIMIT = 300
# Simplex iterations for the large models' first stage-2 LP, the guide cache counts are rounded
# from (primal simplex: each iteration keeps the point feasible and the peak no higher). Solved to
# the end it took over 2,000 at 5,000 nodes, a quarter of the plan's time, for counts no better.
GUIDE_ITERATIONS = 300
# Re-solves when a switch's planned workers do not pack onto its nodes.
PACKING_ROUNDS = 4


def plan(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], routing: str = "auto",
         current: Placement | None = None) -> Plan:
    problem = build_problem(topology, pools, fleets)
    fm = formulate(problem, routing, _current(problem, current) if current is not None else None)
    bound = None
    # Small models re-solve with a cut when a switch's workers do not pack; large ones
    # (and what is left after the rounds) move the leftover workers to nodes with room.
    rounds = PACKING_ROUNDS if len(fm.integers()) <= EXACT_LIMIT else 1
    for round_ in range(rounds):
        try:
            relaxed_gbps, solution = solve(fm)
        except Infeasible:
            if round_ == 0:
                raise
            # The packing cuts, with what a re-plan keeps, left no feasible point:
            # realise the last solution and move what does not pack to nodes with room.
            placement, packing = _realise(problem, fm, solution, current, repair=True)
            break
        if bound is None:   # before any packing restriction: those are not valid inequalities
            bound = relaxed_gbps if routing == "auto" else upper_bound(problem)
        placement, packing = _realise(problem, fm, solution, current, repair=round_ == rounds - 1)
        if not any(s >= 0 for _, s in packing.shortfall):
            break
        _fit_to_packing(fm, packing, solution)
    weights = _ring_weights(topology, problem, fm, solution, placement)
    unplaced: dict[str, int] = {}
    for (j, _), count in packing.shortfall.items():
        name = problem.fleets[j].name
        unplaced[name] = unplaced.get(name, 0) + count
    result = _plan_of(topology, pools, fleets, problem, routing, placement, weights, bound, current, unplaced)
    if current is not None:
        stay = staying(topology, pools, fleets, current, routing, bound=bound)
        if stay is not None and not better(result, stay):
            return stay
    return result


def _plan_of(topology: Topology, pools, fleets, problem: Problem, routing: str, placement: Placement,
             weights, bound: float, current: Placement | None, unplaced: dict[str, int]) -> Plan:
    flow = evaluate(topology, pools, fleets, placement, weights)
    return Plan(
        placement=placement,
        routing=_routing(problem, placement, routing),
        uplinks=flow.uplinks,
        predicted_gbps=flow.delivered_gbps,
        bound_gbps=round(bound, 3),
        bottleneck=flow.bottleneck,
        planner=NAME,
        moves=placement.moves_from(current),
        demand_gbps=flow.demand_gbps,
        hash_weights=weights,
        unplaced={k: v for k, v in sorted(unplaced.items()) if v},
    )


def peak(p: Plan) -> float:
    return max((u.utilisation for u in p.uplinks), default=0.0)


def better(a: Plan, b: Plan) -> bool:
    """Whether `a` beats `b` in the objective order, with the planner's tolerances: more Gbps (by more
    than GBPS_TOLERANCE), else (Gbps equal within it) a lower peak (by more than UTIL_TOLERANCE), else
    (both equal) fewer pods moved, else more cache hosts. A re-plan that moves more pods than staying put is only taken if it
    is better in this sense, so every move beyond the lost pods raises the Gbps or lowers the peak."""
    scale = max(1.0, a.predicted_gbps, b.predicted_gbps)
    if abs(a.predicted_gbps - b.predicted_gbps) > GBPS_TOLERANCE * scale:
        return a.predicted_gbps > b.predicted_gbps
    if abs(peak(a) - peak(b)) > UTIL_TOLERANCE:
        return peak(a) < peak(b)
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


def staying(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], current: Placement,
            routing: str = "auto", bound: float | None = None) -> Plan | None:
    """The plan that keeps every surviving pod where it is (stay_placement), with ring weights re-planned
    for it (weights move no pod). Pods that no longer fit their switch (those of a lost node, if its
    switch has no room) go where there is room, as a final plan's leftovers do (packing.relocate).
    None if the fleets or pools changed so that staying is no candidate, or the pods fit nowhere."""
    placement = stay_placement(topology, pools, fleets, current)
    if placement is None:
        return None
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
    packing = pack(problem, caches, workers)
    if packing.shortfall:
        hashed = {(fleet[f], switch[s]): n for f, by in placement.hashed.items() if f in fleet
                  for s, n in by.items() if s in switch}
        for key, short in packing.shortfall.items():
            workers[key] -= short
            hashed[key] = min(hashed.get(key, 0), workers[key])
        if relocate(problem, caches, workers, hashed, packing).shortfall:
            return None
        placement = to_placement(problem, caches, workers, hashed)
    fm = formulate(problem, routing)
    m = fm.model
    fixed = _current(problem, placement)
    for counts, variables in ((fixed.workers, fm.local), (fixed.ring, fm.ring), (fixed.caches, fm.caches)):
        for key, v in variables.items():
            m.lb[v] = m.ub[v] = counts.get(key, 0)
    weights = None
    try:
        gbps = m.solve(fm.delivered(), maximise=True)
        _pin_gbps(fm, gbps.objective)
        weights = _ring_weights(topology, problem, fm, m.solve({fm.util: 1.0}), placement)
    except Infeasible:
        pass    # a routing the model does not hold (e.g. ring reading next to ring serving): capacity weights
    if bound is None:
        bound = upper_bound(problem)
    if weights is None:     # by serving capacity, normalised like the planned weights
        weights = {p: {n: round(w / sum(ws.values()), 6) for n, w in ws.items()} if ws else {}
                   for p, ws in ring_weights(topology, pools, placement).items()}
    return _plan_of(topology, pools, fleets, problem, routing, placement, weights, bound, current, {})


def upper_bound(problem: Problem) -> float:
    """LP relaxation of the routing-free (auto) model: no placement and routing delivers more."""
    fm = formulate(problem, "auto")
    return _most_gbps(fm, relax=True).objective


def solve(fm: Formulation) -> tuple[float, Solution]:
    """(LP-relaxation Gbps, integer solution), stage by stage.

    Small models (up to EXACT_LIMIT integers) are solved exactly, stage after
    stage. Stage 2 (a min-max) is what branch and bound cannot finish at
    thousands of integers, so larger models go in three steps:

    1. cache counts, fixed for the rest. Tried in turn, the first that keeps
       the Gbps within STAGE1_GAP of the LP wins: in a re-plan, today's (a
       moved cache starts cold); the LP's rounded up as far as nodes and
       maxHostsPerSwitch allow (a cache host more costs no Gbps unless its
       node's room was needed for workers); rounded to the nearest; a MILP
       with only cache counts and routing flags integer.
    2. a guide: stages 2 and 3 as LPs at that Gbps.
    3. the integer stages over a box: each worker count between the floor and
       ceiling of its guide value (in a re-plan widened to take in today's
       count, so staying put is always a candidate).

    If no cache counts tried keep the Gbps within STAGE1_GAP, the best of them
    is taken (the bound and gap say how far it is). Only if no box holds a
    placement at all is stage 1 solved over the whole space, and stages 2
    and 3 search a box widened to take in that solution.
    """
    m = fm.model
    start = m.mark()
    caches = sorted(fm.caches.values())
    workers = [v for v in fm.integers() if v not in fm.flags and v not in fm.caches.values()]
    try:
        relaxed = _most_gbps(fm, relax=True)
        m.rollback(start)
        if len(fm.integers()) <= EXACT_LIMIT:
            first = _most_gbps(fm, relax=False)
            return relaxed.objective, _calm_then_stable(fm, first.objective, relax=False, tolerance=UTIL_TOLERANCE,
                                                        start=first)
        target = relaxed.objective * (1 - STAGE1_GAP) - 1e-6
        # The guide only has to be a feasible point on the way to the calmest: the boxed stages
        # re-solve for the rounded counts. The cap keeps its cost bounded (deterministically).
        calm = _calm_then_stable(fm, target, relax=True, iterations=GUIDE_ITERATIONS)
        m.rollback(start)
        candidates = [_rounded_caches(fm, calm, math.ceil), _rounded_caches(fm, calm, round), None]
        if fm.current:
            # a re-plan keeps today's cache hosts if that keeps the Gbps: a moved cache starts cold
            candidates.insert(0, dataclasses.replace(calm, x=_with_current(calm.x, fm.current)))
        tried: list[tuple[float, Solution]] = []
        for counts in candidates:
            if counts is None:
                counts = _cache_counts(fm)
                m.rollback(start)
            with _fixed(m, caches, counts):
                gbps, solution = _boxed_stages(fm, workers, target, start)
            if solution is not None:
                return relaxed.objective, solution
            if gbps is not None:
                tried.append((gbps, counts))
        if tried:
            # none kept the Gbps within STAGE1_GAP: the best of them, at the Gbps it reached
            gbps, counts = max(tried, key=lambda t: t[0])
            if fm.current:
                # a re-plan takes the first (today's counts first) within STAGE1_GAP of the best
                gbps, counts = next(t for t in tried if t[0] >= gbps * (1 - STAGE1_GAP))
            with _fixed(m, caches, counts):
                return relaxed.objective, _boxed_stages(fm, workers, target, start, accept_any=True)[1]
        first = _most_gbps(fm, relax=False, gap=STAGE1_GAP)
        pinned = m.mark()
        guide = _uncrossed(fm, _calm_then_stable(fm, first.objective, relax=True))
        m.rollback(pinned)
        with _box(m, workers, guide, first, current=fm.current):
            return relaxed.objective, _calm_then_stable(fm, first.objective, relax=False, tolerance=UTIL_TOLERANCE)
    finally:
        m.rollback(start)


def _boxed_stages(fm: Formulation, workers: list[int], target: float, start: int,
                  accept_any: bool = False) -> tuple[float | None, Solution | None]:
    """Steps 2 and 3 with the cache counts fixed: (stage-1 Gbps in the box, solution), the solution
    None if the Gbps falls short of `target` (unless accept_any), both None if the box holds no placement."""
    m = fm.model
    try:
        best = _most_gbps(fm, relax=True).objective
        guide = _uncrossed(fm, _calm_then_stable(fm, min(best, target), relax=True))
        m.rollback(start)
        with _box(m, workers, guide, current=fm.current):
            first = _most_gbps(fm, relax=False, gap=STAGE1_GAP)
            if first.objective < target and not accept_any:
                return first.objective, None
            return first.objective, _calm_then_stable(fm, first.objective, relax=False, tolerance=UTIL_TOLERANCE,
                                                      start=first)
    except Infeasible:
        return None, None
    finally:
        m.rollback(start)


def _with_current(x, current: dict[int, int]):
    x = x.copy()
    for v, value in current.items():
        x[v] = value
    return x


def _rounded_caches(fm: Formulation, guide: Solution, rounding) -> Solution:
    """Cache counts rounded (up, or to the nearest), within each class's nodes and each pool's maxHostsPerSwitch.

    Every count first gets its floor (or today's count, if that is a rounding of the guide); then
    the counts that round up get one more, the largest fractions first: pools competing for a
    class's last node get it in the order the LP wanted it, not in pool order."""
    x = guide.x.copy()
    on_class: dict[tuple[int, int], int] = {}
    on_switch: dict[tuple[int, int], int] = {}
    problem = fm.problem

    def room(p: int, s: int, k: int, v: int) -> int:
        return int(min(problem.switches[s].classes[k].count - on_class.get((s, k), 0),
                       problem.pools[p].max_hosts_per_switch - on_switch.get((p, s), 0), fm.model.ub[v] - x[v]))

    def add(p: int, s: int, k: int, v: int, n: int) -> None:
        x[v] += n
        on_class[s, k] = on_class.get((s, k), 0) + n
        on_switch[p, s] = on_switch.get((p, s), 0) + n

    ups = []
    for (p, s, k), v in sorted(fm.caches.items()):
        g = guide.x[v]
        lo, hi = math.floor(g + 1e-6), math.ceil(g - 1e-6)
        x[v] = 0
        if lo <= fm.current.get(v, -1) <= hi:
            add(p, s, k, v, max(0, min(fm.current[v], room(p, s, k, v))))     # keep what runs today
            continue
        add(p, s, k, v, max(0, min(lo, room(p, s, k, v))))
        frac = g - lo
        if hi > lo and (rounding is math.ceil or frac >= 0.5):
            ups.append((-frac, (p, s, k), v))
    for _, (p, s, k), v in sorted(ups):
        if room(p, s, k, v) > 0:
            add(p, s, k, v, 1)
    return dataclasses.replace(guide, x=x)


def _cache_counts(fm: Formulation) -> Solution:
    """Stages 1 to 3 with only cache counts and routing flags integer, workers continuous."""
    m = fm.model
    workers = [v for v in fm.integers() if v not in fm.flags and v not in fm.caches.values()]
    with _continuous(m, workers):
        counted = _most_gbps(fm, relax=False, gap=STAGE1_GAP)
        return _calm_then_stable(fm, counted.objective * (1 - STAGE1_GAP), relax=False,
                                 tolerance=UTIL_TOLERANCE, start=counted)


def _uncrossed(fm: Formulation, guide: Solution) -> Solution:
    """The same LP point, with no switch both serving and reading a pool's ring.

    The LP may have a switch export ring bytes while its own ring readers
    import as many: that is delta less export and import and delta more local
    reads (workers turned from ring to local readers), no worse on any
    capacity. Rounding around the crossed point would clash with the auto
    model's rule that ring serving and ring reading never share a switch.
    """
    if fm.mode != "auto":
        return guide
    x = guide.x.copy()
    fleets = fm.problem.fleets
    for (p, s), serve in fm.ring_serve.items():
        read, local = fm.reads_ring.get((p, s)), fm.reads_local.get((p, s))
        if read is None or local is None:
            continue
        delta = min(x[serve], x[read])
        if delta <= 1e-9:
            continue
        x[serve] -= delta
        x[read] -= delta
        x[local] += delta
        for j in sorted(j for j, f in enumerate(fleets) if f.pool == p and (j, s) in fm.ring and (j, s) in fm.local):
            shift = min(x[fm.ring[j, s]], delta / fleets[j].read_gbps)
            x[fm.ring[j, s]] -= shift
            x[fm.local[j, s]] += shift
            delta -= shift * fleets[j].read_gbps
            if delta <= 1e-9:
                break
    return dataclasses.replace(guide, x=x)


@contextmanager
def _box(m: LinearModel, variables: list[int], guide: Solution, keep: Solution | None = None,
         current: dict[int, int] | None = None):
    """Bound each variable to the floor and ceiling of its guide value, widened to take in
    `keep`'s value and the current placement's (so staying put is always in the box)."""
    original = (list(m.lb), list(m.ub))
    for v in variables:
        lo, hi = math.floor(guide.x[v] + 1e-6), math.ceil(guide.x[v] - 1e-6)
        for value in ([round(keep.x[v])] if keep is not None else []) + ([current[v]] if current and v in current else []):
            lo, hi = min(lo, value), max(hi, value)
        m.lb[v], m.ub[v] = max(original[0][v], lo), min(original[1][v], hi)
    try:
        yield
    finally:
        m.lb, m.ub = original



@contextmanager
def _continuous(m: LinearModel, variables: list[int]):
    saved = [m.integer[v] for v in variables]
    for v in variables:
        m.integer[v] = False
    try:
        yield
    finally:
        for v, integer in zip(variables, saved):
            m.integer[v] = integer


@contextmanager
def _fixed(m: LinearModel, variables: list[int], at: Solution):
    saved = [(m.lb[v], m.ub[v]) for v in variables]
    for v in variables:
        m.lb[v] = m.ub[v] = round(at.x[v])
    try:
        yield
    finally:
        for v, (lo, hi) in zip(variables, saved):
            m.lb[v], m.ub[v] = lo, hi


def _pin_gbps(fm: Formulation, gbps: float, slack: float = GBPS_SLACK) -> None:
    fm.model.row(fm.delivered(), lb=gbps - slack * max(1.0, gbps))


def _most_gbps(fm: Formulation, relax: bool, gap: float = 1e-4) -> Solution:
    """Stage 1. When not every worker fits: the most Gbps, then among those the fewest unplaced workers.

    (A worker left Pending costs no Gbps; a cache host dropped to make room for
    one would.) The solution returned satisfies both pins; its objective is the Gbps.
    """
    m: LinearModel = fm.model
    gbps = fm.delivered()
    if not any(m.ub[v] for v in fm.unplaced.values()):
        try:
            return m.solve(gbps, maximise=True, relax=relax, gap=gap)
        except Infeasible:
            if not fm.unplaced:
                raise
        for j, v in fm.unplaced.items():
            m.ub[v] = fm.problem.fleets[j].replicas
    most = m.solve(gbps, maximise=True, relax=relax, gap=gap)
    unplaced = {v: 1.0 for v in fm.unplaced.values()}
    if most.value(unplaced) < 1e-6:
        m.row(unplaced, ub=1e-6)    # every worker placed already: nothing for a second solve to lower
        return most
    mark = m.mark()
    _pin_gbps(fm, most.objective)
    fewest = m.solve(unplaced, relax=relax, start=most)
    m.rollback(mark)       # the caller pins the Gbps, and may loosen it for stage 3
    m.row(unplaced, ub=fewest.objective + 1e-6)
    return dataclasses.replace(fewest, objective=most.objective)


def _calm_then_stable(fm: Formulation, gbps: float, relax: bool, tolerance: float = UTIL_SLACK,
                      start: Solution | None = None, iterations: int | None = None) -> Solution:
    """Stage 2 (lowest peak utilisation at `gbps`), then stage 3 (fewest moves, then most caches).

    With a current placement, stage 3 counts Gbps within STAGE1_GAP as equal:
    a re-plan does not move pods for a 0.1% gain (which the large-model
    stages could not promise to find the same way twice anyway). Without a
    current placement stage 3 only maximises cache hosts: as a guide (relaxed),
    or with the counts fixed, stage 2 is enough.
    """
    m: LinearModel = fm.model
    mark = m.mark()
    _pin_gbps(fm, gbps)
    # Peaks within the tolerance count as equal, so the search may stop that close to the best.
    second = m.solve({fm.util: 1.0}, relax=relax, abs_gap=tolerance / 2, start=start, iterations=iterations)
    if not fm.moves and (relax or all(m.lb[v] == m.ub[v] for v in fm.caches.values())):
        return second       # nothing left for stage 3 to choose
    if fm.moves:
        m.rollback(mark)
        _pin_gbps(fm, gbps, STAGE1_GAP)
    m.row({fm.util: 1.0}, ub=second.objective + tolerance)
    # Moves dominate: one pod moved outweighs every cache host there could be.
    weight = 1.0 + sum(m.ub[v] for v in fm.caches.values())
    third = {v: weight * c for v, c in fm.moves.items()}
    for v in fm.caches.values():
        third[v] = third.get(v, 0.0) - 1.0
    return m.solve(third, relax=relax, start=second)


def _current(problem: Problem, current: Placement) -> Current:
    """The current placement in model terms (pods whose switch or node is gone move whatever the plan)."""
    switch_index = {sw.name: s for s, sw in enumerate(problem.switches)}
    fleet_index = {f.name: j for j, f in enumerate(problem.fleets)}
    pool_index = {p.name: i for i, p in enumerate(problem.pools)}
    out = Current()
    for fleet, by_switch in current.workers.items():
        for switch, count in by_switch.items():
            if fleet in fleet_index and switch in switch_index:
                key = (fleet_index[fleet], switch_index[switch])
                ring = min(count, current.hashed.get(fleet, {}).get(switch, 0))
                out.workers[key] = count - ring
                out.ring[key] = ring
    for pool, by_switch in current.caches.items():
        for switch, nodes in by_switch.items():
            for node in nodes:
                key = _cache_class(problem, pool_index.get(pool), switch_index.get(switch), node)
                if key is not None:     # a host whose node is gone moves whatever the plan
                    out.caches[key] = out.caches.get(key, 0) + 1
    return out


def _cache_class(problem: Problem, p: int | None, s: int | None, node: str) -> tuple[int, int, int] | None:
    if p is None or s is None:
        return None
    for k, nc in enumerate(problem.switches[s].classes):
        if node in nc.nodes:
            return (p, s, k) if p in nc.eligible else None
    return None


def _fit_to_packing(fm: Formulation, packing: Packing, solution: Solution) -> None:
    """A fleet that did not fit on a switch's nodes gets at most what fitted there (a heuristic cut:
    other mixes might hold more, so later rounds may cut again)."""
    m = fm.model
    for (j, s), short in sorted(packing.shortfall.items()):
        if s < 0:
            continue        # left unplaced by the plan itself, not by packing
        terms = [(fm.local[j, s], 1.0)] if (j, s) in fm.local else []
        terms += [(fm.ring[j, s], 1.0)] if (j, s) in fm.ring else []
        planned = int(round(sum(solution.x[v] for v, _ in terms)))
        m.row(terms, ub=planned - short)


def _realise(problem: Problem, fm: Formulation, solution: Solution, current: Placement | None,
             repair: bool = False) -> tuple[Placement, Packing]:
    x = solution.x
    count = {key: int(round(x[v])) for key, v in fm.caches.items()}
    cache_nodes = choose_cache_nodes(problem, count, current)
    workers: dict[tuple[int, int], int] = {}
    hashed: dict[tuple[int, int], int] = {}
    for (j, s), v in fm.local.items():
        workers[j, s] = workers.get((j, s), 0) + int(round(x[v]))
    for (j, s), v in fm.ring.items():
        n = int(round(x[v]))
        workers[j, s] = workers.get((j, s), 0) + n
        hashed[j, s] = n
    keep = _current_counts(problem, current)
    # Large models skip the exact per-switch packing on a first plan: the few workers the greedy fill
    # leaves over are relocated below instead. A re-plan packs exactly: a relocated worker is a move.
    packing = pack(problem, cache_nodes, workers, keep=keep, per_class=_class_split(problem, fm, x, workers),
                   exact=len(fm.integers()) <= EXACT_LIMIT or current is not None)
    for key, short in packing.shortfall.items():
        workers[key] -= short
        hashed[key] = min(hashed.get(key, 0), workers[key])
    # Workers the plan could not place are offered any room left; when the plan is final,
    # so are those that did not pack on their switch (earlier rounds re-solve with a cut instead).
    unplaced = {(j, None): int(round(x[v])) for j, v in fm.unplaced.items() if round(x[v])}
    if unplaced or (repair and packing.shortfall):
        kept = {} if repair else dict(packing.shortfall)
        if kept:
            packing = dataclasses.replace(packing, shortfall={})
        packing = relocate(problem, cache_nodes, workers, hashed, packing, unplaced)
        if kept:
            packing = dataclasses.replace(packing, shortfall={**packing.shortfall, **kept})
    placement = to_placement(problem, cache_nodes, workers, hashed)
    return placement, packing


def _class_split(problem: Problem, fm: Formulation, x, workers: dict[tuple[int, int], int]) -> dict:
    """(fleet, switch, class) -> workers: the model's split of each switch's count over its node
    classes, rounded to whole workers that add up (largest remainders first)."""
    out = {}
    split: dict[tuple[int, int], dict[int, float]] = {}
    for (j, s, k), v in fm.split.items():
        split.setdefault((j, s), {})[k] = max(0.0, float(x[v]))
    for (j, s), n in workers.items():
        classes = problem.switches[s].classes
        if len(classes) == 1:
            out[j, s, 0] = n
            continue
        shares = split.get((j, s), {})
        if not shares:
            fits = [k for k, nc in enumerate(classes) if problem.slots(j, nc)]
            shares = {fits[0]: float(n)} if fits else {}
        total = sum(shares.values())
        if not shares or total <= 0:
            continue
        exact = {k: n * v / total for k, v in shares.items()}
        counts = {k: math.floor(v) for k, v in exact.items()}
        for k in sorted(exact, key=lambda k: (counts[k] - exact[k], k))[:n - sum(counts.values())]:
            counts[k] += 1
        out.update(((j, s, k), c) for k, c in counts.items() if c)
    return out


def _current_counts(problem: Problem, current: Placement | None) -> dict[tuple[int, int], int]:
    if current is None:
        return {}
    switch_index = {sw.name: s for s, sw in enumerate(problem.switches)}
    return {(j, switch_index[sw]): n for j, f in enumerate(problem.fleets)
            for sw, n in current.workers.get(f.name, {}).items() if sw in switch_index}


def choose_cache_nodes(problem: Problem, count: dict[tuple[int, int, int], int],
                       current: Placement | None) -> dict[tuple[int, int], tuple[str, ...]]:
    """Concrete hosts for the planned counts: current hosts first (nothing moves), then by name."""
    keep: dict[str, str] = {}
    if current is not None:
        for pool, by_switch in current.caches.items():
            for nodes in by_switch.values():
                for node in nodes:
                    keep[node] = pool
    out: dict[tuple[int, int], list[str]] = {}
    for s, sw in enumerate(problem.switches):
        for k, nc in enumerate(sw.classes):
            wanted = {p: count.get((p, s, k), 0) for p in range(len(problem.pools))}
            taken: set[str] = set()
            for p, n in wanted.items():
                mine = [node for node in nc.nodes if keep.get(node) == problem.pools[p].name][:n]
                taken.update(mine)
                out.setdefault((p, s), []).extend(mine)
                wanted[p] = n - len(mine)
            free = [node for node in nc.nodes if node not in taken]
            for p, n in wanted.items():
                # keep other pools' current hosts for last, so a shrinking pool frees its own first
                ordered = sorted(free, key=lambda node: (node in keep, node))[:n]
                free = [node for node in free if node not in ordered]
                out.setdefault((p, s), []).extend(ordered)
    return {key: tuple(sorted(nodes)) for key, nodes in out.items() if nodes}


def to_placement(problem: Problem, cache_nodes, workers, hashed) -> Placement:
    caches: dict[str, dict[str, tuple[str, ...]]] = {p.name: {} for p in problem.pools}
    has_cache = set()
    for (p, s), nodes in sorted(cache_nodes.items()):
        caches[problem.pools[p].name][problem.switches[s].name] = nodes
        has_cache.add((p, s))
    by_fleet: dict[str, dict[str, int]] = {f.name: {} for f in problem.fleets}
    ring: dict[str, dict[str, int]] = {}
    for (j, s), n in sorted(workers.items()):
        if n <= 0:
            continue
        fleet, switch = problem.fleets[j], problem.switches[s].name
        by_fleet[fleet.name][switch] = n
        if fleet.pool is None:
            continue
        # without a local cache every worker reads through the ring
        h = n if (fleet.pool, s) not in has_cache else hashed.get((j, s), 0)
        if h:
            ring.setdefault(fleet.name, {})[switch] = h
    return Placement(caches={k: v for k, v in caches.items() if v} or {}, workers=by_fleet,
                     hashed=ring)


def _ring_weights(topology: Topology, problem: Problem, fm: Formulation, solution: Solution,
                  placement: Placement) -> dict[str, dict[str, float]]:
    """Host weights proportional to the ring serving the model planned per switch."""
    nic = {h.name: h.nic_gbps for h in topology.hosts}
    out = {}
    for p, pool in enumerate(problem.pools):
        by_switch = placement.caches.get(pool.name, {})
        planned = {s: solution.x[v] for (pp, s), v in fm.ring_serve.items() if pp == p}
        total = sum(planned.values())
        weights = {}
        for s, sw in enumerate(problem.switches):
            nodes = by_switch.get(sw.name, ())
            serve = {n: min(nic[n], pool.serve_gbps) for n in nodes}
            share = planned.get(s, 0.0) / total if total > 1e-9 else None
            for n in nodes:
                if share is None:
                    weights[n] = float(serve[n])     # nothing planned through the ring: weigh by capacity
                else:
                    weights[n] = float(share * serve[n] / sum(serve.values()))
        scale = sum(weights.values())
        out[pool.name] = {n: round(w / scale, 6) for n, w in sorted(weights.items())} if scale else {}
    return out


def _routing(problem: Problem, placement: Placement, mode: str) -> dict[str, str]:
    if mode == "hashed":
        return {sw.name: "hashed" for sw in problem.switches}
    ring = {s for by_switch in placement.hashed.values() for s, n in by_switch.items() if n}
    return {sw.name: ("hashed" if sw.name in ring else "local") for sw in problem.switches}
