"""What competing TCP flows deliver with a placement: the max-min fair share beside the LP optimum.

flow.py computes the most a placement's routing allows (an LP): the figure
plans are chosen and bounded by. Readers do not find that optimum. Each is a
TCP flow, and flows through a full link share it alike, so where supply is
short the LP's split (one optimum among many) is not what the links carry.
The emulated fabric measured it (bench/notes/fabric-notes.md): per-uplink
loads off by 13.5% of capacity on average for the LP, 5.4% for this model.
This is what observed bytes are to be compared with.

- Every worker is one flow; it wants its readGbps (at most its NIC, see
  flow.worker_reads). So is every reader outside Kubernetes
  (spec.outsideReaders), a ring reader of its switch.
- A flow's bytes split over cache hosts in fixed shares, each file from ONE
  host: a local reader over its switch's hosts of its pool alike (the
  switch's cache Service picks a host per connection); a ring reader over the
  pool's ring by the published weights, w / sum(w) (hashing.py), or by the
  split of a known file list.
- Links: each cache host serves at most min(NIC, serveGbps), shared by its
  local and cross-switch readers (and its NIC by all the pools it serves);
  each switch's uplink in each direction; the WAN. Cache fills (missRatio
  of what a host serves) enter its switch's uplink and cross the WAN.
- Progressive filling: all unfrozen flows grow alike until a link fills
  (its flows freeze) or a flow has its demand; repeat. Identical flows (one
  fleet, switch and routing) are one stream with a count.

Gbps are link Gbps, like the LP's: a full link carries ~0.956 of its rate
as TCP payload at a 1500-byte MTU (1448/1514). bench/fabric_fairshare.py
builds its streams per node from the fabric's layout and calls fair_share.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..api import uplinkscore
from ..api.uplinkscore import IN, OUT
from ..topology import Topology
from . import flow
from .hashing import split
from .model import FairShare, FleetRequest, Placement, Plan, PoolRequest
from .problem import fleet_pool_index, outside_pool_index

# Of a full link's rate, what TCP delivers as payload at a 1500-byte MTU (1448 of every 1514 bytes on
# the wire): the fabric bench measured 0.944-0.958 on every saturated uplink.
PAYLOAD = 1448 / 1514
_FULL = 1 - 1e-9      # a link this full is saturated; a flow this close to its demand has it
_TINY = 1e-12


@dataclass(frozen=True)
class Stream:
    demand_gbps: float             # what each of its flows would read unhindered
    uses: Mapping[str, float]      # link -> Gbps it carries per Gbps one flow reads
    count: int = 1                 # identical flows it stands for


@dataclass(frozen=True)
class Filling:
    rates: tuple[float, ...]       # per flow, by stream
    loads: Mapping[str, float]     # per link of the capacity map
    saturated: tuple[str, ...]


def progressive_filling(capacity: Mapping[str, float], streams: Sequence[Stream]) -> Filling:
    """Max-min fair rates. Links missing from `capacity` do not limit (nor are they reported)."""
    # streams of one switch's readers of a ring share their uses (readers(), streams_of): filtered once
    kept: dict[int, dict[str, float]] = {}
    uses = [kept.get(id(s.uses)) or kept.setdefault(id(s.uses), {link: a for link, a in s.uses.items()
                                                               if a > _TINY and link in capacity}) for s in streams]
    active = {i for i, s in enumerate(streams) if s.demand_gbps > 0 and s.count > 0}
    weight: dict[str, float] = {}                # link -> Gbps it gains per Gbps every active flow gains
    users: dict[str, set[int]] = {}
    for i in sorted(active):
        for link, a in uses[i].items():
            weight[link] = weight.get(link, 0.0) + a * streams[i].count
            users.setdefault(link, set()).add(i)
    load = dict.fromkeys(capacity, 0.0)
    rates = [0.0] * len(streams)
    saturated: set[str] = set()
    level = 0.0                                  # every active flow's rate
    while active:
        step = min(streams[i].demand_gbps for i in active) - level
        for link, w in weight.items():
            step = min(step, (capacity[link] - load[link]) / w)
        step = max(step, 0.0)
        level += step
        for link, w in weight.items():
            load[link] += w * step
        full = [link for link in weight if load[link] >= capacity[link] * _FULL]
        saturated.update(full)
        done = {i for i in active if level >= streams[i].demand_gbps * _FULL}
        for link in full:
            done |= users[link]
        for i in done:
            rates[i] = min(level, streams[i].demand_gbps)
            for link, a in uses[i].items():
                users[link].discard(i)
                weight[link] -= a * streams[i].count
                if not users[link]:
                    del weight[link]
        active -= done
    return Filling(tuple(rates), load, tuple(sorted(saturated)))


def fair_share(switch_of: Mapping[str, str], uplink_gbps: Mapping[str, float],
               host_rates: Mapping[str, tuple[float, float]], streams: Sequence[tuple[str, float, Mapping[str, float]]]) -> FairShare:
    """Per-node streams (the fabric bench's layout): (node, demand Gbps, {cache node: share of its bytes});
    host_rates: node -> (out, in) Gbps. A node's link in caps its readers; a reader on a cache host reads
    that host over loopback."""
    filled = progressive_filling(*node_links(switch_of, uplink_gbps, host_rates, streams))
    served: dict[str, float] = {}
    for rate, (_, _, shares) in zip(filled.rates, streams):
        for cache, share in shares.items():
            served[cache] = served.get(cache, 0.0) + rate * share
    reads = [(cache, use) for _, cache, _, use in _node_reads(switch_of, streams)]
    return FairShare(round(sum(filled.rates), 3), _uplinks(filled.loads, uplink_gbps),
                     {c: round(v, 3) for c, v in sorted(served.items())}, filled.saturated,
                     demand_gbps=round(sum(d for _, d, _ in streams), 3),
                     full_hosts_behind=_full_hosts_behind(filled.saturated, reads))


def node_links(switch_of: Mapping[str, str], uplink_gbps: Mapping[str, float],
               host_rates: Mapping[str, tuple[float, float]], streams: Sequence[tuple[str, float, Mapping[str, float]]]
               ) -> tuple[dict[str, float], list[Stream]]:
    """fair_share's links (capacity by name) and flows, for another sharing rule on the same problem."""
    capacity = {uplinkscore.link(d, sw): gbps for sw, gbps in uplink_gbps.items() for d in (OUT, IN)}
    for node, (out, inn) in host_rates.items():
        capacity[f"serve:{node}"] = out
        capacity[f"node_in:{node}"] = inn
    uses = [{f"node_in:{node}": 1.0} for node, _, _ in streams]
    for i, _, share, use in _node_reads(switch_of, streams):
        for link, a in use.items():
            _add(uses[i], link, share * a)
    return capacity, [Stream(demand, use) for (_, demand, _), use in zip(streams, uses)]


def _node_reads(switch_of: Mapping[str, str], streams: Sequence[tuple[str, float, Mapping[str, float]]]):
    """(stream index, cache node, share of the stream's bytes, links a read from it uses) of every read that
    leaves the reader's node (a reader on a cache host reads that host over loopback)."""
    for i, (node, _, shares) in enumerate(streams):
        for cache, share in shares.items():
            if cache != node:
                use = {f"serve:{cache}": 1.0}
                _cross(use, switch_of[cache], switch_of[node], 1.0)
                yield i, cache, share, use


@dataclass(frozen=True)
class ReaderGroup:
    """Identical readers: one fleet's workers on one switch that read the same way (local or ring)."""

    count: int
    demand_gbps: float                         # each
    shares: Mapping[str, float]                # cache host -> share of their bytes
    uses: Mapping[str, Mapping[str, float]]    # cache host -> link -> Gbps per Gbps read from that host
    outside: str = ""                          # readers outside Kubernetes: their switch ("" for workers)


@dataclass(frozen=True)
class Readers:
    """A placement as the fair share sees it: the links with their capacity, and the groups of readers."""

    capacity: Mapping[str, float]
    uplink: Mapping[str, float]
    switch_of: Mapping[str, str]
    groups: tuple[ReaderGroup, ...]
    demand_gbps: float                         # with readers that have no cache to read from
    rings: Mapping[str, Mapping[str, float]]   # pool -> host -> share of ring bytes


def readers(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], placement: Placement,
            weights: Mapping[str, Mapping[str, float]] | None = None, files: Sequence[str] = ()) -> Readers:
    """The links and reader groups of a placement; `weights` the ring the plan publishes (by default
    flow.py's), `files` a file list whose hashed split the ring readers take instead of the weights."""
    uplink = {s.name: s.uplink_gbps for s in topology.switches}
    switch_of = {h.name: h.switch for h in topology.hosts}
    nic = {h.name: h.nic_gbps for h in topology.hosts}
    serve = flow.host_serve(topology, pools, placement)
    rings = {pool: split(files, ring) for pool, ring in flow.ring_weights(topology, pools, placement, weights).items()}
    capacity = {uplinkscore.link(d, sw): gbps for sw, gbps in uplink.items() for d in (OUT, IN)}
    up_out, up_in = {sw: uplinkscore.link(OUT, sw) for sw in uplink}, {sw: uplinkscore.link(IN, sw) for sw in uplink}
    capacity["wan"] = topology.wan_gbps
    pools_of: dict[str, int] = {}
    for pool, hosts in serve.items():
        for node, gbps in hosts.items():
            capacity[f"serve:{pool}:{node}"] = gbps
            pools_of[node] = pools_of.get(node, 0) + 1
    capacity.update({f"nic:{node}": nic[node] for node, n in pools_of.items() if n > 1})
    miss = {p.name: p.body.miss_ratio for p in pools}

    def uses(pool: str, reader: str, host: str) -> dict[str, float]:
        # _add and _cross written out (every link is a new key here): 20,000 calls at 20,000 nodes
        use = {f"serve:{pool}:{host}": 1.0, f"nic:{host}": 1.0}
        source = switch_of[host]
        if source != reader:
            use[up_out[source]] = 1.0
            use[up_in[reader]] = 1.0
        if miss[pool] > 0:
            use[up_in[source]] = miss[pool]
            use["wan"] = miss[pool]
        return use

    # Every fleet's readers of a pool on a switch read alike (the same hosts, the same links): their
    # shares and uses are built once and shared (at 20,000 nodes a ring has hundreds of hosts).
    alike: dict[tuple[str, str, bool], tuple[dict, dict]] = {}

    def reading(pool: str, sw: str, ring: bool, shares: Mapping[str, float]) -> tuple[dict, dict]:
        key = (pool, sw, ring)
        if key not in alike:
            shares = {h: a for h, a in shares.items() if a > 0}
            alike[key] = (shares, {h: uses(pool, sw, h) for h in shares})
        return alike[key]

    reads = flow.worker_reads(topology, fleets)
    groups, demand = [], 0.0
    for fleet in fleets:
        index = fleet_pool_index(fleet, pools)
        if index is None:
            continue
        pool = pools[index].name
        for sw, count in sorted(placement.workers.get(fleet.name, {}).items()):
            if sw not in uplink:
                continue
            local = sorted(n for n in placement.caches.get(pool, {}).get(sw, ()) if n in serve[pool])
            ring = flow.ring_readers(placement, fleet.name, sw, bool(local))
            rate = reads[fleet.name].get(sw, fleet.body.read_gbps)
            demand += count * rate
            for n, hashed, shares in ((count - ring, False, dict.fromkeys(local, 1.0 / len(local) if local else 0.0)),
                                      (ring, True, rings[pool])):
                if n <= 0:
                    continue
                shares, used = reading(pool, sw, hashed, shares)
                if shares:       # without a cache host a reader reads nothing
                    groups.append(ReaderGroup(n, rate, shares, used))
    for group in topology.outside:
        # readers outside Kubernetes: one flow each through the pool's ring (no NIC of theirs is known)
        index = outside_pool_index(group, pools)
        if index is None or group.switch not in uplink:
            continue
        demand += group.demand_gbps
        shares, used = reading(pools[index].name, group.switch, True, rings[pools[index].name])
        if shares:
            groups.append(ReaderGroup(group.count, group.read_gbps, shares, used, outside=group.switch))
    return Readers(capacity, uplink, switch_of, tuple(groups), demand, rings)


