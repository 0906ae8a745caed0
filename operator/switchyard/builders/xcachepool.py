"""XCachePool → config, one StatefulSet and Service per switch, pool Service, PDB.

Cache hosts use host networking so that clients are handed the node's own
address (a container IP leaks otherwise, coffea-casa#374) and host paths for
the NVMe disks (see README: why host paths, and the Pod Security level).
"""

from __future__ import annotations

from ..api.xcachepool import XCachePoolSpec
from ..xrootd import config_checksum, render_config
from .common import POOL_LABEL, SWITCH_LABEL, child_name, labels, one_per_node, switch_affinity

CONFIG_KEY = "xcache.cfg"
CONFIG_DIR = "/etc/switchyard"
EXPORTER_PORT = 9931
METRICS_PORT = 9932
CHECKSUM_ANNOTATION = "switchyard.dev/config-checksum"


def config_map_name(pool: str) -> str:
    return child_name(pool, "xrootd")


def switch_service_name(pool: str, switch: str) -> str:
    return child_name(pool, switch)


def endpoint(pool: str, namespace: str, port: int, switch: str | None = None) -> str:
    service = switch_service_name(pool, switch) if switch else pool
    return f"{service}.{namespace}.svc:{port}"


def build_config_map(pool: str, spec: XCachePoolSpec) -> tuple[dict, str]:
    text = render_config(spec, exporter_port=EXPORTER_PORT)
    cm = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": config_map_name(pool), "labels": labels("xcache", pool, **{POOL_LABEL: pool})},
        "data": {CONFIG_KEY: text},
    }
    return cm, config_checksum(text)


def _volumes(spec: XCachePoolSpec, pool: str) -> tuple[list[dict], list[dict]]:
    volumes = [{"name": "config", "configMap": {"name": config_map_name(pool)}}]
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    paths = [("meta", spec.storage.meta_path)] + [(f"data{i}", p) for i, p in enumerate(spec.storage.data_paths)]
    for name, path in paths:
        volumes.append({"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}})
        mounts.append({"name": name, "mountPath": path})
    return volumes, mounts


def build_statefulset(pool: str, spec: XCachePoolSpec, switch: str, hosts: tuple[str, ...], switch_label: str,
                      checksum: str, exporter_image: str) -> dict:
    name = switch_service_name(pool, switch)
    selector = {POOL_LABEL: pool, SWITCH_LABEL: switch}
    pod_labels = labels("xcache", pool, **selector)
    volumes, mounts = _volumes(spec, pool)
    probe = {"tcpSocket": {"port": spec.port}}
    xrootd = {
        "name": "xrootd",
        "image": spec.image,
        "command": ["xrootd"],
        "args": ["-c", f"{CONFIG_DIR}/{CONFIG_KEY}", "-n", "xcache", "-l", "-"],
        "ports": [{"name": "xroot", "containerPort": spec.port, "protocol": "TCP"}],
        "env": [{"name": "SWITCHYARD_SWITCH", "value": switch},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": {"cpu": spec.resources.cpu, "memory": spec.resources.memory},
                      "limits": {"memory": spec.resources.memory}},
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**probe, "initialDelaySeconds": 30, "periodSeconds": 20, "failureThreshold": 6},
        "volumeMounts": mounts,
    }
    exporter = {
        "name": "exporter",
        "image": exporter_image,
        "args": ["exporter", "--listen-udp", f"127.0.0.1:{EXPORTER_PORT}", "--metrics-port", str(METRICS_PORT),
                 "--pool", pool, "--switch", switch],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True, "runAsNonRoot": True, "runAsUser": 65532},
    }
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {
            "replicas": len(hosts),
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            # A config change rolls hosts one at a time (checksum annotation below).
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {CHECKSUM_ANNOTATION: checksum}},
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "enableServiceLinks": False,
                    "affinity": {**switch_affinity(switch_label, switch, hosts), **one_per_node({POOL_LABEL: pool})},
                    "terminationGracePeriodSeconds": 60,
                    "containers": [xrootd, exporter],
                    "volumes": volumes,
                },
            },
        },
    }


def build_service(name: str, pool: str, port: int, selector: dict, headless: bool = False) -> dict:
    spec: dict = {"selector": selector, "ports": [{"name": "xroot", "port": port, "targetPort": port, "protocol": "TCP"}]}
    if headless:
        spec["clusterIP"] = "None"
        spec["publishNotReadyAddresses"] = False
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "labels": labels("xcache", pool, **{POOL_LABEL: pool})}, "spec": spec}


def build_pdb(pool: str) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": pool, "labels": labels("xcache", pool, **{POOL_LABEL: pool})},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {POOL_LABEL: pool}}}}


def build_pool(pool: str, spec: XCachePoolSpec, hosts_by_switch: dict[str, list[str]], switch_label: str,
               exporter_image: str) -> list[dict]:
    """Every child of one pool, in a deterministic order."""
    cm, checksum = build_config_map(pool, spec)
    out = [cm]
    for switch in sorted(hosts_by_switch):
        hosts = tuple(sorted(hosts_by_switch[switch]))
        if not hosts:
            continue
        out.append(build_statefulset(pool, spec, switch, hosts, switch_label, checksum, exporter_image))
        out.append(build_service(switch_service_name(pool, switch), pool, spec.port,
                                 {POOL_LABEL: pool, SWITCH_LABEL: switch}))
    out.append(build_service(pool, pool, spec.port, {POOL_LABEL: pool}))
    out.append(build_pdb(pool))
    return out


CHILD_KINDS = ("ConfigMap", "StatefulSet", "Service", "PodDisruptionBudget")
