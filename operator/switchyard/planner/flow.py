"""What a placement delivers: the flow model every planner and baseline is judged by.

Routing is fixed by the placement, the throughput is not: each group of
readers reads as fast as its sources and the uplinks on the way let it.

- A *local* worker reads from the cache hosts of its pool on its own switch
  (through the switch's cache Service). A switch without such a host has no
  local cache, so its workers always read through the ring.
- A *ring* (hashed) worker reads each file from the cache host that rendezvous
  hashing picks (see hashing.py); with host weights w_h, a fraction
  w_h / sum(w) of its bytes comes from host h. So a switch's ring readers pull
  from each cache switch t in a fixed proportion omega_t, and the slowest
  source or uplink on the way caps the whole group (the GSI lesson: the
  slowest server sets the rate).
- Readers outside Kubernetes (spec.outsideReaders, Topology.outside) read
  like ring workers of their switch: fixed demand nobody places.
- Bytes from switch t to switch s != t load t's uplink outbound and s's
  inbound; the spine itself is non-blocking. Cache fills (missRatio of what a
  cache serves) enter the cache switch's uplink inbound and share the WAN.

The delivered Gbps is the largest total read rate the routing allows (an LP);
among flows that deliver it, the reported uplink loads are those with the
lowest peak utilisation. That is the bound plans are chosen by, not what TCP
flows find: where supply is short, the LP may give it to any readers (one
optimum among many), and it pools the caches of a switch. What competing
flows carry, per host and per uplink, is fairshare.py's prediction; compare
observed bytes with that. Both are link Gbps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..api.uplinkscore import SATURATED, peak_rows
from ..topology import Topology
from .lp import LinearModel
from .model import FleetRequest, Placement, PoolRequest, UplinkLoad
from .problem import GIB, fleet_pool_index, outside_pool_index


@dataclass(frozen=True)
class Flow:
    delivered_gbps: float
    demand_gbps: float
    uplinks: tuple[UplinkLoad, ...]
    served: Mapping[str, Mapping[str, float]]      # pool -> switch -> Gbps its caches serve
    bottleneck: str


def host_serve(topology: Topology, pools: list[PoolRequest], placement: Placement) -> dict[str, dict[str, float]]:
    """pool -> node -> the Gbps that cache host can serve."""
    nic = {h.name: h.nic_gbps for h in topology.hosts}
    return {
        pool.name: {n: min(nic[n], pool.body.planned_serve_gbps)
                    for nodes in placement.caches.get(pool.name, {}).values() for n in nodes if n in nic}
        for pool in pools
    }


def ring_weights(topology: Topology, pools: list[PoolRequest], placement: Placement,
                 weights: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, dict[str, float]]:
    """pool -> node -> rendezvous weight; by default proportional to what each host serves."""
    serve = host_serve(topology, pools, placement)
    out = {}
    for pool in pools:
        given = (weights or {}).get(pool.name)
        chosen = {n: float(given.get(n, 0.0)) for n in serve[pool.name]} if given else dict(serve[pool.name])
        if sum(chosen.values()) <= 0:
            chosen = dict(serve[pool.name])
        out[pool.name] = dict(sorted(chosen.items()))
    return out


def ring_readers(placement: Placement, fleet: str, switch: str, has_local_cache: bool) -> int:
    count = placement.workers.get(fleet, {}).get(switch, 0)
    if not has_local_cache:
        return count
    return min(count, placement.hashed.get(fleet, {}).get(switch, 0))


def worker_reads(topology: Topology, fleets: list[FleetRequest]) -> dict[str, dict[str, float]]:
    """fleet -> switch -> what one worker reads there: its readGbps, or if that is faster than every
    NIC behind the switch that could hold the worker, the fastest such NIC (a worker cannot read
    faster than its node's NIC). Only switches where the cap applies are listed."""
    out: dict[str, dict[str, float]] = {}
    slowest = min((h.nic_gbps for h in topology.hosts), default=0.0)
    for fleet in fleets:
        body = fleet.body
        out[fleet.name] = {}
        if body.read_gbps <= slowest:
            continue
        cpu, memory = body.cores * 1000, body.memory_gib * GIB
        for sw in topology.switches:
            fastest = max((h.nic_gbps for h in sw.hosts if h.cpu_millis >= cpu and h.memory_bytes >= memory), default=None)
            if fastest is not None and fastest < body.read_gbps:
                out[fleet.name][sw.name] = fastest
    return out


def evaluate(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], placement: Placement,
             weights: Mapping[str, Mapping[str, float]] | None = None) -> Flow:
    switches = [s.name for s in topology.switches]
    uplink = {s.name: s.uplink_gbps for s in topology.switches}
    switch_of = {h.name: h.switch for h in topology.hosts}
    serve = host_serve(topology, pools, placement)
    ring = ring_weights(topology, pools, placement, weights)

    cap = {p.name: {s: 0.0 for s in switches} for p in pools}       # cache serving per switch
    omega = {p.name: {s: 0.0 for s in switches} for p in pools}     # ring share per switch
    for pool in pools:
        for node, gbps in serve[pool.name].items():
            cap[pool.name][switch_of[node]] += gbps
        total = sum(ring[pool.name].values())
        for node, w in ring[pool.name].items():
            omega[pool.name][switch_of[node]] += w / total if total else 0.0

    read = worker_reads(topology, fleets)
    local_demand = {p.name: {s: 0.0 for s in switches} for p in pools}
    ring_demand = {p.name: {s: 0.0 for s in switches} for p in pools}
    total_demand = 0.0
    for fleet in fleets:
        index = fleet_pool_index(fleet, pools)
        if index is None:
            continue
        pool = pools[index].name
        for sw, count in placement.workers.get(fleet.name, {}).items():
            if sw not in uplink:
                continue
            hashed = ring_readers(placement, fleet.name, sw, cap[pool][sw] > 0)
            r = read[fleet.name].get(sw, fleet.body.read_gbps)
            local_demand[pool][sw] += (count - hashed) * r
            ring_demand[pool][sw] += hashed * r
            total_demand += count * r
    for group in topology.outside:
        # readers outside Kubernetes: fixed demand on their switch, through the pool's ring
        index = outside_pool_index(group, pools)
        if index is not None and group.switch in uplink:
            ring_demand[pools[index].name][group.switch] += group.demand_gbps
            total_demand += group.demand_gbps

    m = LinearModel()
    util = m.var(0.0, 1.0)
    local = {(p.name, s): m.var(0.0, min(local_demand[p.name][s], cap[p.name][s])) for p in pools for s in switches}
    # a pool without a cache host has no ring: its ring readers read nothing
    ringr = {(p.name, s): m.var(0.0, ring_demand[p.name][s] if sum(omega[p.name].values()) > 0 else 0.0)
             for p in pools for s in switches}
    miss = {p.name: p.body.miss_ratio for p in pools}
    inbound = {s: [] for s in switches}
    outbound = {s: [] for s in switches}
    wan = []
    for pool in pools:
        name = pool.name
        # the pool's ring reads in all (one variable, so each switch's rows stay short at 400 switches)
        total = m.var(0.0)
        m.row([(total, 1.0)] + [(ringr[name, s], -1.0) for s in switches], lb=0.0, ub=0.0)
        for t in switches:
            w = omega[name][t]
            # the cache hosts of t serve their local readers and their share of every ring reader
            m.row([(local[name, t], 1.0), (total, w)], ub=cap[name][t])
            # t sends its share of every other switch's ring reads: w * (total - t's own)
            outbound[t] += [(total, w), (ringr[name, t], -w)]
            inbound[t].append((ringr[name, t], 1.0 - w))
            served = [(local[name, t], 1.0), (total, w)]
            inbound[t] += [(v, c * miss[name]) for v, c in served]
            wan += [(v, c * miss[name]) for v, c in served]
    for s in switches:
        for row in peak_rows(util, uplink[s], inbound[s], outbound[s], in_gbps=True):
            m.row(_merge(row), ub=0.0)
    if wan:
        m.row(_merge(wan), ub=topology.wan_gbps)

    reads = {v: 1.0 for v in list(local.values()) + list(ringr.values())}
    best = m.solve(reads, maximise=True, relax=True)
    delivered = best.objective
    m.row(reads, lb=delivered - 1e-7 * max(1.0, delivered))
    calm = m.solve({util: 1.0}, relax=True)
    x = calm.x

    loads = []
    for s in switches:
        in_gbps = sum(c * x[v] for v, c in inbound[s])
        out_gbps = sum(c * x[v] for v, c in outbound[s])
        loads.append(UplinkLoad(s, uplink[s], round(max(0.0, float(in_gbps)), 3), round(max(0.0, float(out_gbps)), 3)))
    served = {}
    for pool in pools:
        ring_total = sum(x[ringr[pool.name, s]] for s in switches)
        served[pool.name] = {t: round(float(x[local[pool.name, t]] + omega[pool.name][t] * ring_total), 3)
                             for t in switches if cap[pool.name][t] > 0}
    delivered = float(sum(x[v] for v in reads))
    wan_used = sum(c * x[v] for v, c in wan)
    flow_bottleneck = bottleneck(delivered, total_demand, loads, served, cap, wan_used, topology.wan_gbps)
    return Flow(round(delivered, 3), round(total_demand, 3), tuple(loads), served, flow_bottleneck)


