"""Status and events: conditions written only when they change, events with a reason, one printable line each."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping

import kopf

from .. import conditions as cond
from ..api import KINDS, reasons
from ..desired import awaiting
from .client import kube

STATUS_MODELS = {k.kind: k.status for k in KINDS}


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


def post(body: Mapping, events: Iterable[tuple[str, str, str]], logger) -> None:
    """(type, reason, message) events from a desired-state outcome."""
    for kind, reason, message in events:
        if kind == "Warning":
            ObjectEvents(body, logger).warning(message, reason=reason)
        else:
            ObjectEvents(body, logger).info(message, reason=reason)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def next_status(kind: str, body: Mapping, status: dict, states: dict[str, cond.State], at: str) -> dict | None:
    """The status to write: `status` with the merged conditions, checked by the kind's *Status
    model (a field it does not know, or of the wrong type, is a bug and raises); None when nothing changed."""
    old = dict(body.get("status") or {})
    generation = body["metadata"].get("generation", 0)
    status = {**status, "observedGeneration": generation,
              "conditions": cond.merge(old.get("conditions", []), generation, at, **states)}
    model = STATUS_MODELS[kind].model_validate(status)
    # The fields the reconcile set, each with its nested defaults filled in as the API
    # server's schema defaulting stores them (else every comparison differs: a write a tick).
    full = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    status = {key: full[key] for key in model.model_dump(by_alias=True, exclude_unset=True) if key in full}
    comparable = {k: v for k, v in status.items() if k != "conditions"}
    old_comparable = {k: old.get(k) for k in comparable}
    strip = lambda cs: [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs or []]  # noqa: E731
    if comparable == old_comparable and strip(status["conditions"]) == strip(old.get("conditions")):
        return None
    return status


def why_waiting(states: dict[str, cond.State], namespace: str, facility: str | None,
                what: str = "fleet") -> dict[str, cond.State]:
    """States that wait for a plan say what the facility says (desired.awaiting): one read, only while waiting."""
    if states["Ready"].reason != reasons.AWAITING_PLAN or not facility:
        return states
    return awaiting(states, facility, kube().get("AnalysisFacility", namespace, facility), what)


def write_status(kind: str, body: Mapping, status: dict, states: dict[str, cond.State], logger) -> None:
    """Set conditions and fields on the status subresource, only when they change; an event when Ready changes."""
    status = next_status(kind, body, status, states, now())
    if status is None:
        return
    old = dict(body.get("status") or {})
    before = cond.condition(old.get("conditions"), "Ready")
    after = cond.condition(status["conditions"], "Ready")
    if not before or before.get("status") != after["status"] or before.get("reason") != after["reason"]:
        text = f"Ready={after['status']} ({after['reason']})" + (f": {after['message']}" if after["message"] else "")
        events = ObjectEvents(body, logger)
        if after["status"] == "True":
            events.info(text, reason=reasons.READY)
        else:
            events.warning(text, reason=after["reason"])
    meta = body["metadata"]
    kube().apply_status(kind, meta["namespace"], meta["name"], status)