def streams_of(groups: Sequence[ReaderGroup]) -> list[Stream]:
    """One stream per reader group: every link it uses, weighted by the share of its bytes from each host."""
    streams = []
    summed: dict[int, dict[str, float]] = {}      # groups that share their uses (readers()) share the sum
    for g in groups:
        use = summed.get(id(g.uses))
        if use is None:
            use = summed[id(g.uses)] = {}
            for host, share in g.shares.items():
                for link, a in g.uses[host].items():
                    gbps = share * a        # _add, written out: a ring of hundreds of hosts, each read's links
                    if gbps > 0:
                        use[link] = use.get(link, 0.0) + gbps
        streams.append(Stream(g.demand_gbps, use, g.count))
    return streams


def predict(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], placement: Placement,
            weights: Mapping[str, Mapping[str, float]] | None = None, files: Sequence[str] = ()) -> FairShare:
    """The fair share of a placement (see readers() for `weights` and `files`)."""
    the = readers(topology, pools, fleets, placement, weights, files)
    filled = progressive_filling(the.capacity, streams_of(the.groups))
    nic = {h.name: h.nic_gbps for h in topology.hosts}
    body = {p.name: p.body for p in pools}

    def at_its_cap(link: str) -> bool:
        """A full link that is full in the network too: a host planned below what it can serve (its pool's
        serveHeadroom) still has room when the prediction fills it."""
        if not link.startswith("serve:"):
            return True
        _, pool, node = link.split(":", 2)
        return the.capacity[link] >= min(nic[node], body[pool].serve_gbps) - 1e-9

    served: dict[str, float] = {}
    for rate, g in zip(filled.rates, the.groups):
        for host, share in g.shares.items():
            served[host] = served.get(host, 0.0) + rate * g.count * share
    outside: dict[str, float] = {}
    for rate, g in zip(filled.rates, the.groups):
        if g.outside:
            outside[g.outside] = outside.get(g.outside, 0.0) + rate * g.count
    by_switch: dict[str, float] = {}
    for host, gbps in served.items():
        by_switch[the.switch_of[host]] = by_switch.get(the.switch_of[host], 0.0) + gbps
    return FairShare(
        delivered_gbps=round(sum(r * g.count for r, g in zip(filled.rates, the.groups)), 3),
        uplinks=_uplinks(filled.loads, the.uplink),
        served={h: round(v, 3) for h, v in sorted(served.items())},
        saturated=filled.saturated,
        demand_gbps=round(the.demand_gbps, 3),
        switch_served={s: round(v, 3) for s, v in sorted(by_switch.items())},
        ring_split={pool: {h: round(v, 6) for h, v in shares.items()} for pool, shares in sorted(the.rings.items())},
        # a read's uses also hold its host's fills from the origin (up_in of the host's own switch): not the read
        full_hosts_behind=_full_hosts_behind(tuple(filter(at_its_cap, filled.saturated)), _distinct_reads(the.groups),
                                             fills_through=the.switch_of),
        outside={s: round(v, 3) for s, v in sorted(outside.items())},
    )


