"""Node-level witness: every planned pod on a node with room for it.

The solver decides counts per switch; the default scheduler binds the pods.
This packing proves the counts fit the switch's nodes (CPU, memory, pods and
NIC, cache pods included) and is what tests check capacities against.

First a greedy fill (node by node in name order, biggest workers first); if
that leaves workers over, an exact packing of that switch as a small MILP,
which also says how many of each fleet fit at most when not all do.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .lp import LinearModel, Solution
from .problem import Problem

EPS = 1e-9
# Branch-and-bound nodes for a switch's exact packing (a deterministic cap; the greedy fill is its start).
EXACT_NODES = 200


@dataclass(frozen=True)
class Packing:
    nodes: Mapping[str, Mapping[str, int]]        # node -> pod kind ("cache:<pool>" or fleet) -> count
    shortfall: Mapping[tuple[int, int], int]      # (fleet, switch) -> workers that did not fit
    free: Mapping[str, tuple[float, ...]] = None  # node -> room left: CPU millis, memory bytes, pods, NIC Gbps
    # quick packing: switch -> a function giving its (pods per node, room per node), for the switches
    # not packed node by node (nodes and free leave them out); relocate packs them when it needs them
    later: Mapping[int, object] = None

    def pods_on(self, node: str) -> int:
        return sum(self.nodes.get(node, {}).values())


def pack(problem: Problem, cache_nodes: Mapping[tuple[int, int], tuple[str, ...]],
         workers: Mapping[tuple[int, int], int], keep: Mapping[tuple[int, int], int] | None = None,
         exact: bool = True, per_class: Mapping[tuple[int, int, int], int] | None = None,
         memo: dict | None = None, quick: bool = False) -> Packing:
    """cache_nodes: (pool, switch) -> nodes; workers: (fleet, switch) -> count.

    keep: counts that run today; when not every worker fits, those stay first.
    per_class: (fleet, switch, class) -> count, the split the model planned: each class's share is
    spread evenly over its nodes first (so every node gets the class's mix, which the model checked
    in aggregate), and what does not fit there goes to the greedy fill.
    exact=False skips the per-switch MILP (the greedy fill's leftovers are the shortfall).
    memo: a dict kept between calls on the same problem (candidates that differ on a few switches):
    a switch packed before with the same input is not packed again (its packing is a function of it).
    quick: no MILP for a switch whose workers exceed its room in sum (the greedy fill's count is taken),
    and a switch whose split spreads evenly onto its nodes with room to spare is not packed node by
    node: its nodes and room are left out (Packing.later packs it, for relocate when it needs its room)."""
    out: dict[str, dict[str, int]] = {}
    shortfall: dict[tuple[int, int], int] = {}
    left: dict[str, tuple[float, ...]] = {}
    by_switch: dict[int, dict[int, int]] = {}
    for (j, s), n in sorted(workers.items()):
        if n > 0:
            by_switch.setdefault(s, {})[j] = n
    caches_on: dict[int, dict] = {}     # switch -> its (pool, switch) -> nodes: no scan of all per switch
    for (p, s), nodes in sorted(cache_nodes.items()):
        caches_on.setdefault(s, {})[p, s] = nodes
    split_on: dict[int, dict] = {}
    for (j, s, k), n in sorted((per_class or {}).items()):
        split_on.setdefault(s, {})[j, s, k] = n
    def packed(s: int, wanted: dict[int, int], even: bool):
        """(pods per node, room left per node, workers placed per fleet) on switch s; None if `even` and
        the split spreads evenly with room to spare (no node-by-node packing needed to know it fits)."""
        kept = {j: n for (j, ss), n in (keep or {}).items() if ss == s}
        key = (s, tuple(sorted(caches_on.get(s, {}).items())), tuple(sorted(wanted.items())),
               tuple(split_on.get(s, {}).items()) if per_class else None, tuple(sorted(kept.items())), exact, quick)
        if memo is not None and key in memo:
            return memo[key]
        pods: dict[str, dict[str, int]] = {}
        free = _free_after_caches(problem, s, caches_on.get(s, {}), pods)
        if even and _fits_evenly(problem, s, free, wanted, split_on.get(s, {})):
            return None
        placed = _pack_switch(problem, s, free, wanted, split_on.get(s, {}) if per_class else None, kept,
                              exact and not (quick and _too_many(problem, free, wanted)))
        for (j, name), count in placed.items():
            if count:
                slot = pods.setdefault(name, {})
                slot[problem.fleets[j].name] = slot.get(problem.fleets[j].name, 0) + count
                size = worker_size(problem, j, name)
                room = free[name]
                free[name] = [room[0] - count * size[0], room[1] - count * size[1], room[2] - count * size[2],
                              room[3] - count * size[3]]
        result = (pods, free, _count(placed))
        if memo is not None:
            memo[key] = result
        return result

    deferred = []
    for s in range(len(problem.switches)):
        wanted = by_switch.get(s, {})
        result = packed(s, wanted, quick and bool(per_class))
        if result is None:
            deferred.append(s)
            continue
        pods, free, counted = result
        for name, kinds in pods.items():
            out[name] = dict(kinds)
        for j, n in wanted.items():
            if counted.get(j, 0) < n:
                shortfall[j, s] = n - counted.get(j, 0)
        left.update((name, tuple(room)) for name, room in free.items())
    later = {s: (lambda s=s: packed(s, by_switch.get(s, {}), False)[:2]) for s in deferred}
    return Packing({n: dict(sorted(v.items())) for n, v in sorted(out.items())}, shortfall, left, later)


def _pack_switch(problem: Problem, s: int, free: dict[str, list[float]], wanted: dict[int, int],
                 per_class: Mapping | None, keep: dict[int, int], exact: bool) -> dict[tuple[int, str], int]:
    """One switch's workers on its nodes (`free`: the room the cache pods leave): the split spread,
    the greedy fill, the MILP if those leave workers over."""
    placed = _spread(problem, s, free, wanted, per_class) if per_class else {}
    rest = {j: n - _count(placed).get(j, 0) for j, n in wanted.items()}
    if any(rest.values()):
        room = {name: list(r) for name, r in free.items()}
        for (j, name), count in placed.items():
            size = worker_size(problem, j, name)
            room[name] = [room[name][i] - count * size[i] for i in range(4)]
        for key, count in _greedy(problem, room, {j: n for j, n in rest.items() if n}).items():
            placed[key] = placed.get(key, 0) + count
    if exact and _count(placed) != wanted and per_class:
        # the split may have cut a node's room into slivers: the plain greedy fill before the MILP
        plain = _greedy(problem, {name: list(r) for name, r in free.items()}, wanted)
        if _count(plain) == wanted:
            placed = plain
    if exact and _count(placed) != wanted:
        placed = _exact(problem, free, wanted, keep, placed)
    return placed


def capacity_split(problem: Problem, workers: Mapping[tuple[int, int], int],
                   cache_nodes: Mapping[tuple[int, int], tuple[str, ...]]) -> dict[tuple[int, int, int], int]:
    """(fleet, switch, class) -> workers: each switch's count split over its node classes in proportion to
    the workers of the fleet each class holds (a cache host holds fewer; largest remainders first), a
    split for `pack` to spread when the model's own is not at hand (a placement kept from before)."""
    hosts: dict[tuple[int, int], list[int]] = {}       # (switch, class) -> pool of each cache host
    for (p, s), nodes in cache_nodes.items():
        classes = problem.switches[s].classes
        for name in nodes:
            node_class = problem.class_of(name)
            k = next(k for k, nc in enumerate(classes) if nc is node_class)
            hosts.setdefault((s, k), []).append(p)
    out = {}
    for (j, s), n in sorted(workers.items()):
        if n <= 0:
            continue
        room = {}
        for k, nc in enumerate(problem.switches[s].classes):
            pools = hosts.get((s, k), [])
            room[k] = (nc.count - len(pools)) * problem.slots(j, nc) + sum(problem.slots(j, nc, p) for p in pools)
        total = sum(room.values())
        if not total:
            continue
        out.update(((j, s, k), c) for k, c in largest_remainders(n, room).items() if c)
    return out


def largest_remainders(n: int, weights: Mapping[int, float]) -> dict[int, int]:
    """n split in proportion to the (positive) weights, in whole numbers that add up to n: each gets
    the floor of its share, then the largest remainders one more (ties by key)."""
    total = sum(weights.values())
    exact = {k: n * w / total for k, w in weights.items() if w}
    counts = {k: math.floor(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: (counts[k] - exact[k], k))[:n - sum(counts.values())]:
        counts[k] += 1
    return counts


def relocate(problem: Problem, cache_nodes, workers: dict[tuple[int, int], int], hashed: dict[tuple[int, int], int],
             packing: Packing, unplaced: Mapping[tuple[int, None], int] = {}) -> Packing:
    """Workers that fit nowhere on their switch (and workers the plan left unplaced, keyed (fleet, None))
    go to nodes with room elsewhere: ring readers there, unless they join local readers of their fleet.
    `workers` and `hashed` are updated in place; what still fits nowhere is the shortfall (Pending)."""
    # copied on write: a few of tens of thousands of nodes take a relocated worker
    free = dict(packing.free)
    nodes = dict(packing.nodes)
    touched: set[str] = set()
    later = dict(packing.later or {})
    switch_nodes = [[n for c in sw.classes for n in c.nodes] for sw in problem.switches]
    shortfall = {}
    leftovers = sorted(packing.shortfall.items()) + sorted(unplaced.items())
    for (j, s), short in leftovers:
        fleet = problem.fleets[j]
        # where the fleet already runs first, then the rest, each by name
        order = sorted(range(len(problem.switches)), key=lambda t: (t == s, workers.get((j, t), 0) == 0, problem.switches[t].name))
        for t in order:
            if not short or t == s:
                continue
            if t in later:      # a switch the quick packing left out: packed now that its room is needed
                pods, room = later.pop(t)()
                nodes.update(pods)
                touched.update(pods)
                free.update((n, tuple(r)) for n, r in room.items())
            for name in switch_nodes[t]:
                size = worker_size(problem, j, name)
                take = min(short, _fit(free[name], size))
                if not take:
                    continue
                free[name] = tuple(r - take * z for r, z in zip(free[name], size))
                kinds = nodes[name] = dict(nodes.get(name, {}))
                kinds[fleet.name] = kinds.get(fleet.name, 0) + take
                touched.add(name)
                local = workers.get((j, t), 0) - hashed.get((j, t), 0) > 0 and fleet.pool is not None \
                    and (fleet.pool, t) in cache_nodes
                workers[j, t] = workers.get((j, t), 0) + take
                if not local:
                    hashed[j, t] = hashed.get((j, t), 0) + take
                short -= take
                if not short:
                    break
        if short:
            shortfall[j, -1 if s is None else s] = short
    return Packing({n: dict(sorted(v.items())) if n in touched else v for n, v in sorted(nodes.items())}, shortfall, free)


def _count(placed: dict[tuple[int, str], int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for (j, _), n in placed.items():
        if n:
            out[j] = out.get(j, 0) + n
    return out


def _free_after_caches(problem: Problem, s: int, cache_nodes, out) -> dict[str, list[float]]:
    sw = problem.switches[s]
    free: dict[str, list[float]] = {}
    class_of = {}
    for nc in sw.classes:
        for name in nc.nodes:
            free[name] = [nc.cpu_millis, nc.memory_bytes, nc.pods, nc.nic_gbps]
            class_of[name] = nc
    for (p, ss), nodes in sorted(cache_nodes.items()):
        if ss != s:
            continue
        pool = problem.pools[p]
        for name in nodes:
            room = free[name]
            room[0] -= pool.cpu_millis
            room[1] -= pool.memory_bytes
            room[2] -= 1
            room[3] -= problem.fill(p, class_of[name])
            out.setdefault(name, {})[f"cache:{pool.name}"] = 1
    return dict(sorted(free.items()))


def worker_size(problem: Problem, j: int, node: str) -> tuple[float, float, float, float]:
    """What one worker of fleet j takes of the node: CPU, memory, a pod and its read (at most the NIC).

    On a node whose taints the fleet does not tolerate a worker is infinitely large: none fits."""
    node_class = problem.class_of(node)
    key = ("size", j, node_class.nic_gbps, j in node_class.fleets)
    if key not in problem._memo:
        f = problem.fleets[j]
        problem._memo[key] = (f.cpu_millis, f.memory_bytes, 1, min(f.read_gbps, node_class.nic_gbps)) \
            if j in node_class.fleets else (math.inf,) * 4
    return problem._memo[key]


def _fit(room: list[float], size: tuple) -> int:
    r0, r1, r2, r3 = room
    s0, s1, s2, s3 = size
    return max(0, int(min((r0 + EPS) // s0, (r1 + EPS) // s1, (r2 + EPS) // s2, (r3 + EPS) // s3)))


def _fits_evenly(problem: Problem, s: int, free: dict[str, list[float]], wanted: dict[int, int],
                 split: Mapping[tuple[int, int, int], int]) -> bool:
    """Whether _spread places the whole split on the switch's nodes, known without placing it: in a class
    of n nodes each gets share // n of every fleet, and the share % n left over of each go round robin
    over the nodes (fleet after fleet), so no node gets more than ceil(sum / n) of them, each at most
    the largest of their sizes."""
    got: dict[int, int] = {}
    for (j, _, k), n in split.items():
        got[j] = got.get(j, 0) + n
    if got != {j: n for j, n in wanted.items() if n}:
        return False
    for k, nc in enumerate(problem.switches[s].classes):
        need, biggest, extras, count = [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], 0, nc.count
        for j in wanted:
            n = split.get((j, s, k), 0)
            if not n:
                continue
            size = worker_size(problem, j, nc.nodes[0])
            if size[0] == math.inf:
                return False
            base, extra = divmod(n, count)
            extras += extra
            for d in range(4):
                need[d] += base * size[d]
                if extra:
                    biggest[d] = max(biggest[d], size[d])
        rounds = -(-extras // count)
        if any(min(free[name][d] for name in nc.nodes) + EPS < need[d] + rounds * biggest[d] for d in range(4)):
            return False
    return True


def _too_many(problem: Problem, free: dict[str, list[float]], wanted: dict[int, int]) -> bool:
    """Whether the workers' CPU, memory or pods exceed the switch's room in sum (no packing holds them all)."""
    fleets = problem.fleets
    need = (sum(fleets[j].cpu_millis * n for j, n in wanted.items()),
            sum(fleets[j].memory_bytes * n for j, n in wanted.items()), sum(wanted.values()))
    return any(sum(r[d] for r in free.values()) + EPS < need[d] for d in range(3))


def _spread(problem: Problem, s: int, free: dict[str, list[float]], wanted: dict[int, int],
            per_class: Mapping[tuple[int, int, int], int]) -> dict[tuple[int, str], int]:
    """Each fleet's planned share of each node class, spread evenly over the class's nodes."""
    room = {n: list(r) for n, r in free.items()}
    fleets = problem.fleets
    order = sorted(wanted, key=lambda j: (-fleets[j].cpu_millis, -fleets[j].memory_bytes, -fleets[j].read_gbps,
                                          fleets[j].name))
    placed: dict[tuple[int, str], int] = {}
    got: dict[int, int] = {}
    for k, nc in enumerate(problem.switches[s].classes):
        nodes, offset = list(nc.nodes), 0
        for j in order:
            share = min(per_class.get((j, s, k), 0), wanted[j] - got.get(j, 0))
            if share <= 0:
                continue
            base, extra = share // len(nodes), share % len(nodes)
            size = worker_size(problem, j, nodes[0])     # one class: one NIC
            for i in range(len(nodes)):
                name = nodes[(offset + i) % len(nodes)]
                take = min(base + (1 if i < extra else 0), _fit(room[name], size))
                if take:
                    for d in range(4):
                        room[name][d] -= take * size[d]
                    placed[j, name] = placed.get((j, name), 0) + take
                    got[j] = got.get(j, 0) + take
            offset = (offset + extra) % len(nodes)
    return placed


def _greedy(problem: Problem, free: dict[str, list[float]], wanted: dict[int, int]) -> dict[tuple[int, str], int]:
    free = {n: list(r) for n, r in free.items()}
    fleets = problem.fleets
    order = sorted(wanted, key=lambda j: (-fleets[j].cpu_millis, -fleets[j].memory_bytes, -fleets[j].read_gbps,
                                          fleets[j].name))
    placed: dict[tuple[int, str], int] = {}
    for j in order:
        need = wanted[j]
        for name, room in free.items():
            if not need:
                break
            size = worker_size(problem, j, name)
            take = min(need, _fit(room, size))
            if take:
                for i in range(4):
                    room[i] -= take * size[i]
                placed[j, name] = take
                need -= take
    return placed


def _exact(problem: Problem, free: dict[str, list[float]], wanted: dict[int, int],
           keep: dict[int, int], greedy: dict[tuple[int, str], int] | None = None) -> dict[tuple[int, str], int]:
    """The most workers that fit, node by node: first of those running today, then by read Gbps, then count.

    Searched from the greedy fill (a feasible point) within EXACT_NODES branch-and-bound nodes: the
    best packing found by then is taken (never fewer workers than the greedy fill placed)."""
    m = LinearModel()
    x = {}
    for j in sorted(wanted):
        for name, room in free.items():
            cap = min(wanted[j], _fit(room, worker_size(problem, j, name)))
            if cap:
                x[j, name] = m.var(0, cap, integer=True)
    for name, room in free.items():
        for i in range(4):
            terms = [(v, worker_size(problem, j, name)[i]) for (j, n), v in x.items() if n == name]
            if terms:
                m.row(terms, ub=room[i] + EPS)
    for j, n in wanted.items():
        m.row([(v, 1.0) for (jj, _), v in x.items() if jj == j], ub=n)
    if not x:
        return {}
    value = {v: problem.fleets[j].read_gbps + 1e-3 for (j, _), v in x.items()}
    weight = 1.0 + sum(value[v] * m.ub[v] for v in value)
    kept_vars = {}
    for j, n in sorted(keep.items()):
        kept = kept_vars[j] = m.var(0.0, min(n, wanted.get(j, 0)))
        m.row([(kept, 1.0)] + [(v, -1.0) for (jj, _), v in x.items() if jj == j], ub=0.0)
        value[kept] = weight
    start = None
    if greedy:
        point = np.zeros(m.size)
        for key, v in x.items():
            point[v] = min(greedy.get(key, 0), m.ub[v])
        for j, v in kept_vars.items():
            point[v] = min(m.ub[v], sum(point[u] for (jj, _), u in x.items() if jj == j))
        start = Solution(x=point, objective=0.0, optimal=False)
    best = m.solve(value, maximise=True, gap=0.0, start=start, nodes=EXACT_NODES)
    return {key: int(round(best.x[v])) for key, v in x.items() if round(best.x[v])}


def witness(topology, pools, fleets, placement) -> Packing:
    """The node-level packing of a Plan's placement (what tests and the bench check capacities on)."""
    from .problem import build_problem

    problem = build_problem(topology, pools, fleets)
    switch = {sw.name: s for s, sw in enumerate(problem.switches)}
    pool = {p.name: i for i, p in enumerate(problem.pools)}
    fleet = {f.name: j for j, f in enumerate(problem.fleets)}
    caches = {(pool[p], switch[s]): tuple(nodes) for p, by in placement.caches.items() for s, nodes in by.items()}
    workers = {(fleet[f], switch[s]): n for f, by in placement.workers.items() for s, n in by.items()}
    return pack(problem, caches, workers)
