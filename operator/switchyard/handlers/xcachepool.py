"""XCachePool: realise the planned cache hosts and report their readiness."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import urllib3

from .. import conditions as cond
from .. import hostpaths
from ..api import XCachePoolSpec
from ..apply import ApiError
from ..api.plans import PoolPlan, decode
from ..builders.common import POOL_LABEL, SWITCH_LABEL
from ..builders.xcachepool import CHILD_KINDS, METRICS_PORT, build_pool, endpoint
from ..cachedisk import HostDisk, disk_status, full_hosts_message, parse_host_disk
from ..imagepolicy import refusal
from ..metrics import MANAGED_OBJECTS
from .common import CONFIG, NameTaken, ObjectEvents, converge, evict_misplaced_pods, kube, now, register, validate, write_status
from .indexes import nodes_of, per_switch, workloads_of

KIND = "XCachePool"
PLURAL = "xcachepools"


def _serving_gbps(spec: XCachePoolSpec, ready_by_switch: dict[str, int], hosts: dict[str, list[str]], node_index) -> float:
    nics = {n.name: n.nic_gbps for n in nodes_of(node_index)}
    total = 0.0
    for switch, ready in ready_by_switch.items():
        # Ready pods are not tied to hosts here; count the slowest hosts first to stay conservative.
        speeds = sorted(min(nics.get(h) or spec.serve_gbps, spec.serve_gbps) for h in hosts.get(switch, []))
        total += sum(speeds[:ready])
    return round(total, 3)


# Exporters answer on the cache host's own address (the pods use host networking).
_exporters = urllib3.PoolManager(num_pools=256, maxsize=1, retries=False,
                                 timeout=urllib3.Timeout(connect=2.0, read=3.0))
# "namespace/name" -> (when read, status.disk, the reports)
_disk_reads: dict[str, tuple[float, dict, list[HostDisk]]] = {}


def _is_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or ())


def _metrics_text(address: str) -> str | None:
    host = f"[{address}]" if ":" in address else address
    try:
        response = _exporters.request("GET", f"http://{host}:{METRICS_PORT}/metrics")
    except urllib3.exceptions.HTTPError:
        return None
    return response.data.decode("utf-8", "replace") if response.status == 200 else None


def read_disks(namespace: str, name: str, spec: XCachePoolSpec) -> tuple[dict, list[HostDisk]]:
    """status.disk from the ready hosts' exporters, read at most every SWITCHYARD_DISK_READ_SECONDS."""
    key = f"{namespace}/{name}"
    cached = _disk_reads.get(key)
    if cached and time.monotonic() - cached[0] < CONFIG.disk_read_seconds:
        return cached[1], cached[2]
    pods = [p for p in kube().list("Pod", namespace, {POOL_LABEL: name})
            if _is_ready(p) and p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(pods)))) as pool:
        texts = list(pool.map(lambda p: _metrics_text(p["status"]["podIP"]), pods))
    reports, unreachable = [], []
    for pod, text in zip(pods, texts):
        host = pod.get("spec", {}).get("nodeName") or pod["metadata"]["name"]
        switch = (pod["metadata"].get("labels") or {}).get(SWITCH_LABEL, "")
        report = parse_host_disk(text, host, switch, spec.pfc.high_watermark) if text is not None else None
        if report is None:
            unreachable.append(host)
        else:
            reports.append(report)
    status = disk_status(reports, unreachable, spec.pfc.high_watermark, now())
    _disk_reads[key] = (time.monotonic(), status, reports)
    return status, reports


def _forget_disks(namespace: str, name: str) -> None:
    _disk_reads.pop(f"{namespace}/{name}", None)


def _report_degraded(body, before: dict | None, after: cond.State, logger) -> None:
    """An event when Degraded turns on, changes reason, or clears."""
    was = (before or {}).get("status") == "True"
    if after.status and (not was or (before or {}).get("reason") != after.reason):
        ObjectEvents(body, logger).warning(after.message, reason=after.reason)
    elif was and not after.status:
        ObjectEvents(body, logger).info("No longer degraded: every planned host is ready and below its high water mark",
                                        reason="Recovered")


