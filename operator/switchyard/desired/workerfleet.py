"""WorkerFleet: the planned workers per switch, as far as the ramp-up has reached, and how ready they are.

Two steps, both pure: `fleet_intent` reads the spec and the plan (or says why
nothing can be done yet); the handler then advances the fleet's start-rate
token bucket (the one piece of state that needs a clock) and `desired_fleet`
builds the workloads for the counts it reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import conditions as cond
from ..api import S3StagingSpec, WorkerFleetSpec, reasons
from ..api.plans import FleetPlan, decode
from ..builders.s3staging import staging_env
from ..builders.workerfleet import (CHECK_CONTAINER, build_fleet, build_routing_config, engine, pod_selector,
                                    ring_entries, worker_image)
from ..policy.imagepolicy import refusal
from ..observe.initreports import init_container, last_runs
from ..routing import check
from ..policy.settings import Settings
from ..topology import NodeInfo
from . import Outcome, policy_peers, validate
from .xcachepool import hosts_out, published_ring

KIND = "WorkerFleet"


@dataclass(frozen=True, kw_only=True)
class FleetWaiting(Outcome):
    """Nothing is built yet, and why (a held outcome); `wake_facility`: the plan is not for this many
    workers (new or rescaled), so the facility should re-plan now."""

    wake_facility: bool = False


@dataclass(frozen=True, kw_only=True)
class FleetOutcome(Outcome):
    """A fleet that converges: besides its children, when to come back and what to warn about."""

    retry_seconds: float | None = None      # come back this soon (ramping up) rather than at the next tick
    unaddressed: tuple[str, ...] = ()       # the ring's cache hosts without an InternalIP, named by node name


@dataclass(frozen=True)
class FleetIntent:
    spec: WorkerFleetSpec
    plan: FleetPlan
    staging_env: tuple[dict, ...]
    base: dict                 # status fields every answer carries (selector, engine)
    wake_facility: bool        # the plan is not for this many workers: the facility should re-plan now
    before: Mapping | None = None  # the status as it stands (its routing verdict, its conditions)

    def known_routing(self) -> dict | None:
        """The routing verdict the status holds for the fleet's current image (None: not yet known)."""
        known = (self.before or {}).get("routing")
        return dict(known) if known and known.get("image") == worker_image(self.spec) else None


def staging_name(spec_raw: Mapping) -> str | None:
    """The S3Staging a fleet's workers get, so the handler can read it first."""
    return (spec_raw or {}).get("staging")


def accounts_for(plan: FleetPlan | None, replicas: int) -> bool:
    """The plan is for this many workers: placed per switch, plus those no node has room for."""
    return plan is not None and sum(plan.workers.values()) + plan.unplaced == replicas


def fleet_intent(name: str, namespace: str, spec_raw: Mapping, status: Mapping | None, settings: Settings, *,
                 staging: Mapping | None = None) -> FleetIntent | FleetWaiting:
    """The fleet's spec and plan, or what says why nothing is built (FleetWaiting).

    `staging`: the S3Staging object the spec names, as read (None: missing).
    """
    base = {"selector": pod_selector(name)}
    spec, error = validate(WorkerFleetSpec, spec_raw)
    if spec is None:
        return FleetWaiting(base, cond.failed(reasons.INVALID_SPEC, error))
    base["engine"] = engine(spec)
    # Workers and the scheduler; the jitter helper is the operator's own image.
    if blocked := refusal([worker_image(spec)], settings.images):
        return FleetWaiting(base, blocked)
    plan, invalid = decode(FleetPlan, dict(status or {}), spec.facility_ref.name)
    if invalid:
        return FleetWaiting(base, cond.failed(reasons.INVALID_PLAN, invalid))
    if plan is not None and plan.problem is not None:
        # The facility placed none of this fleet, and says why; it re-plans when the fleet changes.
        return FleetWaiting(base, cond.failed(plan.problem.reason, plan.problem.message))
    wake = not accounts_for(plan, spec.replicas)  # new or rescaled: the facility re-plans now
    if plan is None:
        return FleetWaiting(base, cond.progressing(reasons.AWAITING_PLAN,
                                                   f"waiting for AnalysisFacility {spec.facility_ref.name} "
                                                   "to place this fleet"), wake_facility=wake)
    env: tuple[dict, ...] = ()
    if spec.staging:
        if staging is None:
            return FleetWaiting(base, cond.progressing(reasons.AWAITING_STAGING,
                                                       f"S3Staging {spec.staging} not found"), wake_facility=wake)
        staging_spec, error = validate(S3StagingSpec, staging.get("spec") or {})
        if staging_spec is None:
            return FleetWaiting(base, cond.progressing(reasons.AWAITING_STAGING,
                                                       f"S3Staging {spec.staging} is invalid: {error}"),
                                wake_facility=wake)
        env = tuple(staging_env(spec.staging, namespace, staging_spec))
    return FleetIntent(spec, plan, env, base, wake, before=status)


