"""The planner's contract: what goes in and what a Plan says.

Pure data, no solver: builders, handlers and the CLI depend on this module
only, so solvers can change without touching them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..api import uplinkscore
from ..api.workerfleet import WorkerFleetBody
from ..api.xcachepool import XCachePoolBody


class Unsatisfiable(Exception):
    """Valid input that no placement can realise (e.g. no NVMe node anywhere)."""

    def __init__(self, reason: str, message: str, fleet: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.fleet = fleet  # the fleet at fault, when one is


@dataclass(frozen=True)
class PoolRequest:
    name: str
    body: XCachePoolBody


@dataclass(frozen=True)
class FleetRequest:
    name: str
    body: WorkerFleetBody

    @property
    def pool(self) -> str | None:
        return self.body.pool


@dataclass(frozen=True)
class Placement:
    """Where things run: cache hosts by node, workers by count per switch."""

    # pool -> switch -> node names (sorted)
    caches: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    # fleet -> switch -> worker count
    workers: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # fleet -> switch -> how many of those workers read through the pool's ring
    # (rendezvous hashing over all its caches, see hashing.py) instead of their
    # switch's own caches. Workers on a switch without a cache of their pool
    # always use the ring, listed here or not.
    hashed: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def cache_count(self, switch: str) -> int:
        return sum(len(by_switch.get(switch, ())) for by_switch in self.caches.values())

    def worker_count(self, switch: str) -> int:
        return sum(by_switch.get(switch, 0) for by_switch in self.workers.values())

    def moves_from(self, current: "Placement | None") -> int:
        """Pods that must start elsewhere to go from `current` to this placement."""
        if current is None:
            return 0
        moved = 0
        for pool, by_switch in current.caches.items():
            for switch, nodes in by_switch.items():
                kept = set(self.caches.get(pool, {}).get(switch, ()))
                moved += sum(1 for n in nodes if n not in kept)
        for fleet, by_switch in current.workers.items():
            for switch, count in by_switch.items():
                # a worker that changes between local and ring reading restarts with a new endpoint
                ring, new_ring = self._ring(current, fleet, switch), self._ring(self, fleet, switch)
                new_count = self.workers.get(fleet, {}).get(switch, 0)
                moved += max(0, (count - ring) - (new_count - new_ring)) + max(0, ring - new_ring)
        return moved

    @staticmethod
    def _ring(placement: "Placement", fleet: str, switch: str) -> int:
        return min(placement.hashed.get(fleet, {}).get(switch, 0), placement.workers.get(fleet, {}).get(switch, 0))


# Relative Gbps gap within which a plan counts as optimal (HiGHS's default relative MIP gap).
OPTIMAL_GAP = 1e-4


@dataclass(frozen=True)
class UplinkLoad:
    switch: str
    capacity_gbps: float
    in_gbps: float
    out_gbps: float

    @property
    def utilisation(self) -> float:
        return uplinkscore.utilisation(self.in_gbps, self.out_gbps, self.capacity_gbps)

    @property
    def headroom(self) -> float:
        return uplinkscore.headroom(self.in_gbps, self.out_gbps, self.capacity_gbps)

    @property
    def by_direction(self) -> tuple[tuple[str, float], ...]:
        """(uplinkscore.IN, in_gbps), (uplinkscore.OUT, out_gbps)."""
        return uplinkscore.by_direction(self.in_gbps, self.out_gbps)


@dataclass(frozen=True)
class FairShare:
    """What competing TCP flows deliver with a placement (fairshare.py), beside the LP optimum: link Gbps."""

    delivered_gbps: float
    uplinks: Mapping[str, Mapping[str, float]]   # switch -> {uplinkscore.OUT: Gbps, uplinkscore.IN: Gbps}
    served: Mapping[str, float]                  # cache host -> Gbps it serves
    saturated: tuple[str, ...]                   # the links that filled (serve:…, uplinkscore.link(…), wan)
    demand_gbps: float = 0.0
    switch_served: Mapping[str, float] = field(default_factory=dict)           # switch -> Gbps its cache hosts serve
    ring_split: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # pool -> host -> share of ring bytes
    # a full uplink direction (uplinkscore.link(IN, "rack-5")) -> the cache hosts, also full, whose bytes cross it
    full_hosts_behind: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # switch -> Gbps the readers outside Kubernetes there get (spec.outsideReaders)
    outside: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    placement: Placement
    routing: Mapping[str, str]            # switch -> local | hashed
    uplinks: tuple[UplinkLoad, ...]       # one per switch, sorted by switch
    predicted_gbps: float                 # deliverable aggregate read Gbps
    bound_gbps: float                     # no placement can deliver more
    bottleneck: str                       # what limits predicted_gbps
    planner: str                          # which solver produced it
    moves: int = 0                        # pods moved relative to the current placement
    demand_gbps: float = 0.0              # what all placed workers would read if nothing held them back
    # pool -> cache node -> rendezvous weight: the ring clients hash over (hashing.py)
    hash_weights: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # fleet -> workers no node has room for (they would stay Pending)
    unplaced: Mapping[str, int] = field(default_factory=dict)
    # Whether predicted_gbps is proven the most the placement model allows (within OPTIMAL_GAP): the
    # planner's Gbps stage finished its search, or the plan meets the bound. False: the search was cut
    # at its deterministic limit (or is a heuristic, as every baseline), and `gap` is what is proven.
    optimal: bool = False
    # What competing TCP flows deliver (max-min fair share, per-host serving), when asked for
    # (fairshare.with_fair_share); predicted_gbps stays the LP optimum the placement is chosen by.
    fair: FairShare | None = None

    @property
    def gap(self) -> float:
        """Proven relative gap: no placement delivers more than predicted_gbps / (1 - gap)."""
        if self.bound_gbps <= 0:
            return 0.0
        return round(max(0.0, 1.0 - self.predicted_gbps / self.bound_gbps), 6)

    @property
    def peak(self) -> float:
        """The highest utilisation of its uplinks (uplinkscore.peak)."""
        return uplinkscore.peak(self.uplinks)

    def uplink(self, switch: str) -> UplinkLoad:
        return next(u for u in self.uplinks if u.switch == switch)
