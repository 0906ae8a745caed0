"""Placement (b) on real nodes: the operator's own rendered workloads, without switchyard's placement.

What a site runs without switchyard: the same pods (images, commands, volumes,
resources, probes, the rendered xrootd ConfigMap) as one cache StatefulSet and one
worker Deployment, placed by kube-scheduler alone and routed by hashing over all
cache hosts with equal weights. Taken away: the required node affinity to a switch
(and to the planned hosts), the per-switch split of the workloads, the switch in the
pods' environment, and the ring's weights. Kept: what a site would set anyway, the
caches on NVMe nodes (their disks are there) and the taints' tolerations.

Pure: manifests in, manifests out.
"""

from __future__ import annotations

import copy
from typing import Iterable, Mapping

PREFIX = "dflt"
_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "ownerReferences",
                  "annotations")


def _plain(workload: dict, name: str, replicas: int) -> dict:
    """A copy of `workload` as a fresh object `name` of `replicas`, labelled app=`name` only."""
    obj = copy.deepcopy(workload)
    obj.pop("status", None)
    meta = obj["metadata"]
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    meta["name"] = name
    meta["labels"] = {"app": name}
    spec = obj["spec"]
    spec["replicas"] = replicas
    spec["selector"] = {"matchLabels": {"app": name}}
    spec["template"]["metadata"]["labels"] = {"app": name}
    pod = spec["template"]["spec"]
    pod.pop("affinity", None)
    pod.pop("topologySpreadConstraints", None)
    pod.pop("nodeSelector", None)
    for container in pod.get("containers", []):
        container["env"] = [e for e in container.get("env", []) if e["name"] != "SWITCHYARD_SWITCH"]
    if obj["kind"] == "StatefulSet":
        spec["serviceName"] = name
    return obj


def equal_ring(ring: str) -> str:
    """The ring's hosts (the routing ConfigMap's `ring`, or SWITCHYARD_CACHE_RING), each weighted 1, as
    SWITCHYARD_CACHE_RING (`node@root://address:port=1,...`)."""
    entries = [e.strip() for line in ring.splitlines() if not line.startswith("#") for e in line.split(",")]
    return ",".join(entry.rsplit("=", 1)[0] + "=1" for entry in entries if entry)


def workloads(statefulsets: Iterable[dict], deployments: Iterable[dict], nvme_label: str, ring: str) -> list[dict]:
    """One cache StatefulSet and one worker Deployment with the operator's pods' counts, placement left to
    the scheduler (caches: any node with the NVMe label). `ring`: the fleet's routing ConfigMap's ring; the
    baseline's workers are given its hosts, equally weighted, in SWITCHYARD_CACHE_RING instead of the file."""
    statefulsets, deployments = sorted(statefulsets, key=_name), sorted(deployments, key=_name)
    caches = _plain(statefulsets[0], f"{PREFIX}-xcache", sum(s["spec"]["replicas"] for s in statefulsets))
    caches["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": nvme_label, "operator": "Exists"}]}]}}}
    for container in caches["spec"]["template"]["spec"]["containers"]:
        if container["name"] == "exporter":   # the sidecar labels its metrics with a switch; it has none here
            container["args"] = _without_option(container.get("args", []), "--switch")
    workers = _plain(deployments[0], f"{PREFIX}-dask", sum(d["spec"]["replicas"] for d in deployments))
    for container in workers["spec"]["template"]["spec"]["containers"]:
        container["env"] = [e for e in container["env"] if e["name"] != "SWITCHYARD_CACHE_RING_FILE"] + \
            [{"name": "SWITCHYARD_CACHE_RING", "value": equal_ring(ring)}]
    return [caches, workers]


def _without_option(args: list[str], option: str) -> list[str]:
    if option not in args:
        return args
    i = args.index(option)
    return args[:i] + args[i + 2:]


def _name(obj: Mapping) -> str:
    return obj["metadata"]["name"]
