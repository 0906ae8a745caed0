"""XCachePool: realise the planned cache hosts and report their readiness."""

from __future__ import annotations

from .. import conditions as cond
from ..api import GROUP, VERSION, XCachePoolSpec
from ..builders.common import POOL_LABEL, load_plan
from ..builders.xcachepool import CHILD_KINDS, build_pool, endpoint
from ..metrics import MANAGED_OBJECTS
from .common import CONFIG, converge, evict_misplaced_pods, register, validate, write_status
from .indexes import nodes_of, workloads_of

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


def reconcile(body, logger, node_index, statefulset_index, **_) -> None:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    spec, error = validate(XCachePoolSpec, body["spec"])
    if spec is None:
        write_status(KIND, body, {}, cond.failed("InvalidSpec", error), logger)
        return
    plan = load_plan(meta.get("annotations"))
    if plan is None:
        write_status(KIND, body, {}, cond.progressing(
            "AwaitingPlan", f"waiting for AnalysisFacility {spec.facility_ref.name} to place this pool"), logger)
        return
    hosts: dict[str, list[str]] = plan.get("hosts", {})
    desired = build_pool(name, spec, hosts, plan.get("switchLabel", "switchyard.dev/switch"), CONFIG.exporter_image)
    converge(body, desired, CHILD_KINDS, logger)
    evict_misplaced_pods(body, {POOL_LABEL: name}, plan.get("switchLabel", "switchyard.dev/switch"),
                         nodes_of(node_index), logger)
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(desired))

    workloads = {w["switch"]: w for w in workloads_of(statefulset_index, uid)}
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
    if planned and ready == planned:
        states = cond.ready(f"{ready} cache host(s) ready on {len(switches)} switch(es)")
    else:
        states = cond.progressing("HostsStarting", f"{ready}/{planned} cache hosts ready")
        lagging = [s["switch"] for s in switches if s["ready"] < s["desired"] and workloads.get(s["switch"], {}).get("current", 0) >= s["desired"]]
        if lagging:
            states["Degraded"] = cond.State(True, "HostsNotReady", f"hosts not ready on {', '.join(lagging)}")
    write_status(KIND, body, status, states, logger)


register(PLURAL, KIND, reconcile)
