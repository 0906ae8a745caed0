"""WorkerFleet: realise the planned workers per switch and report them."""

from __future__ import annotations

import time

from .. import conditions as cond
from .. import rampup
from ..api import WorkerFleetSpec
from ..api.plans import FleetPlan, decode
from ..builders.common import FLEET_LABEL
from ..builders.workerfleet import CHILD_KINDS, build_fleet, engine, pod_selector, worker_image
from ..imagepolicy import refusal
from ..metrics import MANAGED_OBJECTS
from .common import CONFIG, NameTaken, converge, evict_misplaced_pods, register, validate, wake, write_status
from .indexes import nodes_of, per_switch, workloads_of
from .s3staging import fleet_staging_env

KIND = "WorkerFleet"
PLURAL = "workerfleets"
# "namespace/name" -> (start tokens, counts per switch last asked for)
_ramps: dict[str, tuple[rampup.Bucket | None, dict[str, int]]] = {}


def _ramp(key: str, spec: WorkerFleetSpec, planned: dict[str, int], observed: dict[str, int]) -> dict[str, int]:
    """Counts per switch for this reconcile: the plan, reached at most rampUp.maxStartsPerSecond.

    The counts last asked for are remembered: the Deployment index can lag
    behind the last write, and ramping from a stale count would undo a step.
    """
    bucket, asked = _ramps.get(key, (None, {}))
    current = {sw: max(observed.get(sw, 0), asked.get(sw, 0)) for sw in set(observed) | set(asked)}
    if all(current.get(sw, 0) >= n for sw, n in planned.items()):
        _ramps[key] = (None, dict(planned))
        return dict(planned)
    rate = spec.ramp_up.max_starts_per_second
    bucket = rampup.refill(bucket, rate, time.monotonic())
    counts = rampup.step(planned, current, int(bucket.tokens))
    started = sum(counts[sw] - min(current.get(sw, 0), n) for sw, n in planned.items())
    _ramps[key] = (rampup.spend(bucket, started), counts)
    return counts


def _accounts_for(plan: FleetPlan | None, replicas: int) -> bool:
    """The plan is for this many workers: placed per switch, plus those no node has room for."""
    return plan is not None and sum(plan.workers.values()) + plan.unplaced == replicas


def _forget_ramp(namespace: str, name: str) -> None:
    _ramps.pop(f"{namespace}/{name}", None)


def reconcile(body, logger, deployment_index, node_index, **_) -> float | None:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    base = {"selector": pod_selector(name)}
    spec, error = validate(WorkerFleetSpec, body["spec"])
    if spec is None:
        write_status(KIND, body, base, cond.failed("InvalidSpec", error), logger)
        return
    base["engine"] = engine(spec)
    refused = refusal([worker_image(spec)])  # workers and scheduler; the jitter helper is the operator's image
    if refused:
        write_status(KIND, body, base, refused, logger)
        return
    plan, invalid = decode(FleetPlan, body.get("status"), spec.facility_ref.name)
    if invalid:
        write_status(KIND, body, base, cond.failed("InvalidPlan", invalid), logger)
        return
    if plan is not None and plan.problem is not None:
        # The facility placed none of this fleet, and says why; it re-plans when the fleet changes.
        write_status(KIND, body, base, cond.failed(plan.problem.reason, plan.problem.message), logger)
        return
    if not _accounts_for(plan, spec.replicas):
        # New or rescaled: the facility re-plans now rather than at its next tick.
        wake("AnalysisFacility", namespace, spec.facility_ref.name)
    if plan is None:
        write_status(KIND, body, base, cond.progressing(
            "AwaitingPlan", f"waiting for AnalysisFacility {spec.facility_ref.name} to place this fleet"), logger)
        return
    staging_env, problem = fleet_staging_env(namespace, spec.staging) if spec.staging else ([], "")
    if problem:
        write_status(KIND, body, base, cond.progressing("AwaitingStaging", problem), logger)
        return
    planned = dict(plan.workers)
    workloads = per_switch(workloads_of(deployment_index, uid))
    counts = _ramp(f"{namespace}/{name}", spec, planned, {sw: w["desired"] for sw, w in workloads.items()})
    desired = build_fleet(name, namespace, spec, plan, helper_image=CONFIG.exporter_image, counts=counts,
                          staging_env=staging_env)
    try:
        converge(body, desired, CHILD_KINDS, logger)
    except NameTaken as exc:
        write_status(KIND, body, base, exc.states(), logger)
        return
    evict_misplaced_pods(body, {FLEET_LABEL: name}, plan.switch_label, nodes_of(node_index), logger)
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(desired))

    switches = [{"switch": sw, "desired": n, "started": counts.get(sw, 0),
                 "ready": min(workloads.get(sw, {}).get("ready", 0), n)} for sw, n in sorted(planned.items())]
    current = sum(w["current"] for w in workloads.values())
    ready = sum(s["ready"] for s in switches)
    total = sum(planned.values())
    started = sum(counts.values())
    status = {**base, "replicas": current, "readyReplicas": ready, "switches": switches}
    unplaced = plan.unplaced
    if not _accounts_for(plan, spec.replicas):
        states = cond.progressing("AwaitingPlan", f"plan has {total} of {spec.replicas} workers; re-planning")
    elif started < total:
        states = cond.progressing("RampingUp", f"{started}/{total} workers started, at most "
                                               f"{spec.ramp_up.max_starts_per_second:g} per second")
        write_status(KIND, body, status, states, logger)
        # Come back when a few starts' worth of tokens have accrued (at most a second).
        return min(1.0, max(0.25, 5 / spec.ramp_up.max_starts_per_second))
    elif unplaced:
        # The placed workers run; the rest start when a re-plan finds room (nodes added or freed).
        states = cond.failed("InsufficientCapacity", f"{unplaced} of {spec.replicas} workers fit no node on the "
                                                     f"facility's switches (cores, memory or pod slots); {ready}/{total} "
                                                     "placed workers ready")
    elif ready == total:
        states = cond.ready(f"{ready} worker(s) ready on {len(switches)} switch(es)")
    else:
        states = cond.progressing("WorkersStarting", f"{ready}/{total} workers ready")
    write_status(KIND, body, status, states, logger)


register(PLURAL, KIND, reconcile, on_forget=_forget_ramp)
