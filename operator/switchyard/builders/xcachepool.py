"""XCachePool → config, one StatefulSet and Service per switch, pool Service, PDB.

Cache hosts use host networking so that clients are handed the node's own
address (a container IP leaks otherwise, coffea-casa#374) and host paths for
the NVMe disks (see docs/admin-guide.md: why host paths, and the Pod Security level).

Least privilege in the cache pod (what each container gets, and why):

- `xrootd` runs as the pool's `xrootdUser` (runAsUser/runAsGroup, by default
  OSG's xrootd user 10940:10940) with no capability at all: port 1094 needs
  none, and the disks' directories are already its own. The alternative,
  xrootd's `-R <user>`, starts as root and switches user after start-up: it
  needs a root start with CAP_SETUID and CAP_SETGID in a long-running,
  network-facing process, and a user *name* that exists in the image. The pod
  spec alone works with any image whose xrootd needs no start-up as root
  (OSG's, switchyard's, a site's), given the uid and gid.
- `prepare` (init) runs `switchyard prepare-cache` from the operator image as
  root with CAP_CHOWN only: it checks that each data and meta path is a disk
  mounted on the node (cacheprepare.py), then makes xrootd's directories and
  hands them to the xrootd uid. It creates them inside root-owned mount
  points, so it needs neither DAC_OVERRIDE nor FOWNER.
- `exporter` runs as 65532:65532, no capabilities, read-only root filesystem.
- Every container: no privilege escalation, the runtime's seccomp profile.
  The pod mounts no ServiceAccount token: nothing in it calls the API server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..api.xcachepool import EXPORTER_REQUESTS, EXPORTER_UID, XCachePoolSpec
from ..observe import clientmap
from ..observe.exporterspec import CLIENT_MAP_DIR, exporter_args
from ..observe.exporterspec import DEFAULT_METRICS_PORT as METRICS_PORT
from ..xrootd import config_checksum, directories_to_create, render_config, render_scitokens_config
from ..xrootd.config import DEFAULT_EXPORTER_PORT as EXPORTER_PORT
from ..xrootd.config import SCITOKENS_CONFIG_PATH, TLS_DIR
from .common import (POOL_LABEL, SWITCH_LABEL, child_name, labels, one_per_node, restricted_security_context,
                     switch_affinity, tolerations)

CONFIG_KEY = "xcache.cfg"
SCITOKENS_KEY = "scitokens.cfg"
CONFIG_DIR = "/etc/switchyard"
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


def build_client_map(pool: str, clients: Mapping[str, Iterable[str]],
                     routing: Mapping[str, str] | None = None) -> dict:
    """The exporters' client map (switch -> node InternalIPs, pod CIDRs and outside readers' CIDRs). Kept
    out of the config checksum: kubelet refreshes the mounted file and the exporter re-reads it, so node
    churn restarts no cache host.

    `routing`: the pool's `ring` and `hot` texts (builders/workerfleet.py routing_data) while outside
    readers read through it, which the exporters serve them (GET /routing/ring, /routing/hot). Beside the
    client map, not in a ConfigMap of their own: this one is already mounted (as a directory, so kubelet
    refreshes it) in every exporter, so publishing them changes no pod template and restarts no cache host;
    without outside readers the ConfigMap is the one of before."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": client_map_name(pool), "labels": labels("xcache", pool, **{POOL_LABEL: pool})},
        "data": {clientmap.KEY: clientmap.render(clients), **dict(sorted((routing or {}).items()))},
    }


def disk_paths(spec: XCachePoolSpec) -> list[str]:
    """The meta path and the data paths: each must be a disk mounted on the node (unless storage.allowRootDisk)."""
    return [spec.storage.meta_path, *spec.storage.data_paths]


def _volumes(spec: XCachePoolSpec, pool: str) -> tuple[list[dict], list[dict]]:
    volumes = [{"name": "config", "configMap": {"name": config_map_name(pool)}},
               # optional: a pod starts before the map exists; its bytes count as 'unknown' until it does.
               {"name": "clients", "configMap": {"name": client_map_name(pool), "optional": True}}]
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    paths = [("meta", spec.storage.meta_path)] + [(f"data{i}", p) for i, p in enumerate(spec.storage.data_paths)]
    # Directory: the kubelet never creates a missing path, which would be a fresh directory on the node's
    # root disk; a disk whose mount point is missing shows as a failed mount, and one that exists but has
    # no disk mounted is caught by the prepare step. Only a site that caches on its root disk on purpose
    # (storage.allowRootDisk) lets the kubelet create them.
    path_type = "DirectoryOrCreate" if spec.storage.allow_root_disk else "Directory"
    for name, path in paths:
        volumes.append({"name": name, "hostPath": {"path": path, "type": path_type}})
        mounts.append({"name": name, "mountPath": path})
    if spec.auth.mode == "scitokens":
        volumes.append({"name": "tls", "secret": {"secretName": spec.auth.tls_secret, "defaultMode": 0o400}})
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        mounts.append({"name": "config", "mountPath": SCITOKENS_CONFIG_PATH, "subPath": SCITOKENS_KEY, "readOnly": True})
    return volumes, mounts


