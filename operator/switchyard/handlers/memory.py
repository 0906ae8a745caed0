"""What this process keeps of each object between its reconciles: one entry per object, in one store.

An entry is made at the object's first reconcile (`of`) and dropped when the
object is deleted (`drop`, from loop.register's delete handler; an S3Staging's
when its reclaim is done, which may need the S3 client kept here). Every kind's
entry holds what converge keeps (`Applied`); each kind's own class adds its
slots. No other module of handlers/ keeps state per object; what a new leader
does without each slot is in docs/admin-guide.md's takeover table, which
operator/tests/unit/test_leader_election.py holds to these classes' fields.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from ..observe import drift
from ..desired.ringload import RingLoad
from ..desired.xcachepool import DiskRead
from ..rampup import Bucket
from ..s3 import S3
from ..s3.staging import Tracker


@dataclass
class Applied:
    """converge.py: what was last applied, so an unchanged reconcile costs no request."""

    digest: str | None = None                                  # the desired state (children and plans) last applied
    at: float = -math.inf                                      # when (time.monotonic)
    children: dict[str, str] = field(default_factory=dict)     # child key -> hash of its content when applied
    pods: str | None = None                                    # the nodes' switches and lost nodes when its pods
                                                               # were last checked for misplacement

    def forget(self) -> None:
        """Not applied: the next reconcile writes every child again."""
        self.digest, self.at, self.children = None, -math.inf, {}


@dataclass
class FacilityDrift:
    """drift.py: what is kept of one facility's prediction drift between reads."""

    memory: Mapping[drift.Subject, drift.SwitchDrift]
    offset: float                                   # the wall clock minus time.monotonic(): streak starts in status
    history: dict = field(default_factory=dict)
    last_read: float = -math.inf
    assessment: drift.Assessment | None = None
    addresses: dict = field(default_factory=dict)   # (XCachePool, node) -> its ready cache pod's address
    flows: dict = field(default_factory=dict)       # drift.FlowHistory: bytes that cross switches, per host
    listed: float = -math.inf


@dataclass
class RoutingRead:
    """When a fleet's pods were last listed for its image's routing verdict, and the wait before the next."""

    image: str = ""
    at: float = 0.0
    wait: float = 0.0


@dataclass
class ObjectMemory:
    """One object's entry; what every kind keeps."""

    kind: str
    namespace: str
    name: str
    applied: Applied = field(default_factory=Applied)


@dataclass
class FacilityMemory(ObjectMemory):
    drift: FacilityDrift | None = None              # made at the first drift check, seeded from the status


@dataclass
class FleetMemory(ObjectMemory):
    ramp: Bucket | None = None                      # start tokens (None: no ramp under way, or a new one)
    asked: dict[str, int] | None = None             # counts per switch last asked for (None: none yet, this process)
    unaddressed: tuple[str, ...] = ()               # ring hosts last warned about as named by node name
    routing_read: RoutingRead = field(default_factory=RoutingRead)


@dataclass
class PoolMemory(ObjectMemory):
    disk_read: tuple[float, DiskRead] | None = None  # when the exporters were last read, and what they said
    published_seen: tuple | None = None  # the status.hotFiles and ringWeights the pool's last watch event carried
    ring_load: RingLoad | None = None  # the ring-weight rule's counters and steps (desired/ringload.py)
    pod_networks: tuple[float, dict] | None = None  # when network plugins' pod ranges were last listed; per kind
    # what its list gave, and the status of a failed one (podnetworks.py)


@dataclass
class StagingMemory(ObjectMemory):
    tracker: Tracker | None = None                  # made at the first reconcile, seeded from status.buckets
    over_quota: frozenset[str] = frozenset()        # buckets last announced over quota
    client: tuple[str, S3] | None = None            # (fingerprint of endpoint and keys, the boto3 client)
    series: set[tuple[str, str, str]] = field(default_factory=set)  # the bucket gauges' label sets exported


KINDS: dict[str, type[ObjectMemory]] = {"AnalysisFacility": FacilityMemory, "WorkerFleet": FleetMemory,
                                        "XCachePool": PoolMemory, "S3Staging": StagingMemory}
M = TypeVar("M", bound=ObjectMemory)

_objects: dict[str, ObjectMemory] = {}   # uid -> its entry
_guard = threading.Lock()


def of(body: Mapping, kind: type[M] = ObjectMemory) -> M:  # type: ignore[assignment]
    """The entry of the object `body` is, made on first use (its kind's class)."""
    meta = body["metadata"]
    with _guard:
        entry = _objects.get(meta["uid"])
        if entry is None:
            made = KINDS.get(body.get("kind", ""), ObjectMemory)
            entry = _objects[meta["uid"]] = made(body.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))
    if not isinstance(entry, kind):
        raise TypeError(f"{entry.kind} {entry.namespace}/{entry.name} keeps a {type(entry).__name__}, "
                        f"not a {kind.__name__}")
    return entry


def drop(uid: str) -> ObjectMemory | None:
    """Forget the object (it was deleted); its entry, if it had one."""
    with _guard:
        return _objects.pop(uid, None)
