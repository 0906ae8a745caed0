"""What every handler module shares: the client, locks, validation and status writes."""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import hashlib
import json
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Mapping, TypeVar

import kopf
from pydantic import BaseModel, ValidationError

from .. import conditions as cond
from ..apply import ApiError, Kube
from ..metrics import RECONCILE_SECONDS, RECONCILES
from ..topology import format_validation_error

M = TypeVar("M", bound=BaseModel)


@dataclass
class OperatorConfig:
    """Settings from the environment (the chart sets them)."""

    exporter_image: str = field(default_factory=lambda: os.environ.get(
        "SWITCHYARD_EXPORTER_IMAGE", "ghcr.io/switchyard-dev/switchyard:0.1.0"))
    timer_seconds: float = field(default_factory=lambda: float(os.environ.get("SWITCHYARD_TIMER_SECONDS", "5")))
    resync_seconds: float = field(default_factory=lambda: float(os.environ.get("SWITCHYARD_RESYNC_SECONDS", "60")))
    # How often a pool's cache hosts' exporters are read for disk usage.
    disk_read_seconds: float = field(default_factory=lambda: float(os.environ.get("SWITCHYARD_DISK_READ_SECONDS", "30")))
    # How long a node may be NotReady before its pods are deleted for re-creation on plan.
    not_ready_grace_seconds: float = field(default_factory=lambda: float(
        os.environ.get("SWITCHYARD_NOT_READY_GRACE_SECONDS", "30")))
    kubeconfig: str | None = field(default_factory=lambda: os.environ.get("KUBECONFIG"))


CONFIG = OperatorConfig()
_kube: Kube | None = None
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
# uid -> (hash of the last applied desired state, when it was applied)
_applied: dict[str, tuple[str, float]] = {}
# uid -> {child key: hash of its content when last applied}
_applied_children: dict[str, dict[str, str]] = {}


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube.from_environment(CONFIG.kubeconfig)
    return _kube


@contextmanager
def serialised(uid: str, wait: bool) -> Iterator[bool]:
    """One reconcile per object at a time; a timer that finds one running skips."""
    with _locks_guard:
        lock = _locks.setdefault(uid, threading.Lock())
    got = lock.acquire(blocking=wait)
    try:
        yield got
    finally:
        if got:
            lock.release()


def forget(uid: str) -> None:
    _applied.pop(uid, None)
    _applied_children.pop(uid, None)
    _applied.pop(f"{uid}/pods", None)
    with _locks_guard:
        _locks.pop(uid, None)


def needs_apply(uid: str, desired_hash: str) -> bool:
    """Apply when the desired state changed, or periodically to undo drift."""
    last = _applied.get(uid)
    return last is None or last[0] != desired_hash or time.monotonic() - last[1] > CONFIG.resync_seconds


def forget_applied(uid: str) -> None:
    _applied.pop(uid, None)
    _applied_children.pop(uid, None)


def mark_applied(uid: str, desired_hash: str) -> None:
    _applied[uid] = (desired_hash, time.monotonic())


class ObjectEvents:
    """Logs a message and posts it as a Kubernetes event on the object, with a reason."""

    def __init__(self, body: Mapping, logger):
        self.body, self.logger = body, logger

    def info(self, message: str, reason: str | None = None) -> None:
        message = cond.printable(message)
        self.logger.info(message)
        kopf.event(self.body, type="Normal", reason=reason or message.split(" ", 1)[0], message=message)

    def warning(self, message: str, reason: str) -> None:
        message = cond.printable(message)
        self.logger.warning(message)
        kopf.event(self.body, type="Warning", reason=reason, message=message)


def validate(model: type[M], spec: Mapping) -> tuple[M | None, str]:
    try:
        return model.model_validate(dict(spec)), ""
    except ValidationError as exc:
        return None, format_validation_error(exc, "spec")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_status(kind: str, body: Mapping, status: dict, states: dict[str, cond.State], logger) -> None:
    """Set conditions and fields on the status subresource, only when they change."""
    meta = body["metadata"]
    old = dict(body.get("status") or {})
    generation = meta.get("generation", 0)
    status = {**status, "observedGeneration": generation,
              "conditions": cond.merge(old.get("conditions", []), generation, now(), **states)}
    comparable = {k: v for k, v in status.items() if k != "conditions"}
    old_comparable = {k: old.get(k) for k in comparable}
    strip = lambda cs: [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs or []]  # noqa: E731
    if comparable == old_comparable and strip(status["conditions"]) == strip(old.get("conditions")):
        return
    before = cond.condition(old.get("conditions"), "Ready")
    after = cond.condition(status["conditions"], "Ready")
    if not before or before.get("status") != after["status"] or before.get("reason") != after["reason"]:
        text = f"Ready={after['status']} ({after['reason']})" + (f": {after['message']}" if after["message"] else "")
        events = ObjectEvents(body, logger)
        if after["status"] == "True":
            events.info(text, reason="Ready")
        else:
            events.warning(text, reason=after["reason"])
    kube().apply_status(kind, meta["namespace"], meta["name"], status)