def _locked_down(**settings) -> dict:
    """A container's securityContext: no privilege escalation, no capability but those in `settings`, the
    runtime's seccomp profile."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}, **settings}


def _prepare_container(spec: XCachePoolSpec, mounts: list[dict], image: str) -> dict:
    """Check the disks are mounted, then make the directories xrootd needs, owned by its user (cacheprepare.py)."""
    user = spec.xrootd_user
    args = ["prepare-cache", "--uid", str(user.uid), "--gid", str(user.gid)]
    args += [a for path in disk_paths(spec) for a in ("--disk", path)]
    args += [a for path in [*directories_to_create(spec), *spec.storage.data_paths] for a in ("--dir", path)]
    if spec.storage.allow_root_disk:
        args.append("--allow-root-disk")
    return {
        "name": "prepare",
        "image": image,
        "args": args,
        "volumeMounts": [m for m in mounts if m["name"] == "meta" or m["name"].startswith("data")],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        # Root, for its one capability: chown to the xrootd user (a non-root user's added capabilities are
        # not effective). The operator reads the termination message (DiskNotMounted ...) from the pod status.
        "securityContext": _locked_down(capabilities={"drop": ["ALL"], "add": ["CHOWN"]}, runAsUser=0, runAsGroup=0,
                                        runAsNonRoot=False, readOnlyRootFilesystem=True),
    }


def _xrootd_security_context(spec: XCachePoolSpec) -> dict:
    """xrootd as the pool's xrootd user, with no capability: port 1094 is above 1024, the disks are its own."""
    user = spec.xrootd_user
    return {**restricted_security_context(user.uid), "runAsUser": user.uid, "runAsGroup": user.gid}


def build_statefulset(pool: str, spec: XCachePoolSpec, switch: str, hosts: tuple[str, ...], switch_label: str,
                      checksum: str, exporter_image: str) -> dict:
    """One switch's cache hosts; `exporter_image` (the operator image) runs the exporter and the prepare step."""
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
        "securityContext": _xrootd_security_context(spec),
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
        "securityContext": {**restricted_security_context(EXPORTER_UID), "runAsGroup": EXPORTER_UID,
                            "readOnlyRootFilesystem": True},
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
                    "automountServiceAccountToken": False,  # nothing in a cache pod calls the API server
                    "affinity": {**switch_affinity(switch_label, switch, hosts), **one_per_node({POOL_LABEL: pool})},
                    **tolerations(spec.tolerations),
                    # xrootd sets no SIGTERM handler: as its container's PID 1 it would ignore the kubelet's
                    # SIGTERM and every delete, drain or rolling step would wait out the grace period for the
                    # SIGKILL. Under the pod's shared pause process it is not PID 1, and SIGTERM ends it.
                    "shareProcessNamespace": True,
                    "terminationGracePeriodSeconds": 60,
                    "initContainers": [_prepare_container(spec, mounts, exporter_image)],
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
            # A crash-looping cache (a disk not mounted, say) must not block a node drain.
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {POOL_LABEL: pool}},
                     "unhealthyPodEvictionPolicy": "AlwaysAllow"}}


def build_pool(pool: str, spec: XCachePoolSpec, hosts_by_switch: dict[str, list[str]], switch_label: str,
               exporter_image: str, clients: Mapping[str, Iterable[str]] | None = None,
               routing: Mapping[str, str] | None = None) -> list[dict]:
    """Every child of one pool, in the order they are applied: what a cache pod mounts (its config and the
    client map) and the Service a StatefulSet's serviceName names ("must exist before the StatefulSet", the
    StatefulSetSpec API reference) come before the StatefulSet; `clients`: switch -> networks; `routing`:
    what its exporters serve readers outside Kubernetes (build_client_map)."""
    cm, checksum = build_config_map(pool, spec)
    out = [cm, build_client_map(pool, clients or {}, routing)]
    for switch in sorted(hosts_by_switch):
        hosts = tuple(sorted(hosts_by_switch[switch]))
        if not hosts:
            continue
        out.append(build_service(switch_service_name(pool, switch), pool, spec.port,
                                 {POOL_LABEL: pool, SWITCH_LABEL: switch}))
        out.append(build_statefulset(pool, spec, switch, hosts, switch_label, checksum, exporter_image))
    out.append(build_service(pool, pool, spec.port, {POOL_LABEL: pool}))
    out.append(build_pdb(pool))
    return out


CHILD_KINDS = ("ConfigMap", "StatefulSet", "Service", "PodDisruptionBudget")
