"""Naming, labels and scheduling rules shared by every builder."""

from __future__ import annotations

import hashlib
from typing import Mapping

SWITCH_LABEL = "switchyard.dev/switch"  # on pods: the switch the plan put them on
POOL_LABEL = "switchyard.dev/pool"
FLEET_LABEL = "switchyard.dev/fleet"
FACILITY_LABEL = "switchyard.dev/facility"
MAX_NAME = 52  # leaves room for the suffixes controllers append to pod names


def child_name(*parts: str) -> str:
    """A stable DNS-1123 name; long names are cut and given a hash suffix."""
    name = "-".join(p.lower().replace("_", "-").replace(".", "-") for p in parts if p)
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return name[: MAX_NAME - 9].rstrip("-") + "-" + digest


def labels(component: str, instance: str, **extra: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "switchyard",
        "app.kubernetes.io/component": component,
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


def restricted_security_context(uid: int = 1000) -> dict:
    """Container settings that satisfy Pod Security 'restricted'."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
