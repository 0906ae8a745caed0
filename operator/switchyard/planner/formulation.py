"""The placement model as a mixed-integer linear program.

Decisions (integers): cache hosts per (pool, switch, node class); workers per
(fleet, switch), split into *local* readers (read their switch's caches) and
*ring* readers (read through the pool's rendezvous ring). Flows (continuous,
per pool and switch): local reads L, ring reads A, ring serving O.

    L[p,s] <= sum_f r_f * local[f,s]        A[p,s] <= sum_f r_f * ring[f,s] + D[p,s]
    L[p,s] + O[p,s] <= sum_k serve[p,k] * caches[p,s,k]
    sum_s O[p,s] = sum_s A[p,s]                           (the ring balances)
    out_s = sum_p O[p,s] <= u * U_s
    in_s  = sum_p A[p,s] + sum_p miss_p * (L[p,s] + O[p,s]) <= u * U_s
    sum_p miss_p * sum_s (L + O) <= WAN
    CPU, memory, pods and NIC per node class (each switch's workers split
    over its classes continuously); per (fleet, class) the node-level slot
    count (how many such workers a node holds, minus what a cache pod on it
    takes); one cache per node; maxHostsPerSwitch; local readers only where
    their pool has a cache host.

D[p,s] is what readers outside Kubernetes on switch s read through pool p's
ring (spec.outsideReaders): fixed demand, counted in the Gbps like the
workers' reads, taking no node's room. Next to a cache of the pool they are
counted as crossing both uplinks, as ring readers are without `shares`.

Routing per mode keeps every plan realisable by the rule in flow.py:
- auto: a switch whose caches of pool p serve the ring has no ring readers of
  p (e[p,s] binary), so its uplink carries exactly O out; other switches may
  mix local and ring readers.
- local: ring readers only where the pool has no cache (z[p,s] binary).
- hashed: every worker is a ring reader. A ring reader next to a ring cache
  gets part of its bytes locally. Without `shares` the model counts them as
  crossing both uplinks (the real flow is never worse than the model's); with
  each switch's ring share w_s fixed (the solver's second pass), they stay
  off the uplink as in flow.py: O[p,s] = w_s * T_p, in_s counts
  (1 - w_s) * A[p,s] and out_s counts O[p,s] - w_s * A[p,s].

The spine is non-blocking, so the ring reads are realised by publishing host
weights proportional to O: each ring reader pulls O[p,t]/sum(O) from switch t.

The LP relaxation of the auto model lets any switch import and export at once,
fractional hosts and workers: it is routing-free, so it bounds every mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..api.uplinkscore import peak_rows
from .lp import LinearModel
from .problem import Problem, cache_fits

MODES = ("local", "hashed", "auto")


@dataclass
class Current:
    """The current placement, reduced to the model's integers."""

    workers: dict[tuple[int, int], int] = field(default_factory=dict)      # (fleet, switch) -> local readers
    ring: dict[tuple[int, int], int] = field(default_factory=dict)         # (fleet, switch) -> ring readers
    caches: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (pool, switch, class) -> kept-able hosts


@dataclass
class Formulation:
    problem: Problem
    mode: str
    model: LinearModel
    caches: dict[tuple[int, int, int], int] = field(default_factory=dict)
    local: dict[tuple[int, int], int] = field(default_factory=dict)
    ring: dict[tuple[int, int], int] = field(default_factory=dict)
    unplaced: dict[int, int] = field(default_factory=dict)
    reads_local: dict[tuple[int, int], int] = field(default_factory=dict)
    reads_ring: dict[tuple[int, int], int] = field(default_factory=dict)
    ring_serve: dict[tuple[int, int], int] = field(default_factory=dict)
    util: int = -1
    moves: dict[int, float] = field(default_factory=dict)      # objective terms counting moved pods
    flags: set[int] = field(default_factory=set)               # routing binaries (e, z)
    current: dict[int, int] = field(default_factory=dict)      # variable -> its value in the current placement
    split: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (fleet, switch, class) -> workers there
    shares: dict[int, dict[int, float]] = field(default_factory=dict)     # hashed: pool -> switch -> fixed ring share
    cut: bool = False          # packing cuts were added (heuristic rows: the model no longer holds every placement)
    fixed: bool = False        # every count fixed (formulate_fixed): only the flows are free

    def integers(self) -> list[int]:
        return [v for v, integer in enumerate(self.model.integer) if integer]

    def delivered(self) -> dict[int, float]:
        return {v: 1.0 for v in list(self.reads_local.values()) + list(self.reads_ring.values())}

    def cache_count(self) -> dict[int, float]:
        return {v: 1.0 for v in self.caches.values()}


