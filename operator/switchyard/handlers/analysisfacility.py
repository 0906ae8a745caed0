"""AnalysisFacility: plan the placement and materialise the inline children."""

from __future__ import annotations

from .. import conditions as cond
from .. import hostpaths
from .. import planner
from ..apply import OWNER_UID_LABEL, owned_by
from ..api import AnalysisFacilitySpec
from ..api.plans import PLAN_FIELD_MANAGER, FleetPlan, PoolPlan, decode
from ..api.workerfleet import WorkerFleetSpec
from ..builders.facility import build_children, fleet_object_name, fleet_plan, pool_object_name, refused_fleet_plan
from ..builders.workerfleet import worker_image
from ..imagepolicy import refusal
from ..metrics import MANAGED_OBJECTS, export_plan, forget_facility
from ..planner import FleetRequest, Placement, PoolRequest
from ..topology import snapshot
from .common import NameTaken, converge, kube, register, validate, wake, write_status
from .indexes import nodes_of

KIND = "AnalysisFacility"
PLURAL = "analysisfacilities"
CHILD_KINDS = ("XCachePool", "WorkerFleet", "S3Staging")


def _owned_children(namespace: str, uid: str) -> list[dict]:
    return [c for kind in CHILD_KINDS for c in kube().list(kind, namespace, {OWNER_UID_LABEL: uid}) if owned_by(c, uid)]


def _standalone_fleets(namespace: str, facility: str, uid: str) -> list[dict]:
    """WorkerFleets an analysis team applied that attach to this facility."""
    return [f for f in kube().list("WorkerFleet", namespace)
            if (f.get("spec") or {}).get("facilityRef", {}).get("name") == facility
            and not any(o.get("uid") == uid for o in f["metadata"].get("ownerReferences", []))]


def _current_placement(children: list[dict], standalone: list[dict], spec: AnalysisFacilitySpec, facility: str) -> Placement:
    """The placement the children realise now, read back from the plans they hold (status.plan)."""
    pools = {pool_object_name(facility, p.name): p.name for p in spec.cache_pools}
    fleets = {fleet_object_name(facility, f.name): f.name for f in spec.fleets}
    caches, workers, hashed = {}, {}, {}
    for child in children + standalone:
        name = child["metadata"]["name"]
        if child["kind"] == "XCachePool" and name in pools:
            pool, _ = decode(PoolPlan, child.get("status"), facility)
            if pool is not None:
                caches[pools[name]] = {sw: tuple(nodes) for sw, nodes in pool.hosts.items()}
        elif child["kind"] == "WorkerFleet":
            fleet, _ = decode(FleetPlan, child.get("status"), facility)
            if fleet is not None and fleet.problem is None:
                workers[fleets.get(name, name)] = dict(fleet.workers)
                hashed[fleets.get(name, name)] = dict(fleet.hashed)
    return Placement(caches=caches, workers=workers, hashed=hashed)


def _summary(plan: planner.Plan) -> dict:
    return {
        "predictedGbps": plan.predicted_gbps,
        "boundGbps": plan.bound_gbps,
        "bottleneck": plan.bottleneck,
        "planner": plan.planner,
        "switches": [{
            "name": u.switch,
            "caches": plan.placement.cache_count(u.switch),
            "workers": plan.placement.worker_count(u.switch),
            "inGbps": u.in_gbps,
            "outGbps": u.out_gbps,
            "utilisation": round(u.utilisation, 4),
            "routing": plan.routing.get(u.switch, "local"),
        } for u in plan.uplinks],
    }


def _export(namespace: str, name: str, spec: AnalysisFacilitySpec, plan: planner.Plan, fleets: list[dict]) -> None:
    export_plan(namespace, name, spec.target_gbps, plan,
                pool_names={p.name: pool_object_name(name, p.name) for p in spec.cache_pools},
                fleet_names={f.name: fleet_object_name(name, f.name) for f in spec.fleets},
                fleets=[c for c in fleets if c["kind"] == "WorkerFleet"])