def bottleneck(delivered: float, demand: float, loads: list[UplinkLoad], served: Mapping[str, Mapping[str, float]],
               cap: Mapping[str, Mapping[str, float]], wan_used: float, wan_gbps: float) -> str:
    """What stops the placement delivering more, in words a facility admin uses."""
    if delivered >= demand * SATURATED - 1e-6:
        return "demand"
    full = [u.switch for u in loads if u.capacity_gbps and u.utilisation >= SATURATED]
    if full:
        return "uplink " + ",".join(full[:3]) + (f" (+{len(full) - 3})" if len(full) > 3 else "")
    if wan_used >= wan_gbps * SATURATED:
        return "wan"
    busy = [(p, s) for p, by in cap.items() for s, c in by.items() if c > 0]
    full = sorted({s for p, s in busy if served[p][s] >= cap[p][s] * SATURATED})
    if busy and len(full) == len({s for _, s in busy}):
        return "cache serving"
    if full:
        # Some caches saturate while others idle: the routing's fixed shares hold the rest back.
        return "caches on " + ",".join(full[:3]) + (f" (+{len(full) - 3})" if len(full) > 3 else "")
    return "readers without a reachable cache"


def _merge(terms: list[tuple[int, float]]) -> dict[int, float]:
    out: dict[int, float] = {}
    for v, c in terms:
        out[v] = out.get(v, 0.0) + c
    return out
