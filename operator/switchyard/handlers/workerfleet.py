"""WorkerFleet: decide (desired.workerfleet), ramp the starts, converge, report."""

from __future__ import annotations

import time

from .. import rampup
from ..api import WorkerFleetSpec
from ..builders.common import FLEET_LABEL
from ..builders.workerfleet import CHECK_CONTAINER, CHILD_KINDS, worker_image
from ..desired.workerfleet import (KIND, FleetIntent, FleetWaiting, desired_fleet, fleet_intent, routing_verdict,
                                   staging_name)
from ..observe.metrics import MANAGED_OBJECTS
from ..policy.settings import current
from . import memory
from .client import kube
from .converge import Refused, converge, evict_misplaced_pods
from .indexes import cache_pods_of, hot_files_of, nodes_of, per_switch, ring_weights_of, workloads_of
from .loop import register, wake
from .memory import FleetMemory, RoutingRead
from .status import post, why_waiting, write_status

PLURAL = "workerfleets"
# While a fleet's image has no verdict, its pods are listed at most every ROUTING_READ_SECONDS, the wait doubling
# up to ROUTING_READ_MAX_SECONDS each time none was found (pods whose checks never report: simulated nodes).
ROUTING_READ_SECONDS, ROUTING_READ_MAX_SECONDS = 10.0, 300.0


def _ramp(kept: FleetMemory, spec: WorkerFleetSpec, planned: dict[str, int], observed: dict[str, int]
          ) -> dict[str, int]:
    """Counts per switch for this reconcile: the plan, reached at most rampUp.maxStartsPerSecond.

    The counts last asked for are remembered: the Deployment index can lag
    behind the last write, and ramping from a stale count would undo a step.
    A ramp this process did not start (workers already there, nothing
    remembered: a new leader, a restart) goes on from the Deployments' counts
    with no tokens yet (rampup.resume), so a takeover adds no burst.
    """
    bucket, asked = kept.ramp, kept.asked or {}
    current = {sw: max(observed.get(sw, 0), asked.get(sw, 0)) for sw in set(observed) | set(asked)}
    if all(current.get(sw, 0) >= n for sw, n in planned.items()):
        kept.ramp, kept.asked = None, dict(planned)
        return dict(planned)
    rate, now = spec.ramp_up.max_starts_per_second, time.monotonic()
    if kept.asked is None and any(observed.values()):
        bucket = rampup.resume(now)
    bucket = rampup.refill(bucket, rate, now)
    counts = rampup.step(planned, current, int(bucket.tokens))
    started = sum(counts[sw] - min(current.get(sw, 0), n) for sw, n in planned.items())
    kept.ramp, kept.asked = rampup.spend(bucket, started), counts
    return counts


def read_routing(kept: FleetMemory, namespace: str, name: str, intent: FleetIntent, started: int) -> dict | None:
    """The routing verdict for the fleet's image: the status's once known; until then, read from the
    workers' routing-check init containers (listed only once a worker was started, and at the pace
    kept in `kept.routing_read`), each pod kept only as far as the verdict needs."""
    if not intent.plan.pool:
        return None
    if (known := intent.known_routing()) is not None:
        return known
    image, now, last = worker_image(intent.spec), time.monotonic(), kept.routing_read
    if not started or (last.image == image and now - last.at < last.wait):
        return None
    verdict = routing_verdict(kube().list("Pod", namespace, {FLEET_LABEL: name}, keep=_check_part), image)
    wait = ROUTING_READ_SECONDS if last.image != image else min(2 * last.wait, ROUTING_READ_MAX_SECONDS)
    kept.routing_read = RoutingRead(image, now, wait)
    return verdict


def _check_part(pod: dict) -> dict:
    """What routing_verdict reads of a pod: its name, its routing-check's spec and status."""
    return {"metadata": {"name": pod["metadata"]["name"]},
            "spec": {"initContainers": [c for c in pod["spec"].get("initContainers", []) if c["name"] == CHECK_CONTAINER]},
            "status": {"initContainerStatuses": [c for c in (pod.get("status") or {}).get("initContainerStatuses") or []
                                                 if c["name"] == CHECK_CONTAINER]}}


def reconcile(body, logger, deployment_index, node_index, cache_pod_index, hot_files_index, ring_weights_index,
              **_) -> float | None:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    staging = staging_name(body["spec"])
    intent = fleet_intent(name, namespace, body["spec"], body.get("status"), current(),
                          staging=kube().get("S3Staging", namespace, staging) if staging else None)
    facility = ((body["spec"] or {}).get("facilityRef") or {}).get("name")
    if isinstance(intent, FleetWaiting):  # nothing to build yet, and why
        if intent.wake_facility:
            wake("AnalysisFacility", namespace, facility)
        write_status(KIND, body, intent.status, why_waiting(intent.states, namespace, facility), logger)
        return None
    if intent.wake_facility:
        wake("AnalysisFacility", namespace, facility)
    workloads = per_switch(workloads_of(deployment_index, uid))
    kept = memory.of(body, FleetMemory)
    counts = _ramp(kept, intent.spec, dict(intent.plan.workers), {sw: w["desired"] for sw, w in workloads.items()})
    started = sum(w["current"] for w in workloads.values())
    outcome = desired_fleet(name, namespace, intent, counts, workloads, current(), nodes_of(node_index),
                            routing=read_routing(kept, namespace, name, intent, started),
                            cache_pods=cache_pods_of(cache_pod_index, namespace, intent.plan.pool),
                            hot_files=hot_files_of(hot_files_index, namespace, intent.plan.pool),
                            ring_weights=ring_weights_of(ring_weights_index, namespace, intent.plan.pool))
    if (unaddressed := outcome.unaddressed) and kept.unaddressed != unaddressed:
        logger.warning(f"Cache host(s) {', '.join(unaddressed)} have no InternalIP: the ring names them by node "
                       "name, which workers resolve only where the site's DNS knows node names")
    kept.unaddressed = unaddressed
    try:
        converge(body, outcome.children, CHILD_KINDS, logger)
    except Refused as exc:
        write_status(KIND, body, intent.base, exc.states(), logger)
        return None
    evict_misplaced_pods(body, {FLEET_LABEL: name}, intent.plan.switch_label, nodes_of(node_index), logger)
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(outcome.children))
    post(body, outcome.events, logger)
    write_status(KIND, body, outcome.status, why_waiting(outcome.states, namespace, facility), logger)
    return outcome.retry_seconds


register(PLURAL, KIND, reconcile)