def _images(spec: AnalysisFacilitySpec) -> list[str]:
    """Every image the inline children would run (the operator's own helper image aside)."""
    images = [p.image for p in spec.cache_pools] + [worker_image(f) for f in spec.fleets]
    if spec.staging is not None and spec.staging.embedded is not None:
        images.append(spec.staging.embedded.image)
    return images


def _children_state(children: list[dict]) -> dict[str, cond.State]:
    not_ready = [c for c in children if not cond.is_true((c.get("status") or {}).get("conditions"), "Ready")]
    degraded = [c for c in children if cond.is_true((c.get("status") or {}).get("conditions"), "Degraded")]
    if not not_ready:
        states = cond.ready(f"{len(children)} children ready")
    else:
        names = ", ".join(f"{c['kind']} {c['metadata']['name']}" for c in not_ready[:5])
        states = cond.progressing("ChildrenNotReady", f"waiting for {names}")
    # A child can be Ready and still Degraded (a bucket over quota, a host down).
    if degraded:
        states["Degraded"] = cond.State(True, "ChildDegraded",
                                        ", ".join(f"{c['kind']} {c['metadata']['name']}" for c in degraded[:5]))
    return states


def reconcile(body, logger, node_index, **_) -> None:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    old_status = dict(body.get("status") or {})
    keep = {k: old_status[k] for k in ("switches", "caches", "workers", "plan") if k in old_status}

    spec, error = validate(AnalysisFacilitySpec, body["spec"])
    if spec is None:
        # Nothing is applied or pruned: running children stay as they are.
        write_status(KIND, body, keep, cond.failed("InvalidSpec", error), logger)
        return
    blocked = refusal(_images(spec)) or hostpaths.refusal(
        [path for pool in spec.cache_pools for path in hostpaths.pool_paths(pool.storage)])
    if blocked:
        # As for a bad spec: no child is created, changed or pruned.
        write_status(KIND, body, keep, blocked, logger)
        return

    topology = snapshot(nodes_of(node_index), spec.network)
    children = _owned_children(namespace, uid)
    standalone = _standalone_fleets(namespace, name, uid)
    standalone_specs = []
    for fleet in standalone:
        fleet_spec, _ = validate(WorkerFleetSpec, fleet["spec"])
        if fleet_spec is not None:  # an invalid fleet reports that itself
            standalone_specs.append((fleet, fleet_spec))
    try:
        plan, refused = _plan(topology, spec, standalone_specs, _current_placement(children, standalone, spec, name))
    except planner.Unsatisfiable as exc:
        write_status(KIND, body, keep, cond.failed(exc.reason, exc.message, degraded=bool(children)), logger)
        return
    except Exception as exc:  # noqa: BLE001 - a planner fault is this facility's condition, not a crash loop
        logger.error(cond.printable(f"Planning failed: {type(exc).__name__}: {exc}"))
        write_status(KIND, body, keep, cond.failed("PlanningFailed", f"the planner failed on this input "
                                                   f"({type(exc).__name__}); running children are left as they are",
                                                   degraded=bool(children)), logger)
        return

    desired = build_children(name, spec, plan)
    attached = [(fleet, refused_fleet_plan(name, spec, *refused[fleet["metadata"]["name"]])
                 if fleet["metadata"]["name"] in refused else
                 fleet_plan(name, spec, plan, fleet["metadata"]["name"], fleet_spec.pool))
                for fleet, fleet_spec in standalone_specs]
    try:
        wrote = converge(body, desired, CHILD_KINDS, logger,
                         extra_key=[(f["metadata"]["name"], d.to_wire()) for f, d in attached])
    except NameTaken as exc:
        write_status(KIND, body, keep, exc.states(), logger)
        return
    if wrote:
        for fleet, fleet_plan_ in attached:
            kube().apply_status("WorkerFleet", namespace, fleet["metadata"]["name"], {"plan": fleet_plan_.to_wire()},
                                manager=PLAN_FIELD_MANAGER)
            wake("WorkerFleet", namespace, fleet["metadata"]["name"])  # see converge
        children = _owned_children(namespace, uid)
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(children))
    _export(namespace, name, spec, plan, children + standalone)

    status = {
        "switches": sum(1 for s in topology.switches if s.hosts),
        "caches": sum(len(n) for by_sw in plan.placement.caches.values() for n in by_sw.values()),
        "workers": sum(n for by_sw in plan.placement.workers.values() for n in by_sw.values()),
        "plan": _summary(plan),
    }
    # A standalone fleet the facility could not place answers for itself (its own condition).
    states = _children_state(children + [f for f, _ in standalone_specs if f["metadata"]["name"] not in refused])
    problems = _plan_problems(topology, plan)
    if problems:
        states["Degraded"] = cond.State(True, problems[0][0], "; ".join(message for _, message in problems))
    write_status(KIND, body, status, states, logger)


