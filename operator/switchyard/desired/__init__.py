"""Desired state, one pure function per kind: what an object should have, and what to report.

    desired(object, observed world, settings) -> Outcome

The observed world is plain data the handler read (its indexes: nodes, owned
children, workloads; a Secret it fetched): no client, no clock, no globals.
The handler then converges the children the outcome names (`children is None`:
touch nothing, the input is bad or waiting) and writes its status. What a kind's
handler needs besides is a typed field of that kind's outcome (FacilityOutcome,
FleetWaiting, FleetOutcome, PoolOutcome), never a dict of loose keys. The same
functions serve `switchyard render`, so the preview is what the operator does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from .. import conditions as cond
from ..api import reasons
from ..builders.common import PolicyPeers
from ..policy.settings import Settings
from ..topology import format_validation_error

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Outcome:
    status: dict                                   # status fields beside the conditions
    states: dict[str, cond.State]                  # Ready, Progressing, Degraded
    children: list[dict] | None = None             # None: apply and prune nothing
    errors: tuple[str, ...] = ()                   # lines for the operator's log (already printable)
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message) to post on the object

    @property
    def converges(self) -> bool:
        return self.children is not None


def held(status: dict, states: dict[str, cond.State]) -> Outcome:
    """An outcome that changes no child: only the status says why."""
    return Outcome(status=status, states=states, children=None)


def validate(model: type[M], spec: Mapping) -> tuple[M | None, str]:
    """The spec as its model, or None and every error naming its field."""
    try:
        return model.model_validate(dict(spec or {})), ""
    except ValidationError as exc:
        return None, format_validation_error(exc, "spec")


def policy_peers(settings: Settings) -> PolicyPeers | None:
    """What the NetworkPolicies the operator makes admit beside a workload's clients (None: make none)."""
    return PolicyPeers(settings.release_namespace) if settings.network_policies else None


def awaiting(states: dict[str, cond.State], facility_name: str, facility: Mapping | None,
             what: str = "fleet") -> dict[str, cond.State]:
    """A fleet's or pool's answer, with why its plan is late when it waits for one (Ready reason AwaitingPlan).

    `facility`: the AnalysisFacility its facilityRef names, as read (None: there is none). A wait is
    never silent: a facility that does not exist, or that stands Ready=False without progressing
    (refused, or its planning failed), is named with its reason; one still progressing, with where it is.
    """
    ready = states["Ready"]
    if ready.status or ready.reason != reasons.AWAITING_PLAN:
        return states
    if facility is None:
        return cond.failed(reasons.FACILITY_NOT_FOUND,
                           f"AnalysisFacility {facility_name} does not exist in this namespace: "
                           f"nothing places this {what} (create it, or correct spec.facilityRef)")
    conditions = (facility.get("status") or {}).get("conditions")
    theirs, moving = cond.condition(conditions, "Ready"), cond.condition(conditions, "Progressing")
    if theirs is None:
        return cond.progressing(reasons.AWAITING_PLAN, f"{ready.message} (AnalysisFacility {facility_name} has not "
                                                       "reported yet)")
    if theirs.get("status") == "True":
        return states
    said = cond.printable(f"AnalysisFacility {facility_name} is Ready=False {theirs.get('reason', '')}: "
                          f"{theirs.get('message', '')}")
    if (moving or {}).get("status") == "True":
        return cond.progressing(reasons.AWAITING_PLAN, f"{ready.message}; {said}")
    return cond.failed(reasons.FACILITY_NOT_READY, f"{said}; the {what} waits for its plan")
