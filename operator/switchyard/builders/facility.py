"""AnalysisFacility → its owned XCachePool, WorkerFleet and S3Staging objects."""

from __future__ import annotations

from ..api import API_VERSION
from ..api.analysisfacility import AnalysisFacilitySpec
from ..planner import Plan
from .common import FACILITY_LABEL, PLAN_ANNOTATION, child_name, dump_plan, labels


def pool_object_name(facility: str, pool: str) -> str:
    return child_name(facility, pool)


def fleet_object_name(facility: str, fleet: str) -> str:
    return child_name(facility, fleet)


def staging_object_name(facility: str) -> str:
    return child_name(facility, "staging")


def pool_plan(plan: Plan, pool: str, switch_label: str) -> dict:
    return {"switchLabel": switch_label,
            "hosts": {sw: list(nodes) for sw, nodes in sorted(plan.placement.caches.get(pool, {}).items())}}


def fleet_plan(facility: str, spec: AnalysisFacilitySpec, plan: Plan, fleet_key: str, pool_ref: str | None) -> dict:
    """A fleet's slice of the plan: its workers per switch and where its caches are."""
    pool_name = pool_ref or (spec.cache_pools[0].name if spec.cache_pools else None)
    pool = next((p for p in spec.cache_pools if p.name == pool_name), None)
    return {
        "switchLabel": spec.network.switch_label,
        "workers": dict(sorted(plan.placement.workers.get(fleet_key, {}).items())),
        # Of those, the ring (hashed) readers per switch: read back as the current placement.
        "hashed": dict(sorted((plan.placement.hashed.get(fleet_key) or {}).items())),
        "pool": pool_object_name(facility, pool.name) if pool else None,
        "poolPort": pool.port if pool else 1094,
        "cacheSwitches": sorted(plan.placement.caches.get(pool_name, {})),
        "routing": dict(sorted(plan.routing.items())),
        # The ring hashed readers use: cache host (node name) -> weight.
        "cacheRing": dict(sorted((plan.hash_weights.get(pool_name) or {}).items())),
        # Workers no node of the facility's switches has room for (cores, memory, pod slots).
        "unplaced": plan.unplaced.get(fleet_key, 0),
    }


def _child(kind: str, name: str, facility: str, spec: dict, plan_data: dict | None) -> dict:
    meta: dict = {"name": name, "labels": labels(kind.lower(), name, **{FACILITY_LABEL: facility})}
    if plan_data is not None:
        meta["annotations"] = {PLAN_ANNOTATION: dump_plan(plan_data)}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}


def build_children(facility: str, spec: AnalysisFacilitySpec, plan: Plan) -> list[dict]:
    """The inline children, each carrying its slice of the plan as an annotation."""
    ref = {"facilityRef": {"name": facility}}
    out = []
    for pool in spec.cache_pools:
        body = pool.to_wire()
        body.pop("name")
        out.append(_child("XCachePool", pool_object_name(facility, pool.name), facility, {**body, **ref},
                          pool_plan(plan, pool.name, spec.network.switch_label)))
    for fleet in spec.fleets:
        body = fleet.to_wire()
        body.pop("name")
        out.append(_child("WorkerFleet", fleet_object_name(facility, fleet.name), facility, {**body, **ref},
                          fleet_plan(facility, spec, plan, fleet.name, fleet.pool)))
    if spec.staging is not None:
        out.append(_child("S3Staging", staging_object_name(facility), facility,
                          {**spec.staging.to_wire(), **ref}, None))
    return out