def _plan(topology, spec: AnalysisFacilitySpec, standalone_specs: list, current: Placement
          ) -> tuple[planner.Plan, dict[str, tuple[str, str]]]:
    """Plan the facility's own pools and fleets with the standalone fleets it can place.

    One team's fleet must not stop the facility: a standalone fleet naming a
    pool the facility lacks, or one no node can hold, is left out of the plan
    and refused alone (returned as {fleet: (reason, message)}); so is one the
    planner fails on. What fails without any standalone fleet is the facility's.
    """
    pools = [PoolRequest(p.name, p) for p in spec.cache_pools]
    inline = [FleetRequest(f.name, f) for f in spec.fleets]
    pool_names = {p.name for p in spec.cache_pools}
    refused: dict[str, tuple[str, str]] = {}
    for fleet, fleet_spec in standalone_specs:
        if fleet_spec.pool is not None and fleet_spec.pool not in pool_names:
            refused[fleet["metadata"]["name"]] = (
                "UnknownPool", f"pool {fleet_spec.pool!r} is not one of the facility's cache pools "
                               f"({', '.join(sorted(pool_names)) or 'it has none'})")
    while True:
        requests = [FleetRequest(f["metadata"]["name"], s) for f, s in standalone_specs
                    if f["metadata"]["name"] not in refused]
        try:
            return planner.plan(topology, pools, inline + requests, spec.routing, current=current), refused
        except planner.Unsatisfiable as exc:
            if exc.fleet is None or exc.fleet not in {r.name for r in requests}:
                raise
            refused[exc.fleet] = (exc.reason, exc.message)
        except Exception:
            if not requests:
                raise
            # Find the standalone fleets the planner fails on, one at a time, beside the facility's own.
            planner.plan(topology, pools, inline, spec.routing)  # raises if the facility's own input fails
            for request in requests:
                try:
                    planner.plan(topology, pools, inline + [request], spec.routing)
                except Exception as exc:  # noqa: BLE001
                    refused[request.name] = ("PlanningFailed", f"the planner failed on this fleet ({type(exc).__name__})")
            if not any(r.name in refused for r in requests):
                raise


def _plan_problems(topology, plan: planner.Plan) -> list[tuple[str, str]]:
    """(reason, message) for what the plan had to do without, most pressing first."""
    problems = []
    if lost := topology.not_ready_nodes:
        problems.append(("NodesNotReady", f"{len(lost)} node(s) on the facility's switches are NotReady and left "
                                          f"out of the plan: {', '.join(lost[:5])}{', …' if len(lost) > 5 else ''}"))
    if plan.unplaced:
        problems.append(("WorkersUnplaced", ", ".join(f"fleet {name}: {n} worker(s) fit no node"
                                                      for name, n in sorted(plan.unplaced.items()))))
    if unknown := topology.unknown_switch_nodes:
        problems.append(("NodesOnUnknownSwitch", f"{len(unknown)} node(s) carry a switch not in "
                                                 f"spec.network.switches, e.g. {unknown[0]}"))
    return problems


register(PLURAL, KIND, reconcile, on_forget=forget_facility)
