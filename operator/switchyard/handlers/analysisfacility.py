"""AnalysisFacility: read the indexes, decide (desired.facility), converge, hand attached fleets their plans, report."""

from __future__ import annotations

from ..api.plans import PLAN_FIELD_MANAGER
from ..builders.facility import fleet_object_name, pool_object_name
from ..desired.facility import CHILD_KINDS, DRIFT_STATUS, KIND, FacilityOutcome, desired_facility
from ..observe.drift import with_drift
from ..observe.metrics import MANAGED_OBJECTS, export_plan, forget_facility
from ..policy.settings import current
from .client import kube
from .converge import Refused, converge
from .drift import check as check_drift
from .indexes import attached_fleets, nodes_of, owned_objects
from .loop import register, wake
from .status import write_status

PLURAL = "analysisfacilities"


def reconcile(body, logger, node_index, pool_index, fleet_index, staging_index, **_) -> None:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    children = owned_objects(uid, pool_index, fleet_index, staging_index)
    attached = attached_fleets(fleet_index, namespace, name, uid)
    outcome = desired_facility(name, body["spec"], body.get("status"), nodes_of(node_index), children, attached,
                               current())
    for line in outcome.errors:
        logger.error(line)
    if not isinstance(outcome, FacilityOutcome):
        write_status(KIND, body, outcome.status, outcome.states, logger)  # nothing applied or pruned
        return
    try:
        wrote = converge(body, outcome.children, CHILD_KINDS, logger,
                         extra_key=[(fleet, plan.to_wire()) for fleet, plan in outcome.fleet_plans])
    except Refused as exc:
        write_status(KIND, body, {k: v for k, v in (body.get("status") or {}).items() if k in outcome.status},
                     exc.states(), logger)
        return
    states = outcome.states
    if wrote is not None:
        for fleet, plan in outcome.fleet_plans:
            kube().apply_status("WorkerFleet", namespace, fleet, {"plan": plan.to_wire()}, manager=PLAN_FIELD_MANAGER)
            wake("WorkerFleet", namespace, fleet)  # see converge
        states = outcome.states_after_write(wrote.live.values())
    spec, plan = outcome.spec, outcome.plan
    pool_names = {p.name: pool_object_name(name, p.name) for p in spec.cache_pools}
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(outcome.children))
    export_plan(namespace, name, spec.target_gbps, plan, pool_names=pool_names,
                fleet_names={f.name: fleet_object_name(name, f.name) for f in spec.fleets},
                fleets=[c for c in children + attached if c["kind"] == "WorkerFleet"])
    # Observed bytes against the plan's prediction: a condition and gauges, never a change to a child.
    drift, drift_status = check_drift(body, plan, outcome.status["plan"], pool_names, logger)
    status = {k: v for k, v in outcome.status.items() if k != DRIFT_STATUS}   # the old one, replaced here
    if drift_status is not None:
        status[DRIFT_STATUS] = drift_status
    write_status(KIND, body, status, with_drift(states, drift), logger)


register(PLURAL, KIND, reconcile, on_forget=forget_facility)
