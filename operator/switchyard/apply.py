"""The only module that writes to the API server.

Server-side apply with one fixed field manager, so switchyard owns exactly
the fields it sets and leaves labels, annotations and fields that other
tools add alone; pruning deletes only children that carry this owner's UID
label and are no longer desired.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import quote, urlencode

import urllib3

from .api import GROUP, KINDS, VERSION
from .api.plans import PLAN_FIELD_MANAGER
from .kubeconfig import Connection, load

FIELD_MANAGER = "switchyard"
OWNER_UID_LABEL = "switchyard.dev/owner-uid"
MANAGED_BY = {"app.kubernetes.io/managed-by": "switchyard"}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resource:
    api_version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
        if subresource:
            base += f"/{subresource}"
        return base


RESOURCES: dict[str, Resource] = {
    "ConfigMap": Resource("v1", "configmaps"),
    "Secret": Resource("v1", "secrets"),
    "Service": Resource("v1", "services"),
    "Pod": Resource("v1", "pods"),
    "Event": Resource("v1", "events"),
    "Namespace": Resource("v1", "namespaces", namespaced=False),
    "Node": Resource("v1", "nodes", namespaced=False),
    "Deployment": Resource("apps/v1", "deployments"),
    "StatefulSet": Resource("apps/v1", "statefulsets"),
    "PodDisruptionBudget": Resource("policy/v1", "poddisruptionbudgets"),
    "NetworkPolicy": Resource("networking.k8s.io/v1", "networkpolicies"),
    "Job": Resource("batch/v1", "jobs"),
    "Lease": Resource("coordination.k8s.io/v1", "leases"),
    # Pod address ranges of network plugins with an IPAM of their own (handlers/podnetworks.py): listed only.
    "BlockAffinity": Resource("crd.projectcalico.org/v1", "blockaffinities", namespaced=False),
    "CiliumNode": Resource("cilium.io/v2", "ciliumnodes", namespaced=False),
    **{k.kind: Resource(f"{GROUP}/{VERSION}", k.plural) for k in KINDS},
}


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def _status(raw: bytes) -> dict:
    """An error answer's Status object; {} for a body that is none: kube-apiserver answers a path of an API group
    it does not serve (a CRD not installed) with a plain-text "404 page not found"."""
    try:
        status = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


class Kube:
    """A small client for the calls switchyard makes (SSA, get, list, delete)."""

    def __init__(self, connection: Connection):
        self.connection = connection
        self.pool = connection.pool()

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> "Kube":
        """In-cluster (the pod's service account), else the kubeconfig's current context."""
        return cls(load(kubeconfig))

    # ------------------------------------------------------------ transport
    def request(self, method: str, path: str, body: object = None, query: Mapping | None = None,
                content_type: str = "application/json", timeout: float = 30) -> dict:
        url = self.connection.host + path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type, "User-Agent": "switchyard"}
        # JSON bytes suit JSON, merge-patch and apply-patch alike.
        data = json.dumps(body).encode() if body is not None else None
        try:
            token = self.connection.authorization()
            if token:
                headers["Authorization"] = token
            resp = self.pool.request(method, url, body=data, headers=headers, timeout=urllib3.Timeout(total=timeout),
                                     preload_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # An unreachable API server is an API error like any other: retried, never fatal.
            raise ApiError(0, "Unreachable", str(exc)) from exc
        raw = resp.data
        if resp.status >= 400:
            status = _status(raw)
            raise ApiError(resp.status, status.get("reason", ""), status.get("message", raw.decode(errors="replace")))
        return json.loads(raw) if raw else {}

    # ------------------------------------------------------------ verbs
    def apply(self, obj: Mapping, *, force: bool = True) -> dict:
        """Server-side apply `obj` as switchyard's field manager."""
        res = RESOURCES[obj["kind"]]
        meta = obj["metadata"]
        query = {"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"}
        return self.request("PATCH", res.path(meta.get("namespace"), meta["name"]), obj, query,
                            content_type="application/apply-patch+yaml")

    def annotate(self, kind: str, namespace: str | None, name: str, annotations: Mapping[str, str]) -> dict:
        """Set annotations on an object someone else owns (a merge patch touches nothing else).

        Server-side apply would validate the partial object against the CRD's
        required fields, so it cannot carry metadata alone.
        """
        body = {"metadata": {"annotations": dict(annotations)}}
        return self.request("PATCH", RESOURCES[kind].path(namespace, name), body,
                            content_type="application/merge-patch+json")

    def label(self, kind: str, namespace: str | None, name: str, key: str, value: str, *,
              if_now: str | None = None, timeout: float = 30) -> dict:
        """Set one label on an object someone else owns (the operator's own Pod); with `if_now`, only
        while the label has that value (a JSON patch whose `test` fails, 422, otherwise)."""
        if if_now is None:
            return self.request("PATCH", RESOURCES[kind].path(namespace, name), {"metadata": {"labels": {key: value}}},
                                content_type="application/merge-patch+json", timeout=timeout)
        pointer = "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")
        body = [{"op": "test", "path": pointer, "value": if_now}, {"op": "replace", "path": pointer, "value": value}]
        return self.request("PATCH", RESOURCES[kind].path(namespace, name), body,
                            content_type="application/json-patch+json", timeout=timeout)

    def apply_status(self, kind: str, namespace: str, name: str, status: Mapping,
                     manager: str = FIELD_MANAGER) -> dict:
        """Server-side apply to the status subresource; each manager owns only the fields it sends."""
        res = RESOURCES[kind]
        body = {"apiVersion": res.api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace},
                "status": status}
        query = {"fieldManager": manager, "force": "true"}
        return self.request("PATCH", res.path(namespace, name, "status"), body, query,
                            content_type="application/apply-patch+yaml")

    def create(self, obj: Mapping, *, timeout: float = 30) -> dict:
        """POST a new object; 409 AlreadyExists when someone made it first (the leader election's
        Lease, an Event): never overwrites."""
        meta = obj["metadata"]
        return self.request("POST", RESOURCES[obj["kind"]].path(meta.get("namespace")), obj, timeout=timeout)

    def replace(self, obj: Mapping, *, timeout: float = 30) -> dict:
        """PUT `obj` whole, guarded by its `metadata.resourceVersion` (required here): the API server
        answers 409 Conflict when the object changed since it was read, so a writer never
        overwrites a record it has not seen (the leader election's optimistic concurrency)."""
        meta = obj["metadata"]
        if not meta.get("resourceVersion"):
            raise ValueError("replace needs metadata.resourceVersion")
        return self.request("PUT", RESOURCES[obj["kind"]].path(meta.get("namespace"), meta["name"]), obj,
                            timeout=timeout)

    def get(self, kind: str, namespace: str | None, name: str, *, timeout: float = 30) -> dict | None:
        try:
            return self.request("GET", RESOURCES[kind].path(namespace, name), timeout=timeout)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, selector: Mapping[str, str] | None = None,
             fields: Mapping[str, str] | None = None, keep: Callable[[dict], Any] | None = None,
             page: int = 500) -> list:
        """Every matching object, or what `keep` makes of each: applied page by page (`page`
        objects), so listing a 10,000-worker fleet's pods never holds them all at once."""
        query = {"limit": str(page)}
        if selector:
            query["labelSelector"] = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        if fields:
            query["fieldSelector"] = ",".join(f"{k}={v}" for k, v in sorted(fields.items()))
        items: list = []
        res = RESOURCES[kind]
        while True:
            batch = self.request("GET", res.path(namespace), query=query)
            # Items of built-in lists carry no kind; make every item self-describing.
            found = ({"apiVersion": res.api_version, "kind": kind, **item} for item in batch.get("items", []))
            items.extend(found if keep is None else map(keep, found))
            cont = batch.get("metadata", {}).get("continue")
            del batch, found
            if not cont:
                return items
            query["continue"] = cont

    def delete(self, kind: str, namespace: str | None, name: str, uid: str | None = None) -> bool:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", RESOURCES[kind].path(namespace, name), body)
            return True
        except ApiError as exc:
            if exc.status in (404, 409):
                return False
            raise


