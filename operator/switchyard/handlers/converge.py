"""Convergence: apply and prune an object's children when what it wants changed, and move misplaced pods.

The writes themselves are the apply module's; the object's entry in the memory
store (memory.Applied) keeps which desired state it last applied, so an
unchanged reconcile costs no request.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import threading
import time
from collections.abc import Mapping

from .. import conditions as cond
from ..api import reasons
from ..apply import ApiError, SyncResult, child_key, sync_children
from ..builders.common import SWITCH_LABEL
from ..policy.settings import current
from . import memory
from .client import kube
from .loop import wake
from .status import ObjectEvents

# One object's pods listed at a time (evict_misplaced_pods): process-wide, not any object's.
_listing = threading.Lock()
# What the API server answers a child it refuses for its content: Bad Request, Unprocessable Entity.
REFUSED_STATUSES = (400, 422)


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


class Refused(Exception):
    """The children could not be written, for a reason a retry alone will not mend: the object says why
    (its Ready condition, for its generation), and the next reconcile tries again."""

    def states(self) -> dict[str, cond.State]:
        raise NotImplementedError


class ChildRefused(Refused):
    """The API server refused a child as invalid (400, 422): a child the operator built wrongly from a
    spec its schema admitted. Said on the object, not only retried in the log."""

    def __init__(self, error: ApiError):
        super().__init__(str(error))
        self.error = error

    def states(self) -> dict[str, cond.State]:
        return cond.failed(reasons.CHILD_REFUSED, cond.printable(
            f"the API server refused a child ({self.error.status} {self.error.reason}): {self.error.message}"))


class NameTaken(Refused):
    """Children this object wants hold names another owner's objects have: nothing of theirs was touched."""

    def __init__(self, keys: list[str]):
        super().__init__(", ".join(keys))
        self.keys = keys

    def states(self) -> dict[str, cond.State]:
        shown = ", ".join(k.replace("/", " ") for k in self.keys[:5]) + (", …" if len(self.keys) > 5 else "")
        return cond.failed(reasons.CHILD_NAME_TAKEN,
                           f"{shown}: the name is held by an object of another owner; rename "
                           "this object (or its pools, fleets or switches) so that its children's "
                           "names are free. Nothing of the other owner was changed")


def converge(body: Mapping, desired: list[dict], kinds: tuple[str, ...], logger,
             extra_key: object = None) -> SyncResult | None:
    """Apply and prune `body`'s children when the desired state changed (or on resync).

    Returns what it wrote (with each child as the API server now holds it),
    None when it had nothing to do; a reconcile whose desired state is unchanged
    costs no API call here, and between resyncs only the children whose
    content changed are applied (a ramp step touches a few Deployments, not all).
    Raises NameTaken, having written nothing, when another owner's object
    holds a child's name; ChildRefused when the API server refuses a child as invalid.
    """
    applied = memory.of(body).applied
    children = {child_key(obj): _digest(obj) for obj in desired}
    digest = _digest([sorted(children.items()), extra_key])
    # Apply when the desired state changed, or periodically (resync) to undo drift.
    resync = time.monotonic() - applied.at > current().resync_seconds
    if applied.digest == digest and not resync:
        return None
    before = {} if resync else applied.children
    unchanged = frozenset(key for key, child in children.items() if before.get(key) == child)
    try:
        result = sync_children(kube(), body, desired, kinds, ObjectEvents(body, logger), unchanged=unchanged)
    except ApiError as exc:
        if exc.status not in REFUSED_STATUSES:
            raise   # the API server's trouble, not the child's: retried (loop.measured)
        applied.forget()
        raise ChildRefused(exc) from exc
    if result.conflicts:
        # Not marked applied: the next reconcile looks again (the other owner may be gone by then).
        applied.forget()
        raise NameTaken(result.conflicts)
    applied.digest, applied.at, applied.children = digest, time.monotonic(), children
    # A child of ours whose plan (status.plan) just changed reconciles now: its
    # update handler runs on spec changes only, so it would wait for its next tick.
    for obj in desired:
        if child_key(obj) not in unchanged:
            wake(obj["kind"], body["metadata"]["namespace"], obj["metadata"]["name"])
    return result


