"""What stands between a plan and the facility's target, and what would raise it, in an admin's words.

One sentence, the same wherever a plan is shown (`switchyard plan`, and the facility's status): the
target beside the prediction, the binding constraint named with its figures (which uplink in which
direction, which hosts, the WAN, the workers' demand), and the change that would lift it.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..api import uplinkscore
from ..api.uplinkscore import SATURATED
from ..topology import Topology
from .model import FairShare, FleetRequest, Plan, PoolRequest
from .problem import host_eligible


def _gbps(value: float) -> str:
    """A figure for people: whole Gbps from 10 up, one decimal below."""
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}".rstrip("0").rstrip(".")


def _names(items: Sequence[str], most: int = 3) -> str:
    return ", ".join(items[:most]) + (f" (+{len(items) - most})" if len(items) > most else "")


def link_words(link: str) -> str:
    """A fair-share link id ('up_in:rack-a', 'serve:xcache:host', 'nic:host', 'wan') as an admin names it."""
    kind, _, rest = link.partition(":")
    direction = uplinkscore.link_direction(link)
    if direction is not None:
        return f"{rest} uplink {'into' if direction == uplinkscore.IN else 'out of'} the switch"
    if kind == "serve":
        return f"cache host {rest.rpartition(':')[2]} serving"
    if kind == "nic":
        return f"cache host {rest} NIC"
    return "the WAN" if link == "wan" else link


def full_uplinks(result: Plan) -> list[str]:
    """Each full uplink direction in words: 'rack-b uplink into the switch (80 of 80 Gbps)'."""
    out = []
    for load in result.uplinks:
        for direction, gbps in load.by_direction:
            if uplinkscore.full(gbps, load.capacity_gbps):
                words = link_words(uplinkscore.link(direction, load.switch))
                out.append(f"{words} ({_gbps(gbps)} of {_gbps(load.capacity_gbps)} Gbps)")
    return out


def full_both_ways(fair: FairShare) -> tuple[str, ...]:
    """Switches whose uplink the fair share fills in both directions at once. There the ACKs of one
    direction's flows wait behind the other direction's data; cache nodes that send with TCP BBR leave
    such an uplink short of full (0.75-0.86 of it on real pods, CUBIC 0.94-0.99:
    bench/notes/fabric-real-two-way.md)."""
    full = set(fair.saturated)
    return tuple(sorted(s for s in fair.uplinks if all(uplinkscore.link(d, s) in full for d in uplinkscore.DIRECTIONS)))


def _remedy(result: Plan, topology: Topology, pools: Sequence[PoolRequest], fleets: Sequence[FleetRequest],
            short: float) -> str:
    bottleneck = result.bottleneck
    if bottleneck == "demand" and result.unplaced:
        left = sum(result.unplaced.values())
        return (f"{left} workers fit on no node ({_names([f'{f} {n}' for f, n in sorted(result.unplaced.items())])}): "
                "more nodes with free CPU and memory, or smaller workers that each read more")
    if bottleneck == "demand":
        workers = sum(sum(by.values()) for by in result.placement.workers.values())
        # the readers outside Kubernetes are demand too, but not the fleets' to raise
        outside = sum(g.demand_gbps for g in topology.outside)
        demand = result.demand_gbps - outside
        per_worker = demand / workers if workers else max((f.body.read_gbps for f in fleets), default=0.0)
        needed = math.ceil(short / per_worker - 1e-9) if per_worker else 0  # 100 / (100 / 75) is 75, not 76
        more = f"about {needed} more workers at {_gbps(per_worker)} Gbps each" if per_worker else "workers"
        beside = (f", beside {sum(g.count for g in topology.outside)} outside readers reading {_gbps(outside)} Gbps"
                  if outside else "")
        return (f"the workers' demand binds ({workers} workers read {_gbps(demand)} Gbps{beside}): "
                f"raise the fleets' replicas or readGbps ({more})")
    if bottleneck.startswith("uplink"):
        return (f"full uplinks: {'; '.join(full_uplinks(result)[:3])}: fewer bytes across them (readers beside "
                "their caches, routing local; warmer caches, as a lower missRatio, for the fills coming in) or "
                "faster uplinks")
    if bottleneck == "wan":
        return (f"the WAN binds ({_gbps(topology.wan_gbps)} Gbps of cache fills from the origin): warmer caches "
                "(a lower missRatio) or a faster WAN")
    hosts = sorted(h for by in result.placement.caches.values() for hs in by.values() for h in hs)
    if bottleneck == "cache serving":
        caps = sorted({_gbps(p.body.serve_gbps) for p in pools})
        return (f"every cache host serves at its cap ({len(hosts)} hosts, serveGbps {'/'.join(caps)}): more cache hosts "
                "(NVMe nodes) or a higher serveGbps where their NICs allow")
    if bottleneck.startswith("caches on "):
        return (f"the {bottleneck} serve at their cap while others have room: more cache hosts there, or routing "
                "hashed to spread the reads")
    return f"{bottleneck}: give every switch with readers a reachable cache"


def shortfall(target_gbps: float, result: Plan, topology: Topology, pools: Sequence[PoolRequest],
              fleets: Sequence[FleetRequest]) -> str:
    """The plan against the target, and what binds it when it falls short."""
    if result.predicted_gbps >= target_gbps * SATURATED:
        return f"target {_gbps(target_gbps)} Gbps: met (predicted {_gbps(result.predicted_gbps)} Gbps)"
    short = target_gbps - result.predicted_gbps
    return (f"target {_gbps(target_gbps)} Gbps, predicted {_gbps(result.predicted_gbps)} Gbps "
            f"({_gbps(short)} short): {_remedy(result, topology, pools, fleets, short)}")


NEAR_CAP = 0.9  # hosts serving this share of their cap deliver less than predicted (docs/design.md: serveHeadroom)


def idle_cache_nodes(result: Plan, topology: Topology, pools: Sequence[PoolRequest]) -> list[str]:
    """Switches whose cache hosts serve near their cap in the fair share while a node there that could host
    the pool holds no cache: why the plan left it so, and what spreads the load."""
    if not result.fair:
        return []
    caching = {h for by in result.placement.caches.values() for hosts in by.values() for h in hosts}
    notes = []
    for pool in pools:
        for switch in topology.switches:
            placed = result.placement.caches.get(pool.name, {}).get(switch.name, ())
            hosts = [h for h in switch.hosts if h.name in placed] if placed else []
            if not hosts:
                continue
            free = [h.name for h in switch.hosts if h.name not in caching and host_eligible(h, pool)]
            if not free:
                continue
            peak = max(result.fair.served.get(h.name, 0.0) / min(h.nic_gbps, pool.body.serve_gbps) for h in hosts)
            if peak < NEAR_CAP:
                continue
            limit = len(hosts) >= pool.body.max_hosts_per_switch
            why = (f"its maxHostsPerSwitch ({pool.body.max_hosts_per_switch}) is reached" if limit else
                   "another host there would not raise the total the plan is chosen by")
            notes.append(f"switch {switch.name}: pool {pool.name}'s {len(hosts)} cache host(s) serve up to "
                         f"{100 * peak:.0f}% of their cap while {len(free)} node(s) that could host it hold no cache "
                         f"({_names(free)}): {why}; hosts near their cap deliver less than predicted, so a "
                         f"serveHeadroom of about {1 - NEAR_CAP + 0.05:.2f} on the pool plans them below it and "
                         "spreads the reads over more hosts")
    return notes