@contextmanager
def measured(kind: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    except (kopf.TemporaryError, kopf.PermanentError):
        RECONCILES.labels(kind, "retry").inc()
        raise
    except ApiError as exc:
        RECONCILES.labels(kind, "error").inc()
        raise kopf.TemporaryError(f"API server: {exc}", delay=10) from exc
    except Exception:
        RECONCILES.labels(kind, "error").inc()
        raise
    else:
        RECONCILES.labels(kind, "ok").inc()
    finally:
        RECONCILE_SECONDS.labels(kind).observe(time.perf_counter() - start)


# (kind, namespace, name) -> the event loop running its per-object loop, and the event that wakes it
_wakers: dict[tuple[str, str, str], tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}
# Wakes for objects of our kinds whose loop kopf has not started yet (a plan
# written moments after a create): the loop starts with them.
_pending_wakes: set[tuple[str, str, str]] = set()
_looping_kinds: set[str] = set()


async def _pause(stopped, woken: asyncio.Event, seconds: float) -> bool:
    """Sleep until the delay is over, the daemon is stopped, or someone calls wake(); True if woken."""
    sleeper = asyncio.ensure_future(stopped.wait(seconds))
    waker = asyncio.ensure_future(woken.wait())
    try:
        await asyncio.wait([sleeper, waker], return_when=asyncio.FIRST_COMPLETED)
        return woken.is_set()
    finally:
        for task in (sleeper, waker):
            task.cancel()
        woken.clear()


def wake(kind: str, namespace: str, name: str) -> None:
    """Run an object's reconcile now instead of at its next timer tick (from any thread)."""
    key = (kind, namespace, name)
    if key not in _wakers and kind in _looping_kinds:
        _pending_wakes.add(key)
    # Checked after recording the pending wake, so a loop registering meanwhile still gets it.
    found = _wakers.get(key)
    if found is not None:
        loop, event = found
        loop.call_soon_threadsafe(event.set)


def register(plural: str, kind: str, reconcile, on_forget=None) -> None:
    """Level-based handlers for one kind.

    Create, update and resume call `reconcile(body, logger, **indexes)`; a
    per-object loop calls it again after the delay it returns (None: the
    timer interval), so a ramp-up can come back every second without a retry
    storm of error events. One reconcile runs at a time per object. wake()
    runs the loop at once, on a fresh read of the object.
    """

    def run(body, logger, wait: bool, kwargs) -> float | None:
        with serialised(body["metadata"]["uid"], wait) as got:
            if not got:
                return None
            with measured(kind):
                return reconcile(body, logger, **{k: v for k, v in kwargs.items() if k.endswith("_index")})

    def on_change(body, logger, **kwargs):
        run(body, logger, True, kwargs)

    def run_woken(body, logger, woken: bool, kwargs) -> float | None:
        if woken:
            # Whoever woke us has just written this object (a plan annotation, say)
            # and kopf's copy can trail that write: read it back.
            meta = body["metadata"]
            body = kube().get(kind, meta["namespace"], meta["name"])
            if body is None:
                return None
        # A wake waits for a reconcile in progress rather than being dropped.
        return run(body, logger, woken, kwargs)

    async def loop(body, logger, stopped, **kwargs):
        executor = asyncio.get_running_loop()
        key = (kind, body["metadata"]["namespace"], body["metadata"]["name"])
        woken = asyncio.Event()
        _wakers[key] = (executor, woken)
        if key in _pending_wakes:
            _pending_wakes.discard(key)
            woken.set()
        try:
            was_woken = await _pause(stopped, woken, CONFIG.timer_seconds)
            while not stopped:
                try:
                    # kopf's context (settings, event queue) must follow into the thread.
                    context = contextvars.copy_context()
                    delay = await executor.run_in_executor(None, context.run, run_woken, body, logger, was_woken, kwargs)
                except (kopf.TemporaryError, ApiError) as exc:
                    logger.warning(cond.printable(f"reconcile will be retried: {exc}"))
                    delay = getattr(exc, "delay", None)
                was_woken = await _pause(stopped, woken, delay or CONFIG.timer_seconds)
        finally:
            if _wakers.get(key, (None, None))[1] is woken:
                del _wakers[key]

    def on_delete(body, **_):
        forget(body["metadata"]["uid"])
        _pending_wakes.discard((kind, body["metadata"]["namespace"], body["metadata"]["name"]))
        if on_forget is not None:
            on_forget(body["metadata"]["namespace"], body["metadata"]["name"])

    from ..api import GROUP, VERSION
    _looping_kinds.add(kind)
    kopf.on.create(GROUP, VERSION, plural, id=f"{kind}-create")(on_change)
    kopf.on.resume(GROUP, VERSION, plural, id=f"{kind}-resume")(on_change)
    # Spec changes only: labels or annotations other tools write (the churn of,
    # say, a GitOps agent) cost no reconcile; the timer still runs. A new plan
    # annotation is written by this process, which wakes the child (converge).
    kopf.on.update(GROUP, VERSION, plural, id=f"{kind}-update", field="spec")(on_change)
    kopf.daemon(GROUP, VERSION, plural, id=f"{kind}-loop", cancellation_timeout=10)(loop)
    kopf.on.delete(GROUP, VERSION, plural, id=f"{kind}-forget", optional=True)(on_delete)


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


class NameTaken(Exception):
    """Children this object wants hold names another owner's objects have: nothing of theirs was touched."""

    def __init__(self, keys: list[str]):
        super().__init__(", ".join(keys))
        self.keys = keys

    def states(self) -> dict[str, cond.State]:
        shown = ", ".join(k.replace("/", " ") for k in self.keys[:5]) + (", …" if len(self.keys) > 5 else "")
        return cond.failed("ChildNameTaken", f"{shown}: the name is held by an object of another owner; rename "
                                             "this object (or its pools, fleets or switches) so that its children's "
                                             "names are free. Nothing of the other owner was changed")


def converge(body: Mapping, desired: list[dict], kinds: tuple[str, ...], logger, extra_key: object = None) -> bool:
    """Apply and prune `body`'s children when the desired state changed (or on resync).

    Returns True when it wrote; a reconcile whose desired state is unchanged
    costs no API call here, and between resyncs only the children whose
    content changed are applied (a ramp step touches a few Deployments, not all).
    Raises NameTaken (after writing every other child) when another owner's
    object holds a child's name.
    """
    from ..apply import child_key, sync_children

    uid = body["metadata"]["uid"]
    children = {child_key(obj): _digest(obj) for obj in desired}
    digest = _digest([sorted(children.items()), extra_key])
    last = _applied.get(uid)
    if not needs_apply(uid, digest):
        return False
    resync = last is None or time.monotonic() - last[1] > CONFIG.resync_seconds
    before = {} if resync else _applied_children.get(uid, {})
    unchanged = frozenset(key for key, child in children.items() if before.get(key) == child)
    result = sync_children(kube(), body, desired, kinds, ObjectEvents(body, logger), unchanged=unchanged)
    if result.conflicts:
        # Not marked applied: the next reconcile looks again (the other owner may be gone by then).
        forget_applied(uid)
        raise NameTaken(result.conflicts)
    mark_applied(uid, digest)
    _applied_children[uid] = children
    # A child of ours whose plan (status.plan) just changed reconciles now: its
    # update handler runs on spec changes only, so it would wait for its next tick.
    for obj in desired:
        if child_key(obj) not in unchanged:
            wake(obj["kind"], body["metadata"]["namespace"], obj["metadata"]["name"])
    return True


def _seconds_since(timestamp: str) -> float:
    try:
        then = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return float("inf")  # NotReady with no usable time: treat as long gone
    return (datetime.datetime.now(datetime.timezone.utc) - then).total_seconds()


def evict_misplaced_pods(body: Mapping, selector: Mapping[str, str], switch_label: str, nodes, logger) -> int:
    """Delete pods the plan no longer has where they are, so their controllers re-create them on plan.

    Three cases: the pod's node now sits on another switch than the pod was
    planned for (node affinity is only checked at scheduling, so a relabelled
    node keeps its pods), the node has been NotReady for longer than
    SWITCHYARD_NOT_READY_GRACE_SECONDS (the plan has already left it; Kubernetes
    itself would wait 300 s), or the node is gone. A cordoned node keeps its
    pods: draining is the admin's call.
    """
    from ..builders.common import SWITCH_LABEL

    switch_of = {n.name: n.label(switch_label) for n in nodes}
    lost = sorted(n.name for n in nodes if n.not_ready_since is not None
                  and _seconds_since(n.not_ready_since) > CONFIG.not_ready_grace_seconds)
    # The scheduler honours the switch affinity, so pods can only become
    # misplaced when a node changes switch or is lost: list them only then (or on resync).
    key = f"{body['metadata']['uid']}/pods"
    digest = _digest([sorted(switch_of.items()), lost])
    if not needs_apply(key, digest):
        return 0
    mark_applied(key, digest)
    namespace = body["metadata"]["namespace"]
    pods = [p for p in kube().list("Pod", namespace, selector)
            if p.get("spec", {}).get("nodeName") and not p["metadata"].get("deletionTimestamp")]
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
            ObjectEvents(body, logger).info(f"Deleted pod {pod['metadata']['name']}: {why}", reason="Rescheduled")
            evicted += 1
    return evicted
