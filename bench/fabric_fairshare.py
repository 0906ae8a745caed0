"""The fair-share reference of a fabric layout: the product's model (planner/fairshare.py) on the bench's streams.

The bench's yardstick beside the planner's flow model (planner/flow.py
computes the largest total the routing allows; TCP flows do not find it).
One implementation, the product's fair_share; this module only builds its
streams from the fabric's layout, per node: every reader stream is one flow
with a demand cap (the workers it stands for × readGbps), its bytes split
over its sources in the fixed proportions of its file list (each file equal
in size). A stream loads each cache host it reads from (that host's serving
cap, min(NIC, serveGbps)) unless it runs on that host (loopback), its node's
link in, and the uplinks its cross-switch shares cross.
"""

from __future__ import annotations

from switchyard.planner.fairshare import fair_share
from switchyard.planner.model import FairShare

__all__ = ["FairShare", "fair_share", "of_layout", "problem_of_layout"]


def problem_of_layout(topology, the, scale: float) -> tuple:
    """fair_share's arguments for a fabric_scenario.Layout (rates back in model Gbps)."""
    switch_of = {node: switch for node, switch, _, _ in the.hosts}   # also a namespace no Kubernetes node is
    rates = {node: (out / scale, inn / scale) for node, _, out, inn in the.hosts}
    streams = []
    for s in the.streams:
        shares: dict[str, float] = {}
        for cache, _ in s.urls:
            shares[cache] = shares.get(cache, 0.0) + 1.0 / len(s.urls)
        streams.append((s.node, s.demand_gbps, shares))
    return switch_of, {sw.name: sw.uplink_gbps for sw in topology.switches}, rates, streams


def of_layout(topology, the, scale: float) -> FairShare:
    """The fair share of a fabric_scenario.Layout."""
    return fair_share(*problem_of_layout(topology, the, scale))
