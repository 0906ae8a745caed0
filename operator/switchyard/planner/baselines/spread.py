"""The spine's planner: caches on every eligible NVMe node, workers spread evenly.

It ignores uplinks when placing; it still predicts their load, so its plans
can be compared with the switch-aware planner's.
"""

from __future__ import annotations

from ...api import reasons
from ...topology import Host, Topology
from ..model import FleetRequest, Placement, Plan, PoolRequest, Unsatisfiable, UplinkLoad
from ..problem import host_eligible, worker_eligible

NAME = "spread"
_GIB = 1024**3


def eligible_cache_hosts(topology: Topology, pool: PoolRequest) -> dict[str, tuple[Host, ...]]:
    """Per switch, the hosts a pool's caches may use (NVMe, selector, tolerations)."""
    return {s.name: tuple(h for h in s.hosts if host_eligible(h, pool)) for s in topology.switches}


def fits_worker(host: Host, fleet: FleetRequest) -> bool:
    return worker_eligible(host, fleet) and host.cpu_millis >= fleet.body.cores * 1000 and host.memory_bytes >= fleet.body.memory_gib * _GIB


def plan(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], routing: str = "auto",
         current: Placement | None = None) -> Plan:
    caches: dict[str, dict[str, tuple[str, ...]]] = {}
    for pool in pools:
        eligible = eligible_cache_hosts(topology, pool)
        chosen = {sw: tuple(h.name for h in hosts[: pool.body.max_hosts_per_switch]) for sw, hosts in eligible.items()}
        if not any(chosen.values()):
            raise Unsatisfiable(reasons.NO_ELIGIBLE_CACHE_NODES,
                                f"pool {pool.name}: no schedulable node labelled {pool.body.nvme_label} "
                                f"(and matching its nodeSelector) on any of the facility's switches")
        caches[pool.name] = {sw: nodes for sw, nodes in chosen.items() if nodes}

    workers: dict[str, dict[str, int]] = {}
    for fleet in fleets:
        switches = [s.name for s in topology.switches if any(fits_worker(h, fleet) for h in s.hosts)]
        if not switches:
            if fleet.body.replicas == 0:
                workers[fleet.name] = {}
                continue
            raise Unsatisfiable(reasons.NO_NODE_FITS_WORKER,
                                f"fleet {fleet.name}: no node has {fleet.body.cores} cores and "
                                f"{fleet.body.memory_gib} GiB free for one worker", fleet=fleet.name)
        base, extra = divmod(fleet.body.replicas, len(switches))
        counts = {sw: base + (1 if i < extra else 0) for i, sw in enumerate(switches)}
        workers[fleet.name] = {sw: n for sw, n in counts.items() if n}

    placement = Placement(caches=caches, workers=workers)
    return _predict(topology, pools, fleets, placement, routing, current)


def _predict(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], placement: Placement,
             routing: str, current: Placement | None) -> Plan:
    """Local-first flow: each switch's workers read local caches, the rest crosses uplinks."""
    by_name = {h.name: h for h in topology.hosts}
    serve = {s.name: 0.0 for s in topology.switches}
    miss = {s.name: 0.0 for s in topology.switches}
    for pool in pools:
        for sw, nodes in placement.caches.get(pool.name, {}).items():
            for n in nodes:
                serve[sw] += min(by_name[n].nic_gbps, pool.body.planned_serve_gbps)
                miss[sw] = max(miss[sw], pool.body.miss_ratio)
    demand = {s.name: 0.0 for s in topology.switches}
    for fleet in fleets:
        for sw, n in placement.workers.get(fleet.name, {}).items():
            demand[sw] += n * fleet.body.read_gbps
    local = {sw: min(demand[sw], serve[sw]) for sw in serve}
    spare = {sw: serve[sw] - local[sw] for sw in serve}
    want = {sw: demand[sw] - local[sw] for sw in serve}
    total_spare, total_want = sum(spare.values()), sum(want.values())
    remote = min(total_spare, total_want)
    loads = []
    for s in topology.switches:
        inbound = want[s.name] / total_want * remote if total_want else 0.0
        outbound = spare[s.name] / total_spare * remote if total_spare else 0.0
        served = local[s.name] + outbound
        inbound += served * miss[s.name]
        loads.append(UplinkLoad(s.name, s.uplink_gbps, round(inbound, 3), round(outbound, 3)))
    delivered = sum(local.values()) + remote
    total_demand = sum(demand.values())
    bound = min(total_demand, sum(serve.values()))
    bottleneck = "demand" if delivered >= total_demand else "cache serving"
    return Plan(
        placement=placement,
        routing={s.name: ("hashed" if routing == "hashed" else "local") for s in topology.switches},
        uplinks=tuple(loads),
        predicted_gbps=round(delivered, 3),
        bound_gbps=round(bound, 3),
        bottleneck=bottleneck,
        planner=NAME,
        moves=placement.moves_from(current),
    )
