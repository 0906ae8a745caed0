"""Realise: a stage solution becomes a placement on named nodes, judged by the flow model as a Plan."""

from __future__ import annotations

import dataclasses

from ..topology import Topology
from .flow import evaluate
from .formulation import Current, Formulation
from .lp import Solution
from .model import Placement, Plan
from .packing import Packing, largest_remainders, pack, relocate
from .problem import Problem
from .stages import EXACT_LIMIT

NAME = "milp"


def to_current(problem: Problem, current: Placement) -> Current:
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


def fit_to_packing(fm: Formulation, packing: Packing, solution: Solution) -> None:
    """A fleet that did not fit on a switch's nodes gets at most what fitted there (a heuristic cut:
    other mixes might hold more, so later rounds may cut again)."""
    m = fm.model
    for (j, s), short in sorted(packing.shortfall.items()):
        if s < 0:
            continue        # left unplaced by the plan itself, not by packing
        fm.cut = True
        terms = [(fm.local[j, s], 1.0)] if (j, s) in fm.local else []
        terms += [(fm.ring[j, s], 1.0)] if (j, s) in fm.ring else []
        planned = int(round(sum(solution.x[v] for v, _ in terms)))
        m.row(terms, ub=planned - short)


def realise(problem: Problem, fm: Formulation, solution: Solution, current: Placement | None,
            repair: bool = False) -> tuple[Placement, Packing]:
    """The solution's counts on named nodes, packed; `repair`: the plan is final, so workers that do not
    pack on their switch are offered any room left (earlier rounds re-solve with a cut instead)."""
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
        out.update(((j, s, k), c) for k, c in largest_remainders(n, shares).items() if c)
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
                if not n:       # nothing to take (most classes at 20,000 nodes): no scan of the class's nodes
                    continue
                mine = [node for node in nc.nodes if keep.get(node) == problem.pools[p].name][:n]
                taken.update(mine)
                out.setdefault((p, s), []).extend(mine)
                wanted[p] = n - len(mine)
            free = [node for node in nc.nodes if node not in taken]
            for p, n in wanted.items():
                if not n:
                    continue
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


def planned_ring_weights(topology: Topology, problem: Problem, fm: Formulation, solution: Solution,
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
    # a switch of outside readers alone reads the ring (they do); beside pods, the pods' routing is the switch's
    ring |= {problem.switches[s].name for _, s in problem.outside} - {
        s for by_switch in placement.workers.values() for s, n in by_switch.items() if n}
    return {sw.name: ("hashed" if sw.name in ring else "local") for sw in problem.switches}


def plan_of(topology: Topology, pools, fleets, problem: Problem, routing: str, placement: Placement,
            weights, bound: float, current: Placement | None, unplaced: dict[str, int]) -> Plan:
    """The placement judged by the flow model, as the Plan the planner returns."""
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
