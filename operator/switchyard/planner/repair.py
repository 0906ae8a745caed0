"""Repair: an incremental re-plan that changes only what the lost nodes force, if that loses (almost) nothing.

A re-plan from scratch builds and solves the whole model again (at 5,000 nodes
its first LP alone takes longer than a reconcile should stall). After a node
is lost most of the facility is unaffected, so a re-plan first tries local
repairs of the current placement:

- staying put (stay.staying): every surviving pod where it is, pods that no
  longer fit their switch where there is room;
- the same with every lost cache host replaced on its own switch by an
  eligible node that hosts no cache (by name), so its readers keep a local
  cache and the ring its serving;
- if those fall short of the totals bound, the same with a lost host whose
  switch has no free eligible node replaced by a node there hosting another
  pool's cache (a WAN-bound facility may value one pool's serving more).

The best of them by the objective order (stay.better) is taken if its Gbps is
proven within REPAIR_GAP of a bound on the new input: first a bound that costs
nothing to compute (demand, cache serving, WAN), then, if that is too loose,
the LP bound. Otherwise the caller solves the whole model. A repair keeps the
Gbps within REPAIR_GAP of the best; it does not move pods on unaffected
switches to lower the peak further (a full re-plan may). The result depends
on the inputs and the current placement only, never on an earlier call.
"""

from __future__ import annotations

from ..topology import Topology
from .model import FleetRequest, Placement, Plan, PoolRequest
from .problem import Problem, cache_fits, fleet_pool_index, host_eligible
from .stages import EXACT_LIMIT, STAGE1_GAP, upper_bound
from .stay import better, stay_placement, staying

# A repair is taken if its Gbps is within this of a bound (relative): the stage-1 gap a full plan accepts.
REPAIR_GAP = STAGE1_GAP
# Plan.planner of a repaired plan (the status says which way a re-plan went).
NAME = "milp-repair"


def large(problem: Problem) -> bool:
    """Whether a re-plan tries the repair first: the model's cache-count and worker integers exceed
    EXACT_LIMIT. Smaller models are solved whole and exactly in a fraction of a second, their peak
    re-minimised over every switch; a repair re-minimises it only over the repaired placement's flows."""
    integers = 0
    for sw in problem.switches:
        integers += sum(1 for nc in sw.classes for p in nc.eligible if cache_fits(problem.pools[p], nc))
        integers += sum(2 if f.pool is not None else 1 for j, f in enumerate(problem.fleets)
                        if f.replicas and any(problem.slots(j, nc) for nc in sw.classes))
    return integers > EXACT_LIMIT


def repair(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], routing: str,
           current: Placement, problem: Problem) -> Plan | None:
    """The best local repair of `current`, with its bound, if proven within REPAIR_GAP; else None."""
    stay = stay_placement(topology, pools, fleets, current)
    if stay is None:
        return None
    memo: dict = {}

    def judged(placement: Placement) -> Plan | None:
        # the bound is filled in below, once it is known which one proves the repair
        return staying(topology, pools, fleets, current, routing, bound=0.0, problem=problem,
                       placement=placement, memo=memo, quick=True)

    best = judged(stay)
    if best is None:
        return None
    replaced = _caches_replaced(topology, pools, fleets, problem, current, stay, best)
    if replaced is not None:
        candidate = judged(replaced)
        if candidate is not None and better(candidate, best):
            best = candidate
    cheap = quick_bound(problem)
    if best.predicted_gbps < cheap * (1 - REPAIR_GAP) - 1e-6:
        # short of the totals: a lost host's pool may be worth more than another pool's host beside it
        swapped = _caches_swapped(topology, pools, fleets, problem, current, stay)
        if swapped is not None:
            candidate = judged(swapped)
            if candidate is not None and better(candidate, best):
                best = candidate
    for bound in (lambda: cheap, lambda: upper_bound(problem)):
        value = bound()
        if best.predicted_gbps >= value * (1 - REPAIR_GAP) - 1e-6:
            return _with_bound(best, value)
    return None


def _with_bound(plan: Plan, bound: float) -> Plan:
    import dataclasses

    from .model import OPTIMAL_GAP
    plan = dataclasses.replace(plan, bound_gbps=round(bound, 3), planner=NAME)
    return dataclasses.replace(plan, optimal=plan.gap <= OPTIMAL_GAP)


def _caches_replaced(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], problem: Problem,
                     current: Placement, stay: Placement, judged: Plan) -> Placement | None:
    """Staying put with each cache host whose node is gone replaced on its switch by an eligible node that
    hosts no cache (first by name). If its switch has none, on the switch with the most uplink headroom
    in `judged` (staying's plan) whose readers of the pool are all local there (it has hosts of the pool
    below maxHostsPerSwitch) or that has none (a new cache next to ring readers would change their
    routing: a move each). None if no cache host was lost or none can be replaced."""
    taken = {n for by in stay.caches.values() for nodes in by.values() for n in nodes}
    by_pool = {p.name: (i, p) for i, p in enumerate(pools)}
    on_switch: dict[str, list] = {}
    for h in topology.hosts:
        on_switch.setdefault(h.switch, []).append(h)
    caches = {pool: dict(by) for pool, by in current.caches.items()}
    hashed = current.hashed
    by_fleet = {f.name: f for f in fleets}
    replaced = False
    for pool, by_switch in sorted(current.caches.items()):
        if pool not in by_pool:
            continue
        index, request = by_pool[pool]
        for switch, nodes in sorted(by_switch.items()):
            kept = stay.caches.get(pool, {}).get(switch, ())
            lost = len(nodes) - len(kept)
            if lost <= 0:
                continue
            free = [name for name in _free_hosts(on_switch.get(switch, ()), taken, request, problem.pools[index],
                                                 problem) if name not in taken][:lost]
            taken.update(free)
            caches[pool][switch] = tuple(sorted(kept + tuple(free)))
            replaced = replaced or bool(free)
            for _ in range(lost - len(free)):
                target = _elsewhere(problem, fleets, pools, index, stay, caches, judged, on_switch, taken)
                if target is None:
                    break
                t, name, turns = target
                taken.add(name)
                if turns:       # its readers of the pool read the new cache locally: a move each
                    hashed = {f: {sw: n for sw, n in by.items() if sw != t or fleet_pool_index(by_fleet[f], pools) != index}
                              for f, by in hashed.items()}
                caches.setdefault(pool, {})[t] = tuple(sorted(caches.get(pool, {}).get(t, ()) + (name,)))
                replaced = True
    if not replaced:
        return None
    # the current placement with the replacements in place of the lost hosts, kept as staying keeps it
    return stay_placement(topology, pools, fleets, Placement(caches=caches, workers=current.workers, hashed=hashed))