# Past this many integers (a 20,000-node facility has ~17,000; the 5,000-node bench cases ~4,200) a
# fleet's slot rows that a capacity row implies are left out (_switch_capacity): the same feasible
# set with ~40% fewer rows. Smaller models keep them, and so their plans: fewer rows take the
# simplex down another path, to another of the equally good points.
PRUNE_LIMIT = 10_000


def formulate(problem: Problem, mode: str, current: Current | None = None,
              shares: dict[int, dict[int, float]] | None = None) -> Formulation:
    """The model; in hashed mode with `shares` (pool -> switch -> its caches' share of the ring, see
    ring_shares), ring bytes a switch's readers get from its own caches stay off its uplink."""
    fm, readers = _empty(problem, mode)
    m = fm.model
    fm.shares = shares if mode == "hashed" and shares else {}
    pools, fleets = problem.pools, problem.fleets
    for s, sw in enumerate(problem.switches):
        for k, nc in enumerate(sw.classes):
            for p in sorted(nc.eligible):
                if cache_fits(pools[p], nc):
                    fm.caches[p, s, k] = m.var(0, min(nc.count, pools[p].max_hosts_per_switch), integer=True)
        for j, f in enumerate(fleets):
            if not f.replicas:
                continue
            slots = sum(nc.count * problem.slots(j, nc) for nc in sw.classes)
            if not slots:
                continue
            fm.local[j, s] = m.var(0, 0 if (mode == "hashed" and f.pool is not None) else slots, integer=True)
            if f.pool is not None:
                fm.ring[j, s] = m.var(0, slots, integer=True)

    by_fleet: dict[int, list[int]] = {}
    by_switch: dict[int, dict[int, list[int]]] = {}
    for (j, s), v in _workers(fm):
        by_fleet.setdefault(j, []).append(v)
        by_switch.setdefault(s, {}).setdefault(j, []).append(v)
    for j, f in enumerate(fleets):
        if f.replicas:
            fm.unplaced[j] = m.var(0, 0, integer=True)   # opened only when the cluster is too small
            m.row([(fm.unplaced[j], 1.0)] + [(v, 1.0) for v in by_fleet.get(j, [])], lb=f.replicas, ub=f.replicas)

    caches_by_switch: dict[int, list] = {}
    for (p, s, k), v in fm.caches.items():
        caches_by_switch.setdefault(s, []).append((p, k, v))
    prune = len(fm.integers()) > PRUNE_LIMIT
    recipes: dict = {}      # a node class's rows by what they depend on, shared by the switches alike
    for s, sw in enumerate(problem.switches):
        _switch_capacity(fm, s, by_switch.get(s, {}), caches_by_switch.get(s, []), prune, recipes)
        here = caches_by_switch.get(s, [])      # (pool, class, variable): rows linear in switches
        for k, nc in enumerate(sw.classes):
            hosts = [(v, 1.0) for _, kk, v in here if kk == k]
            if len(hosts) > 1:
                m.row(hosts, ub=nc.count)     # one cache per node
        for p, pool in enumerate(pools):
            hosts = [(v, 1.0) for pp, _, v in here if pp == p]
            if len(hosts) > 1:
                m.row(hosts, ub=pool.max_hosts_per_switch)

    _flows(fm, readers)
    if current is not None:
        _moves(fm, current)
    return fm