def with_fair_share(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], plan: Plan,
                    files: Sequence[str] = ()) -> Plan:
    """The plan with its fair-share prediction (plan.fair), over the ring it publishes (split as `files` hash)."""
    fair = predict(topology, pools, fleets, plan.placement, plan.hash_weights or None, files)
    return dataclasses.replace(plan, fair=fair)


def _distinct_reads(groups: Sequence[ReaderGroup]) -> list[tuple[str, Mapping[str, float]]]:
    """(host, the links a read from it uses) of every group, each once: groups that read alike share their
    uses (readers()), and a ring's hundreds of hosts would otherwise come once per fleet and switch."""
    reads = {id(g.uses[h]): (h, g.uses[h]) for g in groups for h in g.shares}
    return list(reads.values())


def _full_hosts_behind(saturated: Sequence[str], reads, fills_through: Mapping[str, str] | None = None
                       ) -> dict[str, tuple[str, ...]]:
    """Each uplink direction the filling left full, with the cache hosts, also full, whose bytes cross it.
    reads: (host, the links a read from it uses). Where two full links are in tandem, TCP does not split
    the host alike: flows that also queue at the full uplink have the longer round trip and get less of
    it, and the uplink carries less than its fair share (7.6-14.5% in two runs of the emulated fabric,
    less with shallower queues: bench/notes/fabric-notes.md). No fluid rule tried there predicts it.
    fills_through: host -> its switch, when a read's links also hold the host's fills from the origin (the
    in-direction of its own switch's uplink): those are not the read and are left out."""
    full_hosts = {link for link in saturated if link.startswith(("serve:", "nic:"))}
    full_uplinks = {link for link in saturated if uplinkscore.link_direction(link) is not None}
    behind: dict[str, set[str]] = {}
    if not full_hosts or not full_uplinks:
        return {}
    for host, use in reads:
        if full_hosts.isdisjoint(use):
            continue
        fills = uplinkscore.link(IN, fills_through[host]) if fills_through is not None else None
        for link in full_uplinks.intersection(use):
            if link != fills:
                behind.setdefault(link, set()).add(host)
    return {link: tuple(sorted(hosts)) for link, hosts in sorted(behind.items())}


def _add(use: dict[str, float], link: str, a: float) -> None:
    if a > 0:
        use[link] = use.get(link, 0.0) + a


def _cross(use: dict[str, float], source: str, reader: str, share: float) -> None:
    """Bytes from a cache on switch `source` to a reader on switch `reader` load both uplinks, unless local."""
    if source != reader:
        _add(use, uplinkscore.link(OUT, source), share)
        _add(use, uplinkscore.link(IN, reader), share)


def _uplinks(loads: Mapping[str, float], uplink: Mapping[str, float]) -> dict[str, dict[str, float]]:
    return {sw: {d: round(loads[uplinkscore.link(d, sw)], 3) for d in (OUT, IN)} for sw in uplink}