def owner_reference(owner: Mapping) -> dict:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def adopt(obj: dict, owner: Mapping) -> dict:
    """Mark `obj` as owned by `owner`: owner reference, namespace, owner labels."""
    meta = obj.setdefault("metadata", {})
    meta["namespace"] = owner["metadata"]["namespace"]
    meta["ownerReferences"] = [owner_reference(owner)]
    meta.setdefault("labels", {}).update({**MANAGED_BY, OWNER_UID_LABEL: owner["metadata"]["uid"]})
    return obj


@dataclass
class SyncResult:
    applied: list[str]
    pruned: list[str]
    # Desired children whose name an object of another owner already holds: left alone.
    conflicts: list[str] = field(default_factory=list)
    # Each desired child as the API server holds it now (the apply's answer, or the listed object).
    live: dict[str, dict] = field(default_factory=dict)


def owned_by(obj: Mapping, owner_uid: str) -> bool:
    """True when `obj`'s owner references name `owner_uid` (labels can be copied; a UID reference is the proof)."""
    return any(ref.get("uid") == owner_uid for ref in obj.get("metadata", {}).get("ownerReferences") or ())


def _holder(kube: Kube, kind: str, namespace: str, name: str) -> dict | None:
    """The object of `kind` named `name`, if any (a list by name: list is what RBAC grants on children)."""
    found = kube.list(kind, namespace, fields={"metadata.name": name})
    return found[0] if found else None