def _seconds_since(timestamp: str) -> float:
    try:
        then = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return float("inf")  # NotReady with no usable time: treat as long gone
    return (datetime.datetime.now(datetime.timezone.utc) - then).total_seconds()


def _placement(pod: Mapping) -> dict:
    """What eviction reads of a pod: whole pods of a 10,000-worker fleet cost the operator tens of
    MiB that it keeps (bench/notes/operator-memory-10k.md)."""
    meta, labels = pod["metadata"], pod["metadata"].get("labels") or {}
    return {"metadata": {"name": meta["name"], "uid": meta["uid"], "deletionTimestamp": meta.get("deletionTimestamp"),
                         "labels": {k: labels[k] for k in (SWITCH_LABEL,) if k in labels}},
            "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")}}


def evict_misplaced_pods(body: Mapping, selector: Mapping[str, str], switch_label: str, nodes, logger) -> int:
    """Delete pods the plan no longer has where they are, so their controllers re-create them on plan.

    Three cases: the pod's node now sits on another switch than the pod was
    planned for (node affinity is only checked at scheduling, so a relabelled
    node keeps its pods), the node has been NotReady for longer than
    SWITCHYARD_NOT_READY_GRACE_SECONDS (the plan has already left it; Kubernetes
    itself would wait 300 s), or the node is gone. A cordoned node keeps its
    pods: draining is the admin's call.
    """
    switch_of = {n.name: n.label(switch_label) for n in nodes}
    lost = sorted(n.name for n in nodes if n.not_ready_since is not None
                  and _seconds_since(n.not_ready_since) > current().not_ready_grace_seconds)
    # The scheduler honours the switch affinity, so pods can only become
    # misplaced when a node changes switch, is lost or goes: list them only then,
    # and once when the operator starts. Not on every resync: a list of 10,000
    # pods costs the operator tens of MiB that Python keeps once it has them.
    applied = memory.of(body).applied
    digest = _digest([sorted(switch_of.items()), lost])
    if applied.pods == digest:
        return 0
    applied.pods = digest
    namespace = body["metadata"]["namespace"]
    with _listing:  # one fleet's pods at a time, in small pages: the memory of one page, not of every fleet's
        pods = [p for p in kube().list("Pod", namespace, selector, keep=_placement, page=100)
                if p["spec"]["nodeName"] and not p["metadata"]["deletionTimestamp"]]
    # A node missing from the index is gone, or so new the index has not seen it
    # yet: ask the API server (a list by name; RBAC grants list, not get, on nodes).
    # Kubernetes' pod GC would leave pods of a deleted node for 40 s or more.
    gone = {node for node in {p["spec"]["nodeName"] for p in pods} - switch_of.keys()
            if not kube().list("Node", fields={"metadata.name": node})}
    evicted = 0
    for pod in pods:
        node = pod["spec"]["nodeName"]
        planned = (pod["metadata"].get("labels") or {}).get(SWITCH_LABEL)
        if planned is None:
            continue  # not placed by the plan (a fleet's Dask scheduler): not ours to move
        if node in gone:
            why = f"node {node} is gone"
        elif node not in switch_of:
            continue
        elif node in lost:
            why = f"node {node} is NotReady"
        elif switch_of[node] != planned:
            why = f"node {node} is now on switch {switch_of[node]}, planned {planned}"
        else:
            continue
        if kube().delete("Pod", namespace, pod["metadata"]["name"], uid=pod["metadata"]["uid"]):
            ObjectEvents(body, logger).info(f"Deleted pod {pod['metadata']['name']}: {why}", reason=reasons.RESCHEDULED)
            evicted += 1
    return evicted