def formulate_fixed(problem: Problem, mode: str, counts: Current) -> Formulation:
    """The flows of a placement whose counts are all fixed (`counts`, which must pack on the nodes):
    a linear program over ring serving and reading only, what the ring weights of a placement are
    planned on. No capacity rows: a packing of the counts satisfies them. The routing flags follow
    from the counts (a switch with ring readers of a pool does not serve its ring in auto mode; one
    with a cache host of the pool has no ring readers in local mode), so no integer is left."""
    fm, readers = _empty(problem, mode)
    fm.fixed = True
    m = fm.model
    pools, fleets = problem.pools, problem.fleets
    # only what the placement holds: a count of 0 adds nothing to a flow (a switch without a cache of
    # the pool has only ring readers of it, as stay.stay_placement keeps them)
    for (p, s, k), n in sorted(counts.caches.items()):
        if n > 0 and cache_fits(pools[p], problem.switches[s].classes[k]):
            fm.caches[p, s, k] = m.var(n, n)
    for (j, s), n in sorted(counts.workers.items()):
        if n > 0 and fleets[j].replicas:
            fm.local[j, s] = m.var(n, n)
    for (j, s), n in sorted(counts.ring.items()):
        if n > 0 and fleets[j].replicas and fleets[j].pool is not None:
            fm.ring[j, s] = m.var(n, n)
    _flows(fm, readers)
    return fm


def _empty(problem: Problem, mode: str) -> tuple[Formulation, dict[int, list[int]]]:
    """A formulation with only its peak variable, and each pool's reading fleets."""
    if mode not in MODES:
        raise ValueError(f"routing must be one of {', '.join(MODES)}, not {mode!r}")
    fm = Formulation(problem, mode, LinearModel())
    fm.util = fm.model.var(0.0, 1.0)
    fleets = problem.fleets
    return fm, {p: [j for j, f in enumerate(fleets) if f.pool == p and f.replicas] for p in range(len(problem.pools))}


def _workers(fm: Formulation):
    yield from fm.local.items()
    yield from fm.ring.items()


def _switch_capacity(fm: Formulation, s: int, workers: dict[int, list[int]], caches: list, prune: bool,
                     recipes: dict) -> None:
    """CPU, memory, pods and NIC per node class, and node-level slots per fleet and class.

    Each fleet's workers on the switch are split over its node classes by
    continuous variables: the counts stay integral per switch (what the
    operator realises), while mixed node types (CPU-bound here, pod-bound
    there) are each held to their own capacity.

    prune: a fleet's slot row is left out where a capacity row implies it (the
    fleet's slots are the whole usable capacity over its size, and a cache pod
    takes no fewer): the same feasible set, and at 20,000 nodes 40% fewer rows
    for every LP and MILP to carry (PRUNE_LIMIT).
    """
    problem, m = fm.problem, fm.model
    sw = problem.switches[s]
    if not workers:
        return
    split: dict[tuple[int, int], int] = {}
    for j in sorted(workers):
        fits = [k for k, nc in enumerate(sw.classes) if problem.slots(j, nc)]
        if len(sw.classes) == 1:
            continue
        for k in fits:
            split[j, k] = fm.split[j, s, k] = m.var(0.0)
        m.row([(split[j, k], 1.0) for k in fits] + [(v, -1.0) for v in workers[j]], lb=0.0, ub=0.0)
    for k, nc in enumerate(sw.classes):
        hosts = [(p, v) for p, kk, v in caches if kk == k]
        placed = {j: ([(split[j, k], 1.0)] if (j, k) in split else []) if len(sw.classes) > 1
                  else [(v, 1.0) for v in workers[j]] for j in workers}
        in_class = tuple(j for j in placed if placed[j])
        key = (nc.cpu_millis, nc.memory_bytes, nc.pods, nc.nic_gbps, nc.count, nc.fleets, in_class,
               tuple(p for p, _ in hosts), prune)
        if key not in recipes:        # switches alike share them (20,000 nodes: 639 classes, 30 kinds)
            recipes[key] = _class_rows(problem, nc, in_class, [p for p, _ in hosts], prune)
        host_of = dict(hosts)
        for by_fleet, by_pool, ub in recipes[key]:
            m.row([(v, c * coef) for j, coef in by_fleet for v, c in placed[j]]
                  + [(host_of[p], coef) for p, coef in by_pool], ub=ub)