def routing_verdict(pods: Sequence[dict], image: str) -> dict | None:
    """status.routing from the `routing-check` init containers (routing/check.py) of the fleet's pods whose
    check ran `image`: one that cannot route outweighs those that can; None while no check has finished.

    A check that failed (its image has no python3, its import crashed: the kubelet keeps the start error,
    or the log's end, as its message) counts as one that cannot route; one that succeeded without a
    verdict in its message (a simulated node's) says nothing."""
    found: dict[bool, str] = {}
    runs = ((pod, run) for pod, run in last_runs(pods, CHECK_CONTAINER)
            if (init_container(pod, CHECK_CONTAINER) or {}).get("image") == image)
    for _, run in sorted(runs, key=lambda pr: (pr[0].get("metadata") or {}).get("name", "")):
        verdict = check.parse(run.get("message") or "")
        if run.get("exitCode") == 0 and verdict is None:
            continue
        if run.get("exitCode") != 0:
            reason = run.get("reason") or f"exit code {run.get('exitCode')}"
            last = ((run.get("message") or "").strip().splitlines() or [""])[-1]
            verdict = check.Verdict(False, f"its routing check gave no verdict ({reason}{': ' + last if last else ''})")
        found.setdefault(verdict.routes, verdict.detail)
    if not found:
        return None
    routes = False not in found
    return {"image": image, "routes": routes, "message": found[routes]}


def routing_problem(intent: FleetIntent, routing: Mapping | None) -> cond.State | None:
    """Degraded=True RoutingUnavailable when the fleet's image, checked, cannot route its reads."""
    if not intent.plan.pool or not routing or routing.get("routes") or routing.get("image") != worker_image(intent.spec):
        return None
    return cond.State(True, reasons.ROUTING_UNAVAILABLE,
                      f"workers of image {routing['image']} cannot route root:// reads through XCachePool "
                      f"{intent.plan.pool}: {routing.get('message', '')}")


def desired_fleet(name: str, namespace: str, intent: FleetIntent, counts: Mapping[str, int],
                  workloads: Mapping[str, dict], settings: Settings, nodes: Sequence[NodeInfo] = (),
                  routing: Mapping | None = None, cache_pods: Sequence[Mapping] = (),
                  hot_files: Sequence[Mapping] = (), ring_weights: Mapping[str, float] | None = None) -> FleetOutcome:
    """The workloads for `counts` (workers per switch the ramp-up reached) and the fleet's status.

    `nodes`: where the ring's cache hosts are reached (their InternalIPs) in the routing ConfigMap;
    `routing`: the verdict of the workers' routing check for the fleet's image (routing_verdict), if known;
    `cache_pods`: the pool's cache pods ({"node", "ready"}): a ring host with no Ready one is left out of the
    routing ConfigMap (xcachepool.hosts_out), as the pool's status.ringOut says;
    `hot_files`: the pool's status.hotFiles ({path, replicas}), published beside the ring;
    `ring_weights`: the pool's status.ringWeights (host -> factor): a lowered host's published weight is the
    plan's times its factor (a host not listed: the plan's weight, so no factor gives the plan's ring text).
    """
    spec, plan = intent.spec, intent.plan
    children = build_fleet(name, namespace, spec, plan, helper_image=settings.exporter_image, counts=dict(counts),
                           staging_env=intent.staging_env, policies=policy_peers(settings))
    addresses = {node.name: node.address for node in nodes}
    out = hosts_out(plan.cache_ring, cache_pods)
    published = plan.model_copy(update={"cache_ring": published_ring(plan.cache_ring, out, ring_weights or {})})
    if (config := build_routing_config(name, published, addresses, hot_files)) is not None:
        children.insert(0, config)  # applied before the Deployments whose pods mount it
    planned = plan.workers
    switches = [{"switch": sw, "desired": n, "started": counts.get(sw, 0),
                 "ready": min(workloads.get(sw, {}).get("ready", 0), n)} for sw, n in sorted(planned.items())]
    ready = sum(s["ready"] for s in switches)
    total = sum(planned.values())
    started = sum(counts.values())
    status = {**intent.base, "replicas": sum(w["current"] for w in workloads.values()), "readyReplicas": ready,
              "switches": switches}
    retry: float | None = None
    if not accounts_for(plan, spec.replicas):
        states = cond.progressing(reasons.AWAITING_PLAN, f"plan has {total} of {spec.replicas} workers; re-planning")
    elif started < total:
        states = cond.progressing(reasons.RAMPING_UP, f"{started}/{total} workers started, at most "
                                                      f"{spec.ramp_up.max_starts_per_second:g} per second")
        # Come back when a few starts' worth of tokens have accrued (at most a second).
        retry = min(1.0, max(0.25, 5 / spec.ramp_up.max_starts_per_second))
    elif plan.unplaced:
        # The placed workers run; the rest start when a re-plan finds room (nodes added or freed).
        states = cond.failed(reasons.INSUFFICIENT_CAPACITY,
                             f"{plan.unplaced} of {spec.replicas} workers fit no node on the "
                             f"facility's switches (cores, memory or pod slots); {ready}/{total} "
                             "placed workers ready")
    elif ready == total:
        states = cond.ready(f"{ready} worker(s) ready on {len(switches)} switch(es)")
    else:
        states = cond.progressing(reasons.WORKERS_STARTING, f"{ready}/{total} workers ready")
    events: tuple[tuple[str, str, str], ...] = ()
    if plan.pool and routing and routing.get("image") == worker_image(spec):
        status["routing"] = dict(routing)
        if problem := routing_problem(intent, routing):
            before = cond.condition((intent.before or {}).get("conditions"), "Degraded") or {}
            if not states["Degraded"].status:
                states = {**states, "Degraded": problem}
            if before.get("status") != "True" or before.get("reason") != problem.reason:
                events = (("Warning", problem.reason, problem.message),)
    return FleetOutcome(status, states, children=children, events=events, retry_seconds=retry,
                        unaddressed=tuple(ring_entries(plan, addresses)[1]) if plan.pool else ())