def _caches_swapped(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], problem: Problem,
                    current: Placement, stay: Placement) -> Placement | None:
    """Staying put with each lost cache host whose switch has no free eligible node replaced by a node of
    that switch hosting another pool's cache (first by name), which that pool gives up (its readers there
    turn to the ring where it has no host left). Where the pools' miss ratios or readers differ, the lost
    pool's serving can be worth more than the other's (a WAN-bound facility). None if nothing swaps."""
    hosts = {h.name: h for h in topology.hosts}
    on_switch: dict[str, list] = {}
    for h in topology.hosts:
        on_switch.setdefault(h.switch, []).append(h)
    caches = {pool: dict(by) for pool, by in stay.caches.items()}
    taken = {n for by in caches.values() for nodes in by.values() for n in nodes}
    swapped = False
    # what staying lost, counted before any swap (a pool giving up a host here lost nothing to a node)
    lost = [(index, request, switch, len(before) - len(stay.caches.get(request.name, {}).get(switch, ())))
            for index, request in enumerate(pools) for switch, before in sorted(current.caches.get(request.name, {}).items())]
    for index, request, switch, missing in lost:
        kept = caches.get(request.name, {}).get(switch, ())
        for _ in range(missing):
            others = sorted((n, pool) for pool, by in caches.items() if pool != request.name
                            for n in by.get(switch, ()) if n in hosts)
            if _free_hosts(on_switch.get(switch, ()), taken, request, problem.pools[index], problem):
                break       # a free node of its own: _caches_replaced's candidate
            take = next(((n, pool) for n, pool in others if host_eligible(hosts[n], request)
                         and cache_fits(problem.pools[index], problem.class_of(n))), None)
            if take is None:
                break
            node, pool = take
            left = tuple(n for n in caches[pool][switch] if n != node)
            if left:
                caches[pool][switch] = left
            else:
                del caches[pool][switch]
            kept = tuple(sorted(kept + (node,)))
            caches.setdefault(request.name, {})[switch] = kept
            swapped = True
    if not swapped:
        return None
    return stay_placement(topology, pools, fleets, Placement(caches=caches, workers=stay.workers, hashed=stay.hashed))


def _free_hosts(hosts, taken: set, request: PoolRequest, spec, problem: Problem) -> list[str]:
    """Nodes among `hosts` that may host the pool's cache and host none, by name."""
    return sorted(h.name for h in hosts if h.name not in taken and host_eligible(h, request)
                  and cache_fits(spec, problem.class_of(h.name)))


def _elsewhere(problem: Problem, fleets: list[FleetRequest], pools: list[PoolRequest], index: int, stay: Placement,
               caches: dict, judged: Plan, on_switch: dict, taken: set) -> tuple[str, str, bool] | None:
    """(switch, node, whether its ring readers of the pool turn local) for one more cache host of pool
    `index` away from its lost host's switch (see _caches_replaced), or None."""
    pool = pools[index]
    readers = {s for f in fleets if fleet_pool_index(f, pools) == index
               for s, n in stay.workers.get(f.name, {}).items() if n}
    room = {u.switch: u.headroom for u in judged.uplinks}
    best = None
    for switch in sorted(on_switch):
        hosts = caches.get(pool.name, {}).get(switch, ())
        if len(hosts) >= problem.pools[index].max_hosts_per_switch:
            continue
        free = _free_hosts(on_switch[switch], taken, pool, problem.pools[index], problem)
        turns = switch in readers and not hosts
        key = (turns, -room.get(switch, 0.0), switch)
        if free and (best is None or key < best[0]):
            best = (key, switch, free[0], turns)
    return None if best is None else best[1:]


def quick_bound(problem: Problem) -> float:
    """A bound no placement exceeds, from totals only: each pool delivers at most its readers' demand and
    its eligible hosts' serving (maxHostsPerSwitch each switch), and all pools together at most what the
    WAN refills (pools with the lowest miss ratio first, the optimum of that small program)."""
    most = []
    for p, pool in enumerate(problem.pools):
        demand = sum(f.replicas * f.read_gbps for f in problem.fleets if f.pool == p) + problem.outside_demand(p)
        serving = 0.0
        for sw in problem.switches:
            each = sorted((problem.serve(p, nc) for nc in sw.classes if p in nc.eligible and cache_fits(pool, nc)
                           for _ in range(min(nc.count, pool.max_hosts_per_switch))), reverse=True)
            serving += sum(each[:pool.max_hosts_per_switch])
        most.append((pool.miss_ratio, min(demand, serving)))
    wan, total = problem.wan_gbps, 0.0
    for miss, gbps in sorted(most):
        take = gbps if miss <= 0 else min(gbps, wan / miss)
        total += take
        wan -= take * miss
    return total
