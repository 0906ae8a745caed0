"""In-memory views kept by kopf: nodes, the workloads switchyard owns, and switchyard's own objects.

Indexes hold only what a reconcile reads (names, owners, conditions, plans,
and a fleet's spec), so a tick costs no request to the API server.
"""

from __future__ import annotations

import kopf

from ..api import GROUP, VERSION
from ..apply import OWNER_UID_LABEL
from ..builders.common import POOL_LABEL, SWITCH_LABEL
from ..topology import NodeInfo, node_info

MANAGED = {"app.kubernetes.io/managed-by": "switchyard"}


@kopf.index("nodes")
def node_index(body, **_):
    """name -> (NodeInfo, its client networks).

    kopf keeps a stored value that compares equal to the new one, and NodeInfo
    leaves its client networks out of its equality (they re-render the client
    map, they do not re-plan): paired with them, a pod CIDR or InternalIP
    change reaches the pools' client maps.
    """
    info = node_info(body)
    return {body["metadata"]["name"]: (info, info.client_networks)}


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


def cache_pod(body) -> dict:
    """What the hash ring reads of a cache pod: its node, and whether it serves (Ready, not being deleted)."""
    conditions = (body.get("status") or {}).get("conditions") or ()
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return {"name": body["metadata"]["name"], "node": (body.get("spec") or {}).get("nodeName"),
            "ready": ready and not body["metadata"].get("deletionTimestamp")}


@kopf.index("pods", labels={POOL_LABEL: kopf.PRESENT})
def cache_pod_index(body, **_):
    """(namespace, pool) -> its cache pods (cache_pod): which hosts the published ring keeps."""
    pool = (body["metadata"].get("labels") or {}).get(POOL_LABEL)
    return {(body["metadata"]["namespace"], pool): cache_pod(body)}


def cache_pods_of(index, namespace: str, pool: str | None) -> list[dict]:
    return sorted(index.get((namespace, pool), []), key=lambda p: p["name"]) if pool else []


@kopf.index(GROUP, VERSION, "xcachepools")
def hot_files_index(body, **_):
    """(namespace, pool) -> its status.hotFiles, for the pools that list any: the fleets publish them.
    A pool whose list emptied maps to {}, which drops its entry (None would keep the old list)."""
    hot = (body.get("status") or {}).get("hotFiles")
    return {(body["metadata"]["namespace"], body["metadata"]["name"]): list(hot)} if hot else {}


def hot_files_of(index, namespace: str, pool: str | None) -> list[dict]:
    return next(iter(index.get((namespace, pool), [])), []) if pool else []


@kopf.index(GROUP, VERSION, "xcachepools")
def ring_weights_index(body, **_):
    """(namespace, pool) -> its status.ringWeights (host -> factor), for the pools that lower any host: the
    fleets publish the plan's weights times them. A pool with none maps to {}, which drops its entry."""
    lowered = (body.get("status") or {}).get("ringWeights")
    return {(body["metadata"]["namespace"], body["metadata"]["name"]): dict(lowered)} if lowered else {}


def ring_weights_of(index, namespace: str, pool: str | None) -> dict[str, float]:
    return dict(next(iter(index.get((namespace, pool), [])), {})) if pool else {}


def reads_ring(plan: dict) -> bool:
    """Whether a fleet's plan has workers reading through its pool's ring (hashed on some switch). Every plan
    carries the pool's full cacheRing, even one whose workers all read their switch's caches: that is no sign."""
    return any((plan.get("hashed") or {}).values())


def fleets_reading(fleet_index, namespace: str, pool: str, ring_only: bool = False) -> list[str]:
    """The WorkerFleets (names) whose plan reads through `pool`: those that publish its ring; `ring_only`: those
    with workers reading through the ring (reads_ring)."""
    return sorted({f["metadata"]["name"] for store in fleet_index.values() for f in store
                   if f["metadata"]["namespace"] == namespace and (plan := f["status"].get("plan") or {}).get("pool") == pool
                   and (not ring_only or reads_ring(plan))})


def ring_read_through(fleet_index, namespace: str, pool: str) -> dict[str, float] | None:
    """The pool's ring (host -> weight) as the plans of the fleets whose workers read through it carry it (one
    facility plans them all: the first by name); None when no fleet has a worker reading the ring (reads_ring)."""
    plans = sorted(((f["metadata"]["name"], f["status"].get("plan") or {}) for store in fleet_index.values()
                    for f in store if f["metadata"]["namespace"] == namespace), key=lambda named: named[0])
    return next((dict(plan.get("cacheRing") or {}) for _, plan in plans
                 if plan.get("pool") == pool and reads_ring(plan)), None)


def nodes_of(index) -> list[NodeInfo]:
    return [info for store in index.values() for info, _ in store]


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


def _object(body, with_spec: bool = False) -> dict:
    """A switchyard object as the facility reads it: kind, name, owners, conditions and plan."""
    meta, status = body["metadata"], body.get("status") or {}
    out = {"kind": body["kind"],
           "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                        "generation": meta.get("generation", 0),
                        "ownerReferences": [{"uid": r.get("uid")} for r in meta.get("ownerReferences") or ()]},
           "status": {k: status[k] for k in ("conditions", "plan", "switches", "observedGeneration") if k in status}}
    if with_spec:
        out["spec"] = dict(body.get("spec") or {})
    return out


def _by_owner(body) -> dict:
    return {ref.get("uid"): _object(body) for ref in body["metadata"].get("ownerReferences") or () if ref.get("controller")}


@kopf.index(GROUP, VERSION, "xcachepools")
def pool_index(body, **_):
    """owner uid -> its XCachePools."""
    return _by_owner(body)


@kopf.index(GROUP, VERSION, "s3stagings")
def staging_index(body, **_):
    """owner uid -> its S3Stagings."""
    return _by_owner(body)


@kopf.index(GROUP, VERSION, "workerfleets")
def fleet_index(body, **_):
    """owner uid -> its WorkerFleets, and (namespace, facility) -> every WorkerFleet naming that facility."""
    fleet = _object(body, with_spec=True)
    facility = ((body.get("spec") or {}).get("facilityRef") or {}).get("name")
    keys = {ref.get("uid") for ref in body["metadata"].get("ownerReferences") or () if ref.get("controller")}
    out = {uid: fleet for uid in keys}
    if facility:
        out[(body["metadata"]["namespace"], facility)] = fleet
    return out


def owned_objects(uid: str, *indexes) -> list[dict]:
    """The switchyard objects `uid` owns, from the pool, fleet and staging indexes."""
    return [obj for index in indexes for obj in index.get(uid, [])]


def attached_fleets(fleet_index, namespace: str, facility: str, uid: str) -> list[dict]:
    """WorkerFleets an analysis team applied that attach to this facility (not the facility's own)."""
    return sorted((f for f in fleet_index.get((namespace, facility), [])
                   if not any(r.get("uid") == uid for r in f["metadata"]["ownerReferences"])),
                  key=lambda f: f["metadata"]["name"])