def child_key(obj: Mapping) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def sync_children(kube: Kube, owner: Mapping, desired: Iterable[dict], kinds: Iterable[str],
                  logger: logging.Logger | logging.LoggerAdapter = log,
                  unchanged: frozenset[str] = frozenset()) -> SyncResult:
    """Apply every desired child of `owner`; delete owned children of `kinds` not desired.

    Existing children are listed once per kind (by the owner-UID label), so a
    reconcile costs one list per kind plus one apply per child, except the
    children in `unchanged` (keys the caller applied with this very content)
    that still exist. A child that is not yet ours is looked up by name first:
    if another owner's object (or one nobody owns) holds the name, it is
    neither written nor taken over, and reported in `conflicts`. Only objects
    whose owner reference carries this owner's UID are ever pruned.
    A child's `status` (a plan, see api.plans) goes to its status subresource
    under its own field manager, after the object exists.
    """
    namespace = owner["metadata"]["namespace"]
    # A reconcile that outlives its owner must not write children the garbage
    # collector has just removed.
    current = kube.get(owner["kind"], namespace, owner["metadata"]["name"])
    if current is None or current["metadata"]["uid"] != owner["metadata"]["uid"] \
            or current["metadata"].get("deletionTimestamp"):
        return SyncResult([], [])
    selector = {OWNER_UID_LABEL: owner["metadata"]["uid"]}
    uid = owner["metadata"]["uid"]
    existing = {
        f"{kind}/{obj['metadata']['name']}": obj
        for kind in kinds for obj in kube.list(kind, namespace, selector) if owned_by(obj, uid)
    }
    # All or nothing: with one child's name held by another owner, none is written
    # (a fleet must not be told to read through another facility's pool).
    conflicts, seen = [], set()
    for obj in desired:
        key = child_key(obj)
        if key in seen:  # two of this owner's children fold to one name (say a switch named 'scheduler')
            conflicts.append(key)
        elif key not in existing:
            holder = _holder(kube, obj["kind"], namespace, obj["metadata"]["name"])
            if holder is not None and not owned_by(holder, uid):
                conflicts.append(key)
        seen.add(key)
    if conflicts:
        return SyncResult([], [], conflicts)
    applied, pruned, live = [], [], {}
    for obj in desired:
        adopt(obj, owner)
        key = child_key(obj)
        before = existing.pop(key, None)
        if before is not None and key in unchanged:
            applied.append(key)
            live[key] = before
            continue
        status = obj.pop("status", None)
        after = kube.apply(obj)
        if status is not None:
            after = kube.apply_status(obj["kind"], namespace, obj["metadata"]["name"], status,
                                      manager=PLAN_FIELD_MANAGER) or after
            obj["status"] = status
        live[key] = after
        if before is None:
            logger.info(f"Created {obj['kind']} {obj['metadata']['name']}")
        elif before["metadata"].get("resourceVersion") != after.get("metadata", {}).get("resourceVersion"):
            logger.info(f"Updated {obj['kind']} {obj['metadata']['name']}")
        applied.append(key)
    for key, obj in sorted(existing.items()):
        kind, name = key.split("/", 1)
        if kube.delete(kind, namespace, name, uid=obj["metadata"]["uid"]):
            logger.info(f"Deleted {kind} {name} (no longer desired)")
            pruned.append(key)
    return SyncResult(applied, pruned, conflicts, live)
