"""AnalysisFacility → its owned XCachePool, WorkerFleet and S3Staging objects."""

from __future__ import annotations

import hashlib

from ..api import API_VERSION
from ..api.analysisfacility import AnalysisFacilitySpec
from ..api.base import OBJECT_NAME_MAX, Model
from ..api.plans import FleetPlan, PlanProblem, PoolPlan
from ..planner import Plan
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


def pool_plan(facility: str, plan: Plan, pool: str, switch_label: str) -> PoolPlan:
    return PoolPlan(facility=facility, switch_label=switch_label,
                    hosts={sw: sorted(nodes) for sw, nodes in sorted(plan.placement.caches.get(pool, {}).items())})


def fleet_plan(facility: str, spec: AnalysisFacilitySpec, plan: Plan, fleet_key: str, pool_ref: str | None) -> FleetPlan:
    """A fleet's slice of the plan: its workers per switch and where its caches are."""
    pool_name = pool_ref or (spec.cache_pools[0].name if spec.cache_pools else None)
    pool = next((p for p in spec.cache_pools if p.name == pool_name), None)
    return FleetPlan(
        facility=facility,
        switch_label=spec.network.switch_label,
        workers=dict(sorted(plan.placement.workers.get(fleet_key, {}).items())),
        # Of those, the ring (hashed) readers per switch: read back as the current placement.
        hashed=dict(sorted((plan.placement.hashed.get(fleet_key) or {}).items())),
        pool=pool_object_name(facility, pool.name) if pool else None,
        pool_port=pool.port if pool else 1094,
        pool_origin_mode=pool.origin.mode if pool else "fixed",
        cache_switches=sorted(plan.placement.caches.get(pool_name, {})),
        routing=dict(sorted(plan.routing.items())),
        # The ring hashed readers use: cache host (node name) -> weight.
        cache_ring=dict(sorted((plan.hash_weights.get(pool_name) or {}).items())),
        # Workers no node of the facility's switches has room for (cores, memory, pod slots).
        unplaced=plan.unplaced.get(fleet_key, 0),
    )


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


def build_children(facility: str, spec: AnalysisFacilitySpec, plan: Plan) -> list[dict]:
    """The inline children, each carrying its slice of the plan (as status.plan)."""
    ref = {"facilityRef": {"name": facility}}
    out = []
    for pool in spec.cache_pools:
        body = pool.to_wire()
        body.pop("name")
        out.append(_child("XCachePool", pool_object_name(facility, pool.name), facility, {**body, **ref},
                          pool_plan(facility, plan, pool.name, spec.network.switch_label)))
    for fleet in spec.fleets:
        body = fleet.to_wire()
        body.pop("name")
        out.append(_child("WorkerFleet", fleet_object_name(facility, fleet.name), facility, {**body, **ref},
                          fleet_plan(facility, spec, plan, fleet.name, fleet.pool)))
    if spec.staging is not None:
        out.append(_child("S3Staging", staging_object_name(facility), facility,
                          {**spec.staging.to_wire(), **ref}, None))
    return out
