"""XCachePool: read the indexes (and the hosts' exporters), decide (desired.xcachepool), converge, report."""

from __future__ import annotations

import time

import kopf

from ..api import GROUP, VERSION, XCachePoolSpec
from ..apply import ApiError
from ..builders.common import POOL_LABEL, SWITCH_LABEL
from ..builders.xcachepool import CHILD_KINDS
from ..observe.cachedisk import UnmountedDisk, disk_status, parse_host_disk, unmounted_disks
from ..desired import validate
from ..desired.xcachepool import KIND, DiskRead, PoolOutcome, desired_pool, ring_events, tls_secret_name
from ..observe.metrics import HOT_FILES, MANAGED_OBJECTS, RING_CHANGES, RING_HOSTS, export_ring_factors, forget_pool
from ..policy.settings import current
from ..topology import with_pod_networks
from . import memory
from .client import kube
from .converge import Refused, converge, evict_misplaced_pods
from .exporters import read_all, ready_cache_pods
from .indexes import cache_pods_of, fleets_reading, nodes_of, per_switch, ring_read_through, workloads_of
from .loop import register, wake
from .memory import PoolMemory
from .podnetworks import read_pod_networks
from .status import now, post, why_waiting, write_status

PLURAL = "xcachepools"


def read_disks(kept: PoolMemory, namespace: str, name: str, high_watermark: float) -> DiskRead:
    """status.disk from the ready hosts' exporters, read at most every SWITCHYARD_DISK_READ_SECONDS; the texts
    that answered are kept with it (the hot files are decided from them, no second read)."""
    cached = kept.disk_read
    if cached and time.monotonic() - cached[0] < current().disk_read_seconds:
        return cached[1]
    pods = ready_cache_pods(namespace, name)
    texts = read_all([p["status"]["podIP"] for p in pods])
    reports, unreachable = [], []
    for pod, text in zip(pods, texts):
        host = pod.get("spec", {}).get("nodeName") or pod["metadata"]["name"]
        switch = (pod["metadata"].get("labels") or {}).get(SWITCH_LABEL, "")
        report = parse_host_disk(text, host, switch, high_watermark) if text is not None else None
        if report is None:
            unreachable.append(host)
        else:
            reports.append(report)
    at = time.monotonic()
    read = DiskRead(disk_status(reports, unreachable, high_watermark, now()), tuple(reports),
                    tuple(text for text in texts if text is not None), read_at=at)
    kept.disk_read = (at, read)
    return read


def read_unmounted(namespace: str, name: str, workloads: dict[str, dict]) -> tuple[UnmountedDisk, ...]:
    """The paths the pool's cache pods refused as no mounted disk; the pods are listed only while a
    StatefulSet has fewer ready pods than it wants (a pod that passed its prepare step refuses nothing)."""
    if all(w.get("ready", 0) >= w.get("desired", 0) for w in workloads.values()):
        return ()
    return unmounted_disks(kube().list("Pod", namespace, {POOL_LABEL: name}))


def _secrets(namespace: str, name: str | None) -> dict[str, dict | None]:
    """The TLS Secret the pool's auth names, by name (None: missing); empty when none or not readable."""
    if not name:
        return {}
    try:
        return {name: kube().get("Secret", namespace, name)}
    except ApiError as exc:
        if exc.status == 403:
            return {}  # the chart's rbac.s3StagingSecrets is off: the kubelet reports a missing Secret
        raise


