"""Offline: a facility file on a topology file → every manifest it would become."""

from __future__ import annotations

import pathlib

import yaml
from pydantic import ValidationError

from . import planner
from .api import AnalysisFacilitySpec, WorkerFleetSpec, XCachePoolSpec
from .api.plans import FleetPlan, PoolPlan
from .builders.facility import build_children
from .builders.workerfleet import build_fleet
from .builders.xcachepool import build_pool
from .planner import FleetRequest, PoolRequest
from .topology import load_topology, format_validation_error, snapshot

EXPORTER_IMAGE = "ghcr.io/switchyard-dev/switchyard:0.1.0"


def load_facility(path: str) -> tuple[dict, AnalysisFacilitySpec]:
    """The facility object and its validated spec; errors name the field."""
    doc = yaml.safe_load(pathlib.Path(path).read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "AnalysisFacility":
        raise ValueError(f"{path}: expected an AnalysisFacility object")
    try:
        return doc, AnalysisFacilitySpec.model_validate(doc.get("spec") or {})
    except ValidationError as exc:
        raise ValueError(format_validation_error(exc, f"{path}: spec")) from None


def plan_files(facility_path: str, topology_path: str) -> tuple[dict, AnalysisFacilitySpec, planner.Plan]:
    doc, spec = load_facility(facility_path)
    topo = load_topology(yaml.safe_load(pathlib.Path(topology_path).read_text()) or {}, topology_path)
    topology = snapshot(topo.node_infos(), spec.network)
    plan = planner.plan(topology, [PoolRequest(p.name, p) for p in spec.cache_pools],
                        [FleetRequest(f.name, f) for f in spec.fleets], spec.routing)
    return doc, spec, plan


def render_files(facility_path: str, topology_path: str) -> list[dict]:
    doc, spec, plan = plan_files(facility_path, topology_path)
    name = doc["metadata"]["name"]
    namespace = doc["metadata"].get("namespace", "default")
    out = []
    for child in build_children(name, spec, plan):
        child["metadata"]["namespace"] = namespace
        out.append(child)
        data = (child.get("status") or {}).get("plan") or {}
        child_name = child["metadata"]["name"]
        if child["kind"] == "XCachePool":
            pool, pool_plan = XCachePoolSpec.model_validate(child["spec"]), PoolPlan.model_validate(data)
            grandchildren = build_pool(child_name, pool, {sw: list(n) for sw, n in pool_plan.hosts.items()},
                                       pool_plan.switch_label, EXPORTER_IMAGE)
        elif child["kind"] == "WorkerFleet":
            fleet = WorkerFleetSpec.model_validate(child["spec"])
            grandchildren = build_fleet(child_name, namespace, fleet, FleetPlan.model_validate(data),
                                        helper_image=EXPORTER_IMAGE)
        else:
            grandchildren = []
        for obj in grandchildren:
            obj["metadata"]["namespace"] = namespace
        out.extend(grandchildren)
    return out
