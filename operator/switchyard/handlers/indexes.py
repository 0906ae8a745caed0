"""In-memory views kept by kopf: nodes, and the workloads switchyard owns."""

from __future__ import annotations

import kopf

from ..apply import OWNER_UID_LABEL
from ..builders.common import SWITCH_LABEL
from ..topology import NodeInfo, node_info

MANAGED = {"app.kubernetes.io/managed-by": "switchyard"}


@kopf.index("nodes")
def node_index(body, **_):
    """name -> NodeInfo."""
    return {body["metadata"]["name"]: node_info(body)}


def _workload(body) -> dict:
    spec, status = body.get("spec") or {}, body.get("status") or {}
    return {
        "kind": body["kind"],
        "name": body["metadata"]["name"],
        "switch": (body["metadata"].get("labels") or {}).get(SWITCH_LABEL, ""),
        "desired": spec.get("replicas", 0),
        "current": status.get("replicas", 0),
        "ready": status.get("readyReplicas", 0),
    }


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
def deployment_index(body, **_):
    """owner uid -> workload summaries."""
    return {(body["metadata"].get("labels") or {}).get(OWNER_UID_LABEL): _workload(body)}


@kopf.index("apps", "v1", "statefulsets", labels=MANAGED)
def statefulset_index(body, **_):
    return {(body["metadata"].get("labels") or {}).get(OWNER_UID_LABEL): _workload(body)}


def nodes_of(index) -> list[NodeInfo]:
    return [info for store in index.values() for info in store]


def workloads_of(index, uid: str) -> list[dict]:
    return sorted(index.get(uid, []), key=lambda w: w["name"])


def per_switch(workloads: list[dict]) -> dict[str, dict]:
    """desired, current and ready summed per switch: a switch whose readers are split
    between local and ring routing has two worker Deployments."""
    totals: dict[str, dict] = {}
    for w in workloads:
        if w["switch"]:
            total = totals.setdefault(w["switch"], {"desired": 0, "current": 0, "ready": 0})
            for key in total:
                total[key] += w[key]
    return totals