def _class_rows(problem: Problem, nc, fleets_here: tuple[int, ...], pools_here: list[int], prune: bool) -> list:
    """A node class's capacity, level and slot rows as (fleet -> coefficient per worker, pool ->
    coefficient per cache host, upper bound): what depends only on the class and who may be on it."""
    fleets, pools = problem.fleets, problem.pools
    out = []
    dims = (
        (lambda j: fleets[j].cpu_millis, lambda p: pools[p].cpu_millis, nc.cpu_millis),
        (lambda j: fleets[j].memory_bytes, lambda p: pools[p].memory_bytes, nc.memory_bytes),
        (lambda j: 1, lambda p: 1, nc.pods),
        (lambda j: problem.read(j, nc), lambda p: problem.fill(p, nc), nc.nic_gbps),
    )
    rows = []      # (worker size, usable capacity, pool -> a cache pod's coefficient) of each capacity row
    for worker_size, cache_size, capacity in dims:
        if not fleets_here:
            continue
        # Workers fill a node in multiples of their sizes' granule: what a node holds is its
        # capacity rounded down to it (with a cache pod, what the pod leaves rounded down).
        # Valid node by node, so summed over the class; it keeps the model from counting on
        # slivers no worker fits in (the packing found them missing, at great cost).
        g = granule([worker_size(j) for j in fleets_here])
        usable = _round_down(capacity, g)
        # scaled to the class capacity so HiGHS sees coefficients near 1
        scale = 1.0 / (capacity * nc.count)
        pod = {p: usable - _round_down(capacity - cache_size(p), g) for p in pools_here}
        out.append((tuple((j, worker_size(j) * scale) for j in fleets_here),
                    tuple((p, pod[p] * scale) for p in pools_here), usable * nc.count * scale))
        rows.append((worker_size, usable, pod))
        out += _levels(fleets_here, pools_here, worker_size, cache_size, capacity, nc)
    # Per fleet: workers fit node by node; a cache pod takes some of its node's slots.
    for j in fleets_here:
        alone = problem.slots(j, nc)
        taken = {p: alone - problem.slots(j, nc, cache_pool=p) for p in pools_here}
        if prune and any(_implies(size(j), usable, pod, alone, taken) for size, usable, pod in rows):
            continue
        out.append((((j, 1.0),), tuple(taken.items()), nc.count * alone))
    return out


def _implies(size: float, usable: float, pod: dict[int, float], alone: int, taken: dict[int, int]) -> bool:
    """Whether a capacity row (workers' sizes + pod[p] per cache host <= usable per node) implies a
    fleet's slot row (its workers + taken[p] per cache host <= alone per node): divided by the
    fleet's size, its bound is no looser and its every coefficient no smaller (all variables >= 0)."""
    return size > 0 and usable / size <= alone + 1e-9 and all(pod[p] / size >= t - 1e-9 for p, t in taken.items())


def _levels(fleets_here: tuple[int, ...], pools_here: list[int], worker_size, cache_size, capacity: float,
            nc) -> list:
    """Per size level: a node holds at most floor(capacity / level) workers of that size or more.

    What the aggregate capacity row cannot see: two 8-core workers and a 4-core one fill a
    24-core node's CPU as well as three 8-core ones would in aggregate, but only two of
    those fit a node. Valid node by node (a cache pod leaves floor((capacity - pod) / level)),
    so summed over the class. A level whose count the pods already cap adds nothing.
    Rows as _class_rows gives them.
    """
    out = []
    sizes = {j: worker_size(j) for j in fleets_here}
    for level in sorted(set(sizes.values())):
        most = math.floor(capacity / level + 1e-9)
        left = {p: max(0.0, capacity - cache_size(p)) / level for p in pools_here}
        if most >= nc.pods or all(abs(x - math.floor(x + 1e-9)) < 1e-9 for x in [capacity / level, *left.values()]):
            continue      # the pods row or the capacity row already says as much
        scale = 1.0 / (max(most, 1) * nc.count)
        out.append((tuple((j, scale) for j, size in sizes.items() if size >= level),
                    tuple((p, (most - math.floor(left[p] + 1e-9)) * scale) for p in pools_here),
                    most * nc.count * scale))
    return out


