"""The planner's input reduced to numbers: switches, node classes, pools, fleets.

Nodes behind one switch that are interchangeable for placement (same NIC,
CPU, memory, pods and the same sets of pools they may host a cache for and
of fleets whose workers they may run, by labels and taints) form
one *class*; the solver decides counts per class, never per node, which keeps
the model small at thousands of nodes. Names and orders are sorted, so the
same input always builds the same model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..api import reasons
from ..api.units import MIN_GBPS
from ..api.xcachepool import EXPORTER_REQUESTS
from ..topology import Host, OutsideGroup, Topology, parse_quantity
from .model import FleetRequest, PoolRequest, Unsatisfiable

GIB = 1024**3


@dataclass(frozen=True)
class PoolSpec:
    name: str
    serve_gbps: float
    miss_ratio: float
    max_hosts_per_switch: int
    cpu_millis: int            # the cache pod's request
    memory_bytes: int


@dataclass(frozen=True)
class FleetSpec:
    name: str
    pool: int | None           # index into Problem.pools; None: no pool to read from
    replicas: int
    cpu_millis: int
    memory_bytes: int
    read_gbps: float


@dataclass(frozen=True)
class NodeClass:
    """Interchangeable nodes behind one switch."""

    nodes: tuple[str, ...]     # sorted names
    nic_gbps: float
    cpu_millis: int
    memory_bytes: int
    pods: int
    eligible: frozenset[int]   # pools this class may host a cache for
    fleets: frozenset[int]     # fleets whose workers may run here (their tolerations admit its taints)

    @property
    def count(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    uplink_gbps: float
    classes: tuple[NodeClass, ...]


@dataclass(frozen=True)
class Problem:
    switches: tuple[SwitchSpec, ...]
    pools: tuple[PoolSpec, ...]
    fleets: tuple[FleetSpec, ...]
    wan_gbps: float
    # (pool, switch) -> what the readers outside Kubernetes there read through the pool's ring, Gbps:
    # fixed demand (spec.outsideReaders), no node capacity
    outside: dict[tuple[int, int], float] = field(default_factory=dict)
    _slots: dict = field(default_factory=dict, compare=False, repr=False)   # memo of slots()
    _memo: dict = field(default_factory=dict, compare=False, repr=False)    # memo of switch_read() and nic_of()

    def outside_demand(self, pool: int) -> float:
        """What the readers outside Kubernetes read through the pool, Gbps."""
        return sum(g for (p, _), g in self.outside.items() if p == pool)

    def serve(self, pool: int, node_class: NodeClass) -> float:
        """What one cache host of `pool` on a node of this class can serve."""
        return min(node_class.nic_gbps, self.pools[pool].serve_gbps)

    def fill(self, pool: int, node_class: NodeClass) -> float:
        """Origin traffic entering a cache host's NIC when it serves flat out."""
        return self.pools[pool].miss_ratio * self.serve(pool, node_class)

    def read(self, fleet: int, node_class: NodeClass) -> float:
        """What one worker of `fleet` reads on a node of the class: its readGbps, or the NIC if that is
        slower. It takes that much of the node's NIC (a worker faster than the NIC has the node's NIC
        to itself)."""
        return min(self.fleets[fleet].read_gbps, node_class.nic_gbps)

    def switch_read(self, fleet: int, s: int) -> float:
        """What one worker of `fleet` reads behind switch s: on the fastest node class that holds one."""
        key = ("read", fleet, s)
        if key not in self._memo:
            reads = [self.read(fleet, nc) for nc in self.switches[s].classes if self.slots(fleet, nc)]
            self._memo[key] = max(reads, default=self.fleets[fleet].read_gbps)
        return self._memo[key]

    def class_of(self, node: str) -> NodeClass:
        if not self._memo.get("classes"):
            self._memo["classes"] = {n: nc for sw in self.switches for nc in sw.classes for n in nc.nodes}
        return self._memo["classes"][node]

    def nic_of(self, node: str) -> float:
        return self.class_of(node).nic_gbps

    def slots(self, fleet: int, node_class: NodeClass, cache_pool: int | None = None) -> int:
        """Workers of `fleet` one node of the class holds (alone), optionally next to a cache."""
        # keyed by what the count depends on: classes alike on every switch are counted once
        key = (fleet, cache_pool, fleet in node_class.fleets, node_class.cpu_millis, node_class.memory_bytes,
               node_class.pods, node_class.nic_gbps)
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = self._count_slots(fleet, node_class, cache_pool)
        return slots

    def _count_slots(self, fleet: int, node_class: NodeClass, cache_pool: int | None) -> int:
        if fleet not in node_class.fleets:
            return 0
        f = self.fleets[fleet]
        cpu, mem, pods, nic = node_class.cpu_millis, node_class.memory_bytes, node_class.pods, node_class.nic_gbps
        if cache_pool is not None:
            p = self.pools[cache_pool]
            cpu, mem, pods, nic = cpu - p.cpu_millis, mem - p.memory_bytes, pods - 1, nic - self.fill(cache_pool, node_class)
        if min(cpu, mem, pods) < 0 or nic < 0:
            return 0
        return int(min(cpu // f.cpu_millis, mem // f.memory_bytes, pods, nic // self.read(fleet, node_class) + 1e-9))


def cache_fits(pool: PoolSpec, node_class: NodeClass) -> bool:
    return pool.cpu_millis <= node_class.cpu_millis and pool.memory_bytes <= node_class.memory_bytes and node_class.pods >= 1


def pool_spec(pool: PoolRequest) -> PoolSpec:
    body = pool.body
    return PoolSpec(
        name=pool.name, serve_gbps=body.planned_serve_gbps, miss_ratio=body.miss_ratio,
        max_hosts_per_switch=body.max_hosts_per_switch,
        # The pod's footprint as the scheduler counts it: xrootd and its exporter.
        cpu_millis=int((parse_quantity(body.resources.cpu) + parse_quantity(EXPORTER_REQUESTS["cpu"])) * 1000),
        memory_bytes=int(parse_quantity(body.resources.memory) + parse_quantity(EXPORTER_REQUESTS["memory"])),
    )


def fleet_pool_index(fleet: FleetRequest, pools: list[PoolRequest]) -> int | None:
    """The pool a fleet reads through: its own choice, else the facility's first pool."""
    return _pool_index(fleet.pool, pools, f"fleet {fleet.name}", fleet.name)


def outside_pool_index(group: OutsideGroup, pools: list[PoolRequest]) -> int | None:
    """The pool outside readers read through: their own choice, else the facility's first pool (as a fleet's)."""
    return _pool_index(group.pool, pools, f"outside readers {group.name}")


def _pool_index(wanted: str | None, pools: list[PoolRequest], who: str, fleet: str | None = None) -> int | None:
    if not pools:
        return None
    if wanted is None:
        return 0
    for i, pool in enumerate(pools):
        if pool.name == wanted:
            return i
    raise Unsatisfiable(reasons.UNKNOWN_POOL,
                        f"{who}: pool {wanted!r} is not one of the facility's cache pools "
                        f"({', '.join(p.name for p in pools)})", fleet=fleet)


def outside_demand(topology: Topology, pools: list[PoolRequest]) -> dict[tuple[int, int], float]:
    """(pool, switch index in the sorted switches) -> Gbps the outside readers there read through the pool."""
    index = {name: s for s, name in enumerate(sorted(sw.name for sw in topology.switches))}
    out: dict[tuple[int, int], float] = {}
    for group in topology.outside:
        if group.switch not in index:
            raise Unsatisfiable(reasons.INVALID_SPEC,
                                f"outside readers {group.name}: switch {group.switch!r} is not one of "
                                "spec.network.switches")
        p = outside_pool_index(group, pools)
        if p is not None:
            key = (p, index[group.switch])
            out[key] = out.get(key, 0.0) + group.demand_gbps
    return out


def host_eligible(host: Host, pool: PoolRequest) -> bool:
    """Whether a pool's cache may run on the host: NVMe, its nodeSelector, its tolerations admit the taints."""
    body = pool.body
    return host.has_nvme(body.nvme_label) and host.matches(body.node_selector) and host.admits(body.tolerations)


def worker_eligible(host: Host, fleet: FleetRequest) -> bool:
    """Whether a fleet's workers may run on the host: its tolerations admit the host's taints."""
    return host.admits(fleet.body.tolerations)


def _check_numbers(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest]) -> None:
    """Every capacity and demand at least MIN_GBPS and finite, as the schema admits them: below, the model's
    coefficients leave what HiGHS solves (an uplink of 5e-324 Gbps gave a plan without a fleet's workers).
    A topology built around the schema (a file, a test) is refused with the number named, not planned."""
    for fleet in fleets:
        _floor(fleet.body.read_gbps, f"fleet {fleet.name}: readGbps", fleet.name)
    for group in topology.outside:
        _floor(group.read_gbps, f"outside readers {group.name}: readGbps")
    for pool in pools:
        _floor(pool.body.serve_gbps, f"pool {pool.name}: serveGbps")
    _floor(topology.wan_gbps, "the WAN (spec.network.wanGbps)")
    for sw in topology.switches:
        _floor(sw.uplink_gbps, f"switch {sw.name}: uplinkGbps")
        for host in sw.hosts:
            _floor(host.nic_gbps, f"node {host.name}: its NIC")


def _floor(value: float, what: str, fleet: str | None = None) -> None:
    if not (math.isfinite(value) and value >= MIN_GBPS):
        raise Unsatisfiable(reasons.DEGENERATE_CAPACITY,
                            f"{what} is {value:g} Gbps: the planner takes {MIN_GBPS:g} Gbps "
                            "and more (and finite)", fleet=fleet)


def build_problem(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest]) -> Problem:
    _check_numbers(topology, pools, fleets)
    pool_specs = tuple(pool_spec(p) for p in pools)
    fleet_specs = tuple(
        FleetSpec(name=f.name, pool=fleet_pool_index(f, pools), replicas=f.body.replicas,
                  cpu_millis=f.body.cores * 1000, memory_bytes=max(1, int(f.body.memory_gib * GIB)), read_gbps=f.body.read_gbps)
        for f in fleets
    )
    switches = []
    # Eligibility depends only on the labels the pools look at and the taints: worked out once per
    # distinct pair (20,000 nodes have a handful), not per host and pool and fleet.
    looked_at = sorted({p.body.nvme_label for p in pools} | {k for p in pools for k in p.body.node_selector})
    seen: dict[tuple, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for sw in sorted(topology.switches, key=lambda s: s.name):
        groups: dict[tuple, list[str]] = {}
        for host in sw.hosts:
            sig = (tuple(host.labels.get(k) for k in looked_at), tuple((t.key, t.value, t.effect) for t in host.taints))
            if sig not in seen:
                seen[sig] = (tuple(i for i, p in enumerate(pools) if host_eligible(host, p)),
                             tuple(j for j, f in enumerate(fleets) if worker_eligible(host, f)))
            eligible, runs = seen[sig]
            key = (host.nic_gbps, host.cpu_millis, host.memory_bytes, host.pods, eligible, runs)
            groups.setdefault(key, []).append(host.name)
        classes = tuple(
            NodeClass(nodes=tuple(sorted(names)), nic_gbps=k[0], cpu_millis=k[1], memory_bytes=k[2], pods=k[3],
                      eligible=frozenset(k[4]), fleets=frozenset(k[5]))
            for k, names in sorted(groups.items(), key=lambda kv: min(kv[1]))
        )
        switches.append(SwitchSpec(sw.name, sw.uplink_gbps, classes))
    problem = Problem(tuple(switches), pool_specs, fleet_specs, topology.wan_gbps,
                      outside=outside_demand(topology, pools))
    _check_satisfiable(problem)
    return problem


def _check_satisfiable(problem: Problem) -> None:
    """The two impossibilities no objective can trade away (same reasons as the spread planner)."""
    for i, pool in enumerate(problem.pools):
        if not any(i in c.eligible and cache_fits(pool, c) for s in problem.switches for c in s.classes) \
                or pool.max_hosts_per_switch == 0:
            raise Unsatisfiable(reasons.NO_ELIGIBLE_CACHE_NODES,
                                f"pool {pool.name}: no schedulable node with its NVMe label (and matching its "
                                f"nodeSelector and tolerations, with room for the cache pod) on any of the facility's switches")
    for j, fleet in enumerate(problem.fleets):
        if fleet.replicas and not any(problem.slots(j, c) for s in problem.switches for c in s.classes):
            raise Unsatisfiable(reasons.NO_NODE_FITS_WORKER,
                                f"fleet {fleet.name}: no node its tolerations admit has {fleet.cpu_millis // 1000} cores, "
                                f"{fleet.memory_bytes / GIB:g} GiB and a pod free for one worker",
                                fleet=fleet.name)
