"""XCachePool → config, one StatefulSet and Service per switch, pool Service, PDB.

Cache hosts use host networking so that clients are handed the node's own
address (a container IP leaks otherwise, coffea-casa#374) and host paths for
the NVMe disks (see README: why host paths, and the Pod Security level).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..api.xcachepool import EXPORTER_REQUESTS, XCachePoolSpec
from .. import clientmap
from ..exporterspec import CLIENT_MAP_DIR, exporter_args
from ..exporterspec import DEFAULT_METRICS_PORT as METRICS_PORT
from ..xrootd import config_checksum, directories_to_create, render_config, render_scitokens_config
from ..xrootd.config import DEFAULT_EXPORTER_PORT as EXPORTER_PORT
from ..xrootd.config import SCITOKENS_CONFIG_PATH, TLS_DIR
from .common import POOL_LABEL, SWITCH_LABEL, child_name, labels, one_per_node, switch_affinity, tolerations

CONFIG_KEY = "xcache.cfg"
SCITOKENS_KEY = "scitokens.cfg"
CONFIG_DIR = "/etc/switchyard"
XROOTD_USER = "xrootd"  # the user OSG's XCache images run xrootd as
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
    data = {CONFIG_KEY: text}
    if spec.auth.mode == "scitokens":
        data[SCITOKENS_KEY] = render_scitokens_config(spec)
    cm = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": config_map_name(pool), "labels": labels("xcache", pool, **{POOL_LABEL: pool})},
        "data": data,
    }
    return cm, config_checksum("".join(data[k] for k in sorted(data)))


def client_map_name(pool: str) -> str:
    return child_name(pool, "clients")


def build_client_map(pool: str, clients: Mapping[str, Iterable[str]]) -> dict:
    """The exporters' client map (switch -> node InternalIPs and pod CIDRs). Kept out of the config checksum:
    kubelet refreshes the mounted file and the exporter re-reads it, so node churn restarts no cache host."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": client_map_name(pool), "labels": labels("xcache", pool, **{POOL_LABEL: pool})},
        "data": {clientmap.KEY: clientmap.render(clients)},
    }


def _volumes(spec: XCachePoolSpec, pool: str) -> tuple[list[dict], list[dict]]:
    volumes = [{"name": "config", "configMap": {"name": config_map_name(pool)}},
               # optional: a pod starts before the map exists; its bytes count as 'unknown' until it does.
               {"name": "clients", "configMap": {"name": client_map_name(pool), "optional": True}}]
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    paths = [("meta", spec.storage.meta_path)] + [(f"data{i}", p) for i, p in enumerate(spec.storage.data_paths)]
    for name, path in paths:
        volumes.append({"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}})
        mounts.append({"name": name, "mountPath": path})
    if spec.auth.mode == "scitokens":
        volumes.append({"name": "tls", "secret": {"secretName": spec.auth.tls_secret, "defaultMode": 0o400}})
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        mounts.append({"name": "config", "mountPath": SCITOKENS_CONFIG_PATH, "subPath": SCITOKENS_KEY, "readOnly": True})
    return volumes, mounts


def _prepare_container(spec: XCachePoolSpec, mounts: list[dict]) -> dict:
    """Create the directories xrootd needs, owned by its user (argument list, no shell)."""
    paths = [*directories_to_create(spec), *spec.storage.data_paths]
    return {
        "name": "prepare",
        "image": spec.image,
        "command": ["install", "-d", "-o", XROOTD_USER, "-g", XROOTD_USER, *paths],
        "volumeMounts": [m for m in mounts if m["name"] not in ("config", "clients")],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
    }


def build_statefulset(pool: str, spec: XCachePoolSpec, switch: str, hosts: tuple[str, ...], switch_label: str,
                      checksum: str, exporter_image: str) -> dict:
    name = switch_service_name(pool, switch)
    selector = {POOL_LABEL: pool, SWITCH_LABEL: switch}
    pod_labels = labels("xcache", pool, **selector)
    volumes, mounts = _volumes(spec, pool)
    # Ready only when the cache answers an XRootD request; alive while it accepts connections.
    readiness = {"exec": {"command": ["xrdfs", f"localhost:{spec.port}", "query", "config", "version"]},
                 "timeoutSeconds": 5}
    liveness = {"tcpSocket": {"port": spec.port}}
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
        "readinessProbe": {**readiness, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**liveness, "initialDelaySeconds": 30, "periodSeconds": 20, "failureThreshold": 6},
        "volumeMounts": mounts,
    }
    exporter = {
        "name": "exporter",
        "image": exporter_image,
        "args": ["exporter", *exporter_args(spec, pool_name=pool, switch=switch)],
        # Disk usage against the water marks is read from the disks themselves; the client map is a
        # directory mount (not subPath), so kubelet's updates reach the exporter.
        "volumeMounts": [{**m, "readOnly": True} for m in mounts if m["name"] == "meta" or m["name"].startswith("data")]
                        + [{"name": "clients", "mountPath": CLIENT_MAP_DIR, "readOnly": True}],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(EXPORTER_REQUESTS), "limits": {"memory": "256Mi"}},
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
            # A config change rolls hosts one at a time (checksum annotation below): what
            # RollingUpdate does by default (rollingUpdate.maxUnavailable is behind the alpha
            # MaxUnavailableStatefulSet gate, so the API server would drop it).
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {CHECKSUM_ANNOTATION: checksum}},
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "enableServiceLinks": False,
                    "affinity": {**switch_affinity(switch_label, switch, hosts), **one_per_node({POOL_LABEL: pool})},
                    **tolerations(spec.tolerations),
                    "terminationGracePeriodSeconds": 60,
                    "initContainers": [_prepare_container(spec, mounts)],
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
               exporter_image: str, clients: Mapping[str, Iterable[str]] | None = None) -> list[dict]:
    """Every child of one pool, in a deterministic order; `clients`: switch -> networks (the client map)."""
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
    out.append(build_client_map(pool, clients or {}))
    return out


CHILD_KINDS = ("ConfigMap", "StatefulSet", "Service", "PodDisruptionBudget")
