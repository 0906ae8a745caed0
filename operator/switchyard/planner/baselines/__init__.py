"""Baselines the switch-aware plan is measured against, judged by the same flow model.

- `default_scheduler`: what Kubernetes does without switchyard. Cache pods go
  to eligible NVMe nodes with no regard for switches; workers are spread by
  the default scheduler's least-allocated scoring (the emptiest node that
  fits, ties by name), ignoring the network; every client hashes over all
  caches, weighted by what each serves.
- `random_placement`: a seeded random eligible placement: caches on random
  eligible nodes, each worker on a random node with room; workers read their
  switch's caches where there are any, the ring elsewhere.
- `spread_baseline`: the spine planner (spread.py) re-judged by the flow model.
  It ignores node capacity, so its placement may not fit.

All are deterministic (the random one through its seed) and report the same
LP bound as the solver, so every ratio in the bench is against one number.
"""

from __future__ import annotations

import heapq
import random

from ...topology import Topology
from . import spread
from ..flow import evaluate
from ..model import FleetRequest, Plan, PoolRequest
from ..packing import worker_size
from ..problem import Problem, build_problem, cache_fits
from ..realise import to_placement
from ..stages import upper_bound


def default_scheduler(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest],
                      bound: float | None = None) -> Plan:
    problem = build_problem(topology, pools, fleets)
    cache_nodes = _caches(problem, pick=lambda nodes, n: nodes[:n])
    workers = _least_allocated(problem, cache_nodes)
    hashed = dict(workers)   # every client hashes over all caches
    return _judge(topology, pools, fleets, problem, cache_nodes, workers, hashed, "default-scheduler", bound, "hashed")


def random_placement(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], seed: int = 0,
                     bound: float | None = None) -> Plan:
    rng = random.Random(seed)
    problem = build_problem(topology, pools, fleets)
    cache_nodes = _caches(problem, pick=lambda nodes, n: sorted(rng.sample(nodes, n)))
    workers = _random_workers(problem, cache_nodes, rng)
    return _judge(topology, pools, fleets, problem, cache_nodes, workers, {}, f"random(seed={seed})", bound, None)


def spread_baseline(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest],
                    bound: float | None = None) -> Plan:
    placed = spread.plan(topology, pools, fleets)
    flow = evaluate(topology, pools, fleets, placed.placement)
    if bound is None:
        bound = upper_bound(build_problem(topology, pools, fleets))
    return Plan(placement=placed.placement, routing=placed.routing, uplinks=flow.uplinks,
                predicted_gbps=flow.delivered_gbps, bound_gbps=round(bound, 3), bottleneck=flow.bottleneck,
                planner=spread.NAME, demand_gbps=flow.demand_gbps)


def _caches(problem: Problem, pick) -> dict[tuple[int, int], tuple[str, ...]]:
    """As many cache hosts per pool as its per-switch caps allow, on nodes `pick` chooses."""
    taken: set[str] = set()
    out: dict[tuple[int, int], tuple[str, ...]] = {}
    for p, pool in enumerate(problem.pools):
        wanted = 0
        candidates = []
        for sw in problem.switches:
            eligible = [n for c in sw.classes if p in c.eligible and cache_fits(pool, c) for n in c.nodes]
            wanted += min(len(eligible), pool.max_hosts_per_switch)
            candidates += eligible
        candidates = sorted(n for n in candidates if n not in taken)
        chosen = pick(candidates, min(wanted, len(candidates)))
        taken.update(chosen)
        switch_of = {n: s for s, sw in enumerate(problem.switches) for c in sw.classes for n in c.nodes}
        for n in chosen:
            out.setdefault((p, switch_of[n]), ())
            out[p, switch_of[n]] += (n,)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def _runs(problem: Problem, fleet: int) -> set[str]:
    """The nodes a fleet's workers may run on (problem.worker_eligible, through the node classes)."""
    return {n for sw in problem.switches for c in sw.classes if fleet in c.fleets for n in c.nodes}