def granule(sizes) -> float:
    """The largest g of which every size is a whole multiple (0 if there is none worth using).

    Integers (CPU millis, memory bytes, pods) by their gcd; Gbps as thousandths."""
    scaled = [round(x * 1000) for x in sizes]
    if not scaled or any(x <= 0 or abs(x - y * 1000) > 1e-6 for x, y in zip(scaled, sizes)):
        return 0.0
    return math.gcd(*scaled) / 1000


def _round_down(capacity: float, g: float) -> float:
    if g <= 0:
        return capacity
    return max(0.0, math.floor(capacity / g + 1e-9) * g)


def _flows(fm: Formulation, readers: dict[int, list[int]]) -> None:
    problem, m, mode = fm.problem, fm.model, fm.mode
    pools, fleets = problem.pools, problem.fleets
    inbound: dict[int, list] = {s: [] for s in range(len(problem.switches))}
    outbound: dict[int, list] = {s: [] for s in range(len(problem.switches))}
    wan = []
    caches: dict[tuple[int, int], list[tuple[int, int]]] = {}     # (pool, switch) -> (class, variable)
    for (p, s, k), v in fm.caches.items():
        caches.setdefault((p, s), []).append((k, v))
    for p, pool in enumerate(pools):
        fixed = problem.outside_demand(p) if problem.outside else 0.0
        if not readers[p] and not fixed:
            continue
        demand_total = sum(fleets[j].replicas * fleets[j].read_gbps for j in readers[p]) + fixed
        replicas = sum(fleets[j].replicas for j in readers[p])
        share = fm.shares.get(p)
        total = None
        if share is not None:
            # the pool's ring reads in all; each switch's caches serve their fixed share of them
            total = m.var(0.0, demand_total)
        for s, sw in enumerate(problem.switches):
            hosts = [(v, problem.serve(p, sw.classes[k])) for k, v in caches.get((p, s), [])]
            w = share.get(s, 0.0) if share is not None else None
            local = [(fm.local[j, s], problem.switch_read(j, s)) for j in readers[p] if (j, s) in fm.local]
            ring = [(fm.ring[j, s], problem.switch_read(j, s)) for j in readers[p] if (j, s) in fm.ring]
            serve_max = sum(g * m.ub[v] for v, g in hosts)
            outside = problem.outside.get((p, s), 0.0) if fixed else 0.0
            if ring or outside:
                # the outside readers here read the ring too, a fixed demand beside the ring workers'
                a = fm.reads_ring[p, s] = m.var(0.0, demand_total)
                m.row([(a, 1.0)] + [(v, -r) for v, r in ring], ub=outside)
                # with fixed shares a ring reader's bytes from its own switch's caches do not cross
                inbound[s].append((a, 1.0 - (w or 0.0)))
                if w:
                    outbound[s].append((a, -w))
            if hosts:
                o = fm.ring_serve[p, s] = m.var(0.0, serve_max)
                if total is not None:
                    m.row([(o, 1.0), (total, -w)], lb=0.0, ub=0.0)
                served = [(o, 1.0)]
                if local:
                    l_ = fm.reads_local[p, s] = m.var(0.0, serve_max)
                    m.row([(l_, 1.0)] + [(v, -r) for v, r in local], ub=0.0)
                    served.append((l_, 1.0))
                m.row(served + [(v, -g) for v, g in hosts], ub=0.0)
                outbound[s].append((o, 1.0))
                inbound[s] += [(v, pool.miss_ratio) for v, _ in served]
                wan += [(v, pool.miss_ratio) for v, _ in served]
                if ring and mode in ("auto", "local"):
                    # big-M: as many ring readers as the switch could hold (not the pool's every reader)
                    _exclusive(fm, p, s, o, serve_max, hosts, ring, min(replicas, sum(m.ub[v] for v, _ in ring)))
                if local:
                    # local readers only next to a cache host of their pool
                    most = min(replicas, sum(m.ub[v] for v, _ in local))
                    m.row([(v, 1.0) for v, _ in local] + [(v, -most) for v, _ in hosts], ub=0.0)
            else:
                for v, _ in local:
                    m.ub[v] = 0.0      # no cache of the pool can be here: its workers read the ring
        reads = [(v, -1.0) for (pp, _), v in fm.reads_ring.items() if pp == p]
        if total is None:
            m.row([(v, 1.0) for (pp, _), v in fm.ring_serve.items() if pp == p] + reads, lb=0.0, ub=0.0)
        else:       # with fixed shares adding up to 1, the ring balances by construction
            m.row([(total, 1.0)] + reads, lb=0.0, ub=0.0)
    for s, sw in enumerate(problem.switches):
        for row in peak_rows(fm.util, sw.uplink_gbps, inbound[s], outbound[s]):
            m.row(row, ub=0.0)
    if wan:
        m.row([(v, c / problem.wan_gbps) for v, c in wan], ub=1.0)