def reconcile(body, logger, node_index, statefulset_index, cache_pod_index, fleet_index, **_) -> None:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    workloads = per_switch(workloads_of(statefulset_index, uid))
    kept = memory.of(body, PoolMemory)
    disk = None
    if any(w["ready"] for w in workloads.values()):
        spec, _ = validate(XCachePoolSpec, body["spec"])
        if spec is not None:
            disk = read_disks(kept, namespace, name, spec.pfc.high_watermark)
    nodes = with_pod_networks(nodes_of(node_index), read_pod_networks(kept, logger))
    outcome = desired_pool(name, namespace, body["spec"], body.get("status"), workloads, nodes, current(),
                           secrets=_secrets(namespace, tls_secret_name(body["spec"])), disk=disk,
                           unmounted=read_unmounted(namespace, name, workloads),
                           pods=cache_pods_of(cache_pod_index, namespace, name),
                           ring=ring_read_through(fleet_index, namespace, name), ring_load=kept.ring_load)
    if not isinstance(outcome, PoolOutcome):  # nothing rendered, applied or pruned
        facility = ((body["spec"] or {}).get("facilityRef") or {}).get("name")
        write_status(KIND, body, outcome.status, why_waiting(outcome.states, namespace, facility, "pool"), logger)
        return
    try:
        converge(body, outcome.children, CHILD_KINDS, logger)
    except Refused as exc:
        write_status(KIND, body, {}, exc.states(), logger)
        return
    kept.ring_load = outcome.ring_load
    evict_misplaced_pods(body, {POOL_LABEL: name}, outcome.plan.switch_label, nodes, logger)
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(outcome.children))
    planned = {h for hosts in outcome.plan.hosts.values() for h in hosts}
    RING_HOSTS.labels(namespace, name).set(len(planned) - len(outcome.status["ringOut"]))
    if ring_events(body.get("status"), outcome.status["ringOut"]):
        RING_CHANGES.labels(namespace, name).inc()
    HOT_FILES.labels(namespace, name).set(len(outcome.status["hotFiles"]))
    export_ring_factors(namespace, name, {h: outcome.status["ringWeights"].get(h, 1.0) for h in sorted(planned)})
    post(body, outcome.events, logger)
    write_status(KIND, body, outcome.status, outcome.states, logger)


register(PLURAL, KIND, reconcile, on_forget=forget_pool)


@kopf.on.event("pods", labels={POOL_LABEL: kopf.PRESENT})
def cache_pod_changed(body, type, fleet_index, **_) -> None:
    """A cache pod was added, changed (its Ready condition) or deleted: the pool and the fleets that publish
    its ring reconcile now (cache_pod_index already holds the change), not at their next tick."""
    namespace = body["metadata"]["namespace"]
    pool = (body["metadata"].get("labels") or {}).get(POOL_LABEL)
    if type is None or not pool:  # kopf's initial listing: the reconciles that start read the index anyway
        return
    wake(KIND, namespace, pool)
    for fleet in fleets_reading(fleet_index, namespace, pool):
        wake("WorkerFleet", namespace, fleet)


def _published(body) -> tuple:
    """What the pool's fleets publish of its status beside the plan's ring: its hot files and weight factors."""
    status = body.get("status") or {}
    return list(status.get("hotFiles") or ()), dict(status.get("ringWeights") or {})


def published_moved(body, type, **_) -> bool:
    """Whether a pool's watch event carries another hot list or other ring weights than its last one:
    published_changed's filter, so kopf runs (and logs) it only then, not at every status write of the pool."""
    if type == "DELETED" or body["metadata"].get("deletionTimestamp"):
        return False   # the delete handler forgets the pool's memory; touching it would make it again
    return memory.of(body, PoolMemory).published_seen != _published(body)


@kopf.on.event(GROUP, VERSION, PLURAL, when=published_moved)
def published_changed(body, type, fleet_index, **_) -> None:
    """A pool's status.hotFiles or status.ringWeights changed: the fleets that read through it publish them
    now, not at their next tick. Here, not after the reconcile's status write: kopf updates hot_files_index
    and ring_weights_index, which the fleets publish from, before it runs the event's handlers."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    pool = memory.of(body, PoolMemory)
    seen, pool.published_seen = pool.published_seen, _published(body)
    if type is None or seen is None:  # kopf's initial listing, or first seen: fleets read it anyway
        return
    for fleet in fleets_reading(fleet_index, namespace, name):
        wake("WorkerFleet", namespace, fleet)