def tls_secret_problem(namespace: str, spec: XCachePoolSpec) -> dict[str, cond.State] | None:
    """Ready=False when scitokens names a TLS Secret that is missing or not a TLS Secret (its data is never read out)."""
    if spec.auth.mode != "scitokens" or not spec.auth.tls_secret:
        return None
    try:
        secret = kube().get("Secret", namespace, spec.auth.tls_secret)
    except ApiError as exc:
        if exc.status == 403:
            return None  # the chart's rbac.s3StagingSecrets is off: the kubelet reports a missing Secret
        raise
    if secret is None:
        return cond.progressing("TLSSecretNotFound", f"Secret {spec.auth.tls_secret} (auth.tlsSecret) does not exist")
    data = secret.get("data") or {}
    if secret.get("type") != "kubernetes.io/tls" or not data.get("tls.crt") or not data.get("tls.key"):
        return cond.failed("TLSSecretInvalid", f"Secret {spec.auth.tls_secret} (auth.tlsSecret) must be of type "
                                               "kubernetes.io/tls with tls.crt and tls.key")
    return None


def reconcile(body, logger, node_index, statefulset_index, **_) -> None:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    spec, error = validate(XCachePoolSpec, body["spec"])
    if spec is None:
        write_status(KIND, body, {}, cond.failed("InvalidSpec", error), logger)
        return
    if refused := refusal([spec.image]) or hostpaths.refusal(hostpaths.pool_paths(spec.storage)):
        # Nothing is rendered, applied or pruned: running hosts keep their disks and config.
        write_status(KIND, body, {}, refused, logger)
        return
    if problem := tls_secret_problem(namespace, spec):
        write_status(KIND, body, {}, problem, logger)
        return
    plan, invalid = decode(PoolPlan, body.get("status"), spec.facility_ref.name)
    if invalid:
        write_status(KIND, body, {}, cond.failed("InvalidPlan", invalid), logger)
        return
    if plan is None:
        write_status(KIND, body, {}, cond.progressing(
            "AwaitingPlan", f"waiting for AnalysisFacility {spec.facility_ref.name} to place this pool"), logger)
        return
    hosts = {sw: list(nodes) for sw, nodes in plan.hosts.items()}
    desired = build_pool(name, spec, hosts, plan.switch_label, CONFIG.exporter_image)
    try:
        converge(body, desired, CHILD_KINDS, logger)
    except NameTaken as exc:
        write_status(KIND, body, {}, exc.states(), logger)
        return
    evict_misplaced_pods(body, {POOL_LABEL: name}, plan.switch_label, nodes_of(node_index), logger)
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(desired))

    workloads = per_switch(workloads_of(statefulset_index, uid))
    switches = []
    for switch in sorted(hosts):
        w = workloads.get(switch, {})
        switches.append({"switch": switch, "desired": len(hosts[switch]), "ready": min(w.get("ready", 0), len(hosts[switch]))})
    planned = sum(s["desired"] for s in switches)
    ready = sum(s["ready"] for s in switches)
    status = {
        "hosts": planned,
        "readyHosts": ready,
        "switches": switches,
        "servingGbps": _serving_gbps(spec, {s["switch"]: s["ready"] for s in switches}, hosts, node_index),
        "endpoint": endpoint(name, namespace, spec.port),
    }
    reports: list[HostDisk] = []
    if ready:
        status["disk"], reports = read_disks(namespace, name, spec)
    if planned and ready == planned:
        states = cond.ready(f"{ready} cache host(s) ready on {len(switches)} switch(es)")
    else:
        states = cond.progressing("HostsStarting", f"{ready}/{planned} cache hosts ready")
    lagging = [s["switch"] for s in switches if s["ready"] < s["desired"] and workloads.get(s["switch"], {}).get("current", 0) >= s["desired"]]
    problems = [(reason, message) for reason, message in (
        ("HostsNotReady", f"hosts not ready on {', '.join(lagging)}" if lagging else ""),
        ("SpacePastHighWatermark", full_hosts_message(reports)),
    ) if message]
    if problems:
        states["Degraded"] = cond.State(True, problems[0][0], "; ".join(message for _, message in problems))
    _report_degraded(body, cond.condition((body.get("status") or {}).get("conditions"), "Degraded"), states["Degraded"], logger)
    write_status(KIND, body, status, states, logger)


register(PLURAL, KIND, reconcile, on_forget=_forget_disks)