def ring_shares(fm: Formulation, solution, by_capacity: bool = False) -> dict[int, dict[int, float]]:
    """pool -> switch -> the share of the pool's ring its caches served in `solution` (or, by_capacity,
    could serve), summing to 1; pools whose ring served nothing are left out."""
    out: dict[int, dict[int, float]] = {}
    problem = fm.problem
    if by_capacity:
        for (p, s, k), v in sorted(fm.caches.items()):
            hosts = round(float(solution.x[v]))
            if hosts and any(pp == p for pp, _ in fm.reads_ring):
                out.setdefault(p, {})
                out[p][s] = out[p].get(s, 0.0) + hosts * problem.serve(p, problem.switches[s].classes[k])
    for (p, s), v in sorted(fm.ring_serve.items()) if not by_capacity else ():
        served = max(0.0, float(solution.x[v]))
        if served > 1e-9:
            out.setdefault(p, {})[s] = served
    return {p: {s: g / sum(by.values()) for s, g in by.items()} for p, by in out.items()}


def _exclusive(fm: Formulation, p: int, s: int, ring_serve: int, serve_max: float, hosts, ring, replicas: int) -> None:
    """auto: ring serving and ring reading of one pool never share a switch.
    local: ring readers only where the pool has no cache."""
    m = fm.model
    if fm.fixed:
        # the counts decide the flag: auto serves the ring only without ring readers; local has
        # ring readers only without a cache host
        on = sum(m.ub[v] for v, _ in ring) == 0 if fm.mode == "auto" else sum(m.ub[v] for v, _ in hosts) > 0
        flag = m.var(float(on), float(on))
    else:
        flag = m.var(0, 1, integer=True)
    fm.flags.add(flag)
    if fm.mode == "auto":
        m.row([(ring_serve, 1.0), (flag, -serve_max)], ub=0.0)
    else:
        m.row([(v, 1.0) for v, _ in hosts] + [(flag, -sum(m.ub[v] for v, _ in hosts))], ub=0.0)
    m.row([(v, 1.0) for v, _ in ring] + [(flag, replicas)], ub=replicas)


def _moves(fm: Formulation, current: Current) -> None:
    """Moved pods: workers a switch loses, cache hosts not kept (lost ones are constant)."""
    m = fm.model
    # Local and ring readers separately: switching one's routing restarts it with a new endpoint.
    for counts, variables in ((current.workers, fm.local), (current.ring, fm.ring)):
        for key, count in sorted(counts.items()):
            if count <= 0:
                continue
            moved = m.var(0.0, count)
            m.row([(moved, 1.0)] + ([(variables[key], 1.0)] if key in variables else []), lb=count)
            fm.moves[moved] = 1.0
    for counts, variables in ((current.workers, fm.local), (current.ring, fm.ring), (current.caches, fm.caches)):
        for key, v in variables.items():
            fm.current[v] = int(min(counts.get(key, 0), m.ub[v]))
    for key, count in sorted(current.caches.items()):
        if count <= 0:
            continue
        moved = m.var(0.0, count)
        m.row([(moved, 1.0)] + ([(fm.caches[key], 1.0)] if key in fm.caches else []), lb=count)
        fm.moves[moved] = 1.0