def _room(problem: Problem, cache_nodes) -> dict[str, list[float]]:
    """Free CPU, memory, pods, NIC per node after the cache pods."""
    free = {}
    for sw in problem.switches:
        for c in sw.classes:
            for n in c.nodes:
                free[n] = [c.cpu_millis, c.memory_bytes, c.pods, c.nic_gbps, c.cpu_millis, c.memory_bytes]
    for (p, s), nodes in cache_nodes.items():
        pool = problem.pools[p]
        for n in nodes:
            c = next(c for c in problem.switches[s].classes if n in c.nodes)
            room = free[n]
            room[0] -= pool.cpu_millis
            room[1] -= pool.memory_bytes
            room[2] -= 1
            room[3] -= problem.fill(p, c)
    return free


def _fits(room: list[float], size: tuple) -> bool:
    return all(room[i] >= size[i] - 1e-9 for i in range(4))


def _take(room: list[float], size: tuple) -> None:
    for i in range(4):
        room[i] -= size[i]


def _least_allocated(problem: Problem, cache_nodes) -> dict[tuple[int, int], int]:
    free = _room(problem, cache_nodes)
    switch_of = {n: s for s, sw in enumerate(problem.switches) for c in sw.classes for n in c.nodes}

    def used(n: str) -> float:
        room = free[n]
        return ((1 - room[0] / room[4]) + (1 - room[1] / room[5])) / 2

    workers: dict[tuple[int, int], int] = {}
    for j, f in enumerate(problem.fleets):
        runs = _runs(problem, j)
        heap = [(used(n), n) for n in sorted(free) if n in runs and _fits(free[n], worker_size(problem, j, n))]
        heapq.heapify(heap)
        for _ in range(f.replicas):
            if not heap:
                break
            _, n = heapq.heappop(heap)
            _take(free[n], worker_size(problem, j, n))
            key = (j, switch_of[n])
            workers[key] = workers.get(key, 0) + 1
            if _fits(free[n], worker_size(problem, j, n)):
                heapq.heappush(heap, (used(n), n))
    return workers


def _random_workers(problem: Problem, cache_nodes, rng: random.Random) -> dict[tuple[int, int], int]:
    free = _room(problem, cache_nodes)
    switch_of = {n: s for s, sw in enumerate(problem.switches) for c in sw.classes for n in c.nodes}
    workers: dict[tuple[int, int], int] = {}
    for j, f in enumerate(problem.fleets):
        runs = _runs(problem, j)
        open_nodes = [n for n in sorted(free) if n in runs and _fits(free[n], worker_size(problem, j, n))]
        for _ in range(f.replicas):
            if not open_nodes:
                break
            i = rng.randrange(len(open_nodes))
            n = open_nodes[i]
            _take(free[n], worker_size(problem, j, n))
            key = (j, switch_of[n])
            workers[key] = workers.get(key, 0) + 1
            if not _fits(free[n], worker_size(problem, j, n)):
                open_nodes[i] = open_nodes[-1]
                open_nodes.pop()
    return workers


def _judge(topology, pools, fleets, problem, cache_nodes, workers, hashed, name, bound, mode) -> Plan:
    placement = to_placement(problem, cache_nodes, workers, hashed)
    flow = evaluate(topology, pools, fleets, placement)
    if bound is None:
        bound = upper_bound(problem)
    switches = [sw.name for sw in problem.switches]
    ring = {s for by in placement.hashed.values() for s, n in by.items() if n}
    routing = {s: mode or ("hashed" if s in ring else "local") for s in switches}
    placed = {f.name: sum(placement.workers.get(f.name, {}).values()) for f in problem.fleets}
    return Plan(placement=placement, routing=routing, uplinks=flow.uplinks, predicted_gbps=flow.delivered_gbps,
                bound_gbps=round(bound, 3), bottleneck=flow.bottleneck, planner=name, demand_gbps=flow.demand_gbps,
                unplaced={f.name: f.replicas - placed[f.name] for f in problem.fleets if f.replicas > placed[f.name]})

