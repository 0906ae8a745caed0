"""The per-object loop: one reconcile at a time per object, on every event, a timer, and wake()."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import kopf

from .. import conditions as cond
from ..api import GROUP, VERSION, reasons
from ..apply import ApiError
from ..observe.metrics import RECONCILE_SECONDS, RECONCILES, forget_object
from ..policy.settings import current
from . import memory
from .client import kube
from .status import write_status

# The loop's own bookkeeping (not what a reconcile remembers: that is memory.py's): one lock per object.
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


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


def forget(uid: str) -> memory.ObjectMemory | None:
    """The object is deleted: once a reconcile of it under way is done, drop its memory (returned) and its lock."""
    with serialised(uid, wait=True):
        kept = memory.drop(uid)
    with _locks_guard:
        _locks.pop(uid, None)
    return kept


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


def report_failure(kind: str, body, exc: Exception, logger) -> None:
    """An unexpected error in a reconcile: one log line and Ready=False ReconcileFailed, not a traceback loop."""
    logger.error(cond.printable(f"Reconcile failed ({type(exc).__name__}: {exc}); it runs again at the next tick"))
    try:
        write_status(kind, body, {}, cond.failed(reasons.RECONCILE_FAILED, f"the operator failed on this object "
                                                 f"({type(exc).__name__}); see its log. Running children are "
                                                 "left as they are"), logger)
    except Exception as again:  # noqa: BLE001 - the status write itself may be what fails
        logger.error(cond.printable(f"Could not report it on the object: {type(again).__name__}: {again}"))


def register(plural: str, kind: str, reconcile, on_forget=None, forgets_on_delete: bool = True) -> None:
    """Level-based handlers for one kind.

    Create, update and resume call `reconcile(body, logger, **indexes)`; a
    per-object loop calls it again after the delay it returns (None: the
    timer interval), so a ramp-up can come back every second without a retry
    storm of error events. One reconcile runs at a time per object. wake()
    runs the loop at once, on a fresh read of the object. On delete, the
    object's memory goes (forget), unless `forgets_on_delete` is False: the
    kind's own delete handler calls forget when it is done; then
    `on_forget(namespace, name)`.
    """

    def run(body, logger, wait: bool, kwargs) -> float | None:
        with serialised(body["metadata"]["uid"], wait) as got:
            if not got:
                return None
            try:
                with measured(kind):
                    return reconcile(body, logger, **{k: v for k, v in kwargs.items() if k.endswith("_index")})
            except (kopf.TemporaryError, kopf.PermanentError):
                raise
            except Exception as exc:  # noqa: BLE001 - a bug: said once, on the object, and tried again next tick
                report_failure(kind, body, exc, logger)
                return None

    def on_change(body, logger, **kwargs):
        run(body, logger, True, kwargs)

    def run_woken(body, logger, woken: bool, kwargs) -> float | None:
        if woken:
            # Whoever woke us has just written this object (its status.plan, say)
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
            was_woken = await _pause(stopped, woken, current().timer_seconds)
            while not stopped:
                try:
                    # kopf's context (settings, event queue) must follow into the thread.
                    context = contextvars.copy_context()
                    delay = await executor.run_in_executor(None, context.run, run_woken, body, logger, was_woken, kwargs)
                except (kopf.TemporaryError, ApiError) as exc:
                    logger.warning(cond.printable(f"reconcile will be retried: {exc}"))
                    delay = getattr(exc, "delay", None)
                was_woken = await _pause(stopped, woken, delay or current().timer_seconds)
        finally:
            if _wakers.get(key, (None, None))[1] is woken:
                del _wakers[key]

    def on_delete(body, **_):
        if forgets_on_delete:
            forget(body["metadata"]["uid"])
        _pending_wakes.discard((kind, body["metadata"]["namespace"], body["metadata"]["name"]))
        forget_object(kind, body["metadata"]["namespace"], body["metadata"]["name"])
        if on_forget is not None:
            on_forget(body["metadata"]["namespace"], body["metadata"]["name"])

    _looping_kinds.add(kind)
    kopf.on.create(GROUP, VERSION, plural, id=f"{kind}-create")(on_change)
    kopf.on.resume(GROUP, VERSION, plural, id=f"{kind}-resume")(on_change)
    # Spec changes only: labels or annotations other tools write (the churn of,
    # say, a GitOps agent) cost no reconcile; the timer still runs. A new plan
    # (status.plan) is written by this process, which wakes the child (converge).
    kopf.on.update(GROUP, VERSION, plural, id=f"{kind}-update", field="spec")(on_change)
    kopf.daemon(GROUP, VERSION, plural, id=f"{kind}-loop", cancellation_timeout=10)(loop)
    kopf.on.delete(GROUP, VERSION, plural, id=f"{kind}-forget", optional=True)(on_delete)
