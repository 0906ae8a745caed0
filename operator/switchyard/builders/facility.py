"""AnalysisFacility → its owned XCachePool, WorkerFleet and S3Staging objects."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from ..api import API_VERSION
from ..api.analysisfacility import AnalysisFacilitySpec
from ..api.base import OBJECT_NAME_MAX, Model
from ..api.plans import FleetPlan, PlanProblem, PoolPlan
from .common import FACILITY_LABEL, child_name, labels


def object_name(facility: str, part: str) -> str:
    """The name of an inline child: a switchyard object, so its own schema admits at most
    OBJECT_NAME_MAX characters (it prefixes its own children's names), fewer than child_name's
    MAX_NAME. A longer '<facility>-<part>' is cut there and keeps a hash of the whole; it starts
    with the facility's name, so it is a DNS-1035 label as the schema asks."""
    name = child_name(facility, part)
    if len(name) <= OBJECT_NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return name[: OBJECT_NAME_MAX - 9].rstrip("-") + "-" + digest


def pool_object_name(facility: str, pool: str) -> str:
    return object_name(facility, pool)


def fleet_object_name(facility: str, fleet: str) -> str:
    return object_name(facility, fleet)


def staging_object_name(facility: str) -> str:
    return object_name(facility, "staging")


def refused_fleet_plan(facility: str, spec: AnalysisFacilitySpec, reason: str, message: str) -> FleetPlan:
    """The plan of a fleet the facility could not place: no workers, and why (the fleet's own condition)."""
    return FleetPlan(facility=facility, switch_label=spec.network.switch_label,
                     problem=PlanProblem(reason=reason, message=message[:1024]))


def _child(kind: str, name: str, facility: str, spec: dict, plan: Model | None) -> dict:
    """A child object; its plan travels as `status.plan` (see api.plans: apply writes it apart)."""
    meta: dict = {"name": name, "labels": labels(kind.lower(), name, **{FACILITY_LABEL: facility})}
    child = {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}
    if plan is not None:
        child["status"] = {"plan": plan.to_wire()}
    return child


def build_children(facility: str, spec: AnalysisFacilitySpec, pool_plans: Mapping[str, PoolPlan],
                   fleet_plans: Mapping[str, FleetPlan]) -> list[dict]:
    """The inline children, each carrying its slice of the plan (as status.plan), by the pool's or fleet's name."""
    ref = {"facilityRef": {"name": facility}}
    out = []
    for pool in spec.cache_pools:
        body = pool.to_wire()
        body.pop("name")
        out.append(_child("XCachePool", pool_object_name(facility, pool.name), facility, {**body, **ref},
                          pool_plans[pool.name]))
    for fleet in spec.fleets:
        body = fleet.to_wire()
        body.pop("name")
        out.append(_child("WorkerFleet", fleet_object_name(facility, fleet.name), facility, {**body, **ref},
                          fleet_plans[fleet.name]))
    if spec.staging is not None:
        out.append(_child("S3Staging", staging_object_name(facility), facility,
                          {**spec.staging.to_wire(), **ref}, None))
    return out
