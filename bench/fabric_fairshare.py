"""A max-min fair-share reference for a fabric layout: what competing flows get, not the best total.

The bench's own yardstick beside the planner's flow model (planner/flow.py
computes the largest total the routing allows; TCP flows do not find it).
Every reader stream is one flow with a demand cap (the workers it stands for
× readGbps); its bytes split over its sources in the fixed proportions of
its file list (each file equal in size). A stream loads:

- each cache host it reads from (that host's serving cap, min(NIC, serveGbps)),
  by its share from that host — unless it runs on that host (loopback);
- its node's link in (the node's shaped rate);
- the uplink out of every other switch it reads from, and its own switch's
  uplink in, by the shares crossing them.

Progressive filling: all unfrozen streams grow at the same rate until a link
fills or a stream reaches its demand; those streams freeze; repeat. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FairShare:
    delivered_gbps: float
    uplinks: dict[str, dict[str, float]]      # switch -> {"out": Gbps, "in": Gbps}
    served: dict[str, float]                  # cache node -> Gbps
    saturated: tuple[str, ...]                # links that filled


def fair_share(switch_of: dict[str, str], uplink_gbps: dict[str, float], host_rates: dict[str, tuple[float, float]],
               streams: list[tuple[str, float, dict[str, float]]]) -> FairShare:
    """streams: (node, demand Gbps, {cache node: share of its bytes}); host_rates: node -> (out, in) Gbps."""
    capacity: dict[str, float] = {}
    for sw, gbps in uplink_gbps.items():
        capacity[f"up_out:{sw}"] = gbps
        capacity[f"up_in:{sw}"] = gbps
    for node, (out, inn) in host_rates.items():
        capacity[f"serve:{node}"] = out
        capacity[f"node_in:{node}"] = inn
    uses: list[dict[str, float]] = []
    for node, _, shares in streams:
        use: dict[str, float] = {f"node_in:{node}": 1.0}
        for cache, share in shares.items():
            if cache == node:
                continue       # a reader on the cache host reads over loopback
            use[f"serve:{cache}"] = use.get(f"serve:{cache}", 0.0) + share
            if switch_of[cache] != switch_of[node]:
                use[f"up_out:{switch_of[cache]}"] = use.get(f"up_out:{switch_of[cache]}", 0.0) + share
                use[f"up_in:{switch_of[node]}"] = use.get(f"up_in:{switch_of[node]}", 0.0) + share
        uses.append(use)
    rate = [0.0] * len(streams)
    active = {i for i, (_, demand, _) in enumerate(streams) if demand > 0}
    load = {link: 0.0 for link in capacity}
    saturated: set[str] = set()
    while active:
        step = min(streams[i][1] - rate[i] for i in active)
        for link, cap in capacity.items():
            weight = sum(uses[i].get(link, 0.0) for i in active)
            if weight > 1e-12:
                step = min(step, (cap - load[link]) / weight)
        step = max(step, 0.0)
        for i in active:
            rate[i] += step
            for link, a in uses[i].items():
                load[link] += a * step
        full = {link for link, cap in capacity.items() if load[link] >= cap * (1 - 1e-9) and
                any(uses[i].get(link, 0.0) > 1e-12 for i in active)}
        saturated |= full
        active = {i for i in active if rate[i] < streams[i][1] * (1 - 1e-9) and not (set(uses[i]) & full)}
    uplinks = {sw: {"out": round(load[f"up_out:{sw}"], 3), "in": round(load[f"up_in:{sw}"], 3)} for sw in uplink_gbps}
    served = {}
    for i, (node, _, shares) in enumerate(streams):
        for cache, share in shares.items():
            served[cache] = served.get(cache, 0.0) + rate[i] * share
    return FairShare(round(sum(rate), 3), uplinks, {c: round(v, 3) for c, v in sorted(served.items())},
                     tuple(sorted(saturated)))


def of_layout(topology, the, scale: float) -> FairShare:
    """The fair share of a fabric_scenario.Layout (rates back in model Gbps)."""
    switch_of = {h.name: h.switch for h in topology.hosts}
    rates = {node: (out / scale, inn / scale) for node, _, out, inn in the.hosts}
    streams = []
    for s in the.streams:
        shares: dict[str, float] = {}
        for cache, _ in s.urls:
            shares[cache] = shares.get(cache, 0.0) + 1.0 / len(s.urls)
        streams.append((s.node, s.demand_gbps, shares))
    return fair_share(switch_of, {sw.name: sw.uplink_gbps for sw in topology.switches}, rates, streams)
