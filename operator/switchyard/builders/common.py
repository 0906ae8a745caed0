"""Naming, labels and scheduling rules shared by every builder."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ..api.base import Toleration

SWITCH_LABEL = "switchyard.dev/switch"  # on pods: the switch the plan put them on
POOL_LABEL = "switchyard.dev/pool"
FLEET_LABEL = "switchyard.dev/fleet"
FACILITY_LABEL = "switchyard.dev/facility"
COMPONENT_LABEL = "app.kubernetes.io/component"
MAX_NAME = 52  # leaves room for the suffixes controllers append to pod names


def _name_part(part: str) -> str:
    """A part as it can appear in a DNS-1123 name. A part that must be folded
    (a switch name like 'Rack_1' or 'rack.1') keeps a hash of what it was, so
    two switch names never fold into one child name."""
    folded = part.lower().replace("_", "-").replace(".", "-")
    if folded == part:
        return part
    return f"{folded}-{hashlib.sha256(part.encode()).hexdigest()[:6]}"


def child_name(*parts: str) -> str:
    """A stable DNS-1123 name; long names are cut and given a hash suffix."""
    name = "-".join(_name_part(p) for p in parts if p)
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return name[: MAX_NAME - 9].rstrip("-") + "-" + digest


def labels(component: str, instance: str, **extra: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "switchyard",
        COMPONENT_LABEL: component,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/part-of": "switchyard",
        **{k: v for k, v in sorted(extra.items())},
    }


def switch_affinity(switch_label: str, switch: str, hostnames: tuple[str, ...] = ()) -> dict:
    """Required node affinity that pins pods to one switch (and optionally named hosts)."""
    expressions = [{"key": switch_label, "operator": "In", "values": [switch]}]
    if hostnames:
        expressions.append({"key": "kubernetes.io/hostname", "operator": "In", "values": sorted(hostnames)})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}


def one_per_node(selector: Mapping[str, str]) -> dict:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": "kubernetes.io/hostname"}]}}


def tolerations(items: Sequence[Toleration]) -> dict:
    """A pod spec's `tolerations` entry for a kind's tolerations (nothing when there are none)."""
    return {"tolerations": [t.to_pod() for t in items]} if items else {}


def restricted_security_context(uid: int = 1000) -> dict:
    """Container settings that satisfy Pod Security 'restricted': no capabilities, no privilege
    escalation, the runtime's seccomp profile, a non-root user and a group of the same id
    (without runAsGroup the group falls back to the image's, often 0)."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod_security_context(uid: int | None = None) -> dict:
    """A pod's securityContext under Pod Security 'restricted'; given `uid`, the pod's user, its
    group and the group that owns its volumes (fsGroup) are that uid."""
    ids = {"runAsUser": uid, "runAsGroup": uid, "fsGroup": uid} if uid is not None else {}
    return {"runAsNonRoot": True, **ids, "seccompProfile": {"type": "RuntimeDefault"}}


def dask_scheduler_probes(comm_port: int | str, dashboard_port: int | str) -> dict:
    """A Dask scheduler's probes: ready once it accepts connections on its comm port (TCP, so
    TLS or not; as dask-kubernetes does, each check costs an INFO line "closed before handshake
    completed" in the scheduler's log, hence every 10 s), alive while its event loop answers
    HTTP /health on the dashboard port (distributed.http.health; a hung loop still accepts TCP)."""
    return {
        "readinessProbe": {"tcpSocket": {"port": comm_port}, "initialDelaySeconds": 2, "periodSeconds": 10,
                           "timeoutSeconds": 3},
        "livenessProbe": {"httpGet": {"path": "/health", "port": dashboard_port}, "initialDelaySeconds": 15,
                          "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 6},
    }


# ------------------------------------------------------------------ network policies
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server
# The chart's pods, by their component label (charts/switchyard/templates/_helpers.tpl).
OPERATOR_COMPONENT = "operator"
GATEWAY_COMPONENT = "dask-gateway"


@dataclass(frozen=True)
class PolicyPeers:
    """What the operator's NetworkPolicies admit beside a workload's own clients: the chart's
    pods (the operator, the gateway) in the release namespace, or in any namespace when it is
    not known (the operator run outside the chart)."""

    release_namespace: str | None = None

    def chart_pods(self, component: str) -> dict:
        namespaces = {"matchLabels": {NAMESPACE_NAME_LABEL: self.release_namespace}} if self.release_namespace else {}
        return {"namespaceSelector": namespaces, "podSelector": {"matchLabels": {COMPONENT_LABEL: component}}}


def namespaces_peer(names: Iterable[str]) -> dict:
    """A NetworkPolicy peer: every pod in the named namespaces."""
    return {"namespaceSelector": {"matchExpressions": [
        {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(set(names))}]}}


def ingress_policy(name: str, meta_labels: Mapping[str, str], selector: Mapping[str, str], peers: list[dict],
                   ports: Sequence[int]) -> dict:
    """A NetworkPolicy admitting to the pods `selector` selects only `peers`, on `ports` (TCP).
    Egress is left alone; the kubelet's probes come from the node, which policies do not govern."""
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "labels": dict(meta_labels)},
        "spec": {"podSelector": {"matchLabels": dict(selector)}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": p} for p in ports]}]},
    }
