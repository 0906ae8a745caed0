"""What one dask-gateway cluster is in Kubernetes: pure builders, no client.

A gateway cluster is a root Secret (the cluster's TLS pair and API token) that
owns everything else the cluster makes: a `WorkerFleet` with `facilityRef`
(placed by the facility's plan like any other fleet), and the gateway-speaking
Dask scheduler (a Deployment running `dask_gateway.scheduler_preload` over TLS,
and its Service). Deleting the Secret lets the garbage collector remove the rest.

The WorkerFleet spec is validated through `WorkerFleetSpec` here, so a template
or option the CRD would refuse is refused before anything is created.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..api.base import API_VERSION
from ..api.workerfleet import WorkerFleetSpec
from ..builders.common import (FLEET_LABEL, GATEWAY_COMPONENT, dask_scheduler_probes, ingress_policy,
                               restricted_pod_security_context, restricted_security_context)

INSTANCE_LABEL = "gateway.dask.org/instance"
CLUSTER_LABEL = "gateway.dask.org/cluster"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY = {"app.kubernetes.io/managed-by": "switchyard-gateway", "app.kubernetes.io/name": "dask-gateway"}

CREDENTIALS_MOUNT = "/etc/dask-credentials"
CERT_KEY, PRIVATE_KEY, TOKEN_KEY = "dask.crt", "dask.pem", "api-token"
SCHEDULER_PORT, DASHBOARD_PORT, API_PORT = 8786, 8787, 8788


@dataclass(frozen=True)
class GatewayCluster:
    """Everything the builders need about one gateway cluster (no secrets: those stay in the Secret)."""

    name: str                      # the gateway's cluster name (hex), unique per gateway
    namespace: str
    instance: str                  # the gateway instance, so two gateways never see each other's clusters
    username: str
    facility: str
    image: str
    worker_cores: int
    worker_memory_bytes: int
    scheduler_cores: float = 1
    scheduler_memory_bytes: int = 2 * 2**30
    template: Mapping = field(default_factory=dict)  # a partial WorkerFleet spec chosen by the `template` option
    api_url: str = ""              # where the scheduler reaches the gateway's API
    adaptive_period: float = 3
    idle_timeout: float = 0
    heartbeat_period: float = 15
    environment: Mapping[str, str] = field(default_factory=dict)
    scheduler_ports: tuple[int, int, int] = (SCHEDULER_PORT, DASHBOARD_PORT, API_PORT)


def base_name(cluster: GatewayCluster) -> str:
    """The Kubernetes name stem of the cluster's objects (a DNS label with room for suffixes)."""
    return f"dg-{cluster.name[:20]}"


def scheduler_service(cluster: GatewayCluster) -> str:
    return f"{base_name(cluster)}-scheduler"


def scheduler_address(cluster: GatewayCluster) -> str:
    return f"tls://{scheduler_service(cluster)}.{cluster.namespace}:{cluster.scheduler_ports[0]}"


def labels(cluster: GatewayCluster, component: str) -> dict[str, str]:
    return {**MANAGED_BY, INSTANCE_LABEL: cluster.instance, CLUSTER_LABEL: cluster.name, COMPONENT_LABEL: component}


def owned(obj: dict, owner: Mapping) -> dict:
    """`obj` with an owner reference to `owner` (the root Secret, once it has a UID)."""
    meta = owner["metadata"]
    obj["metadata"]["ownerReferences"] = [{
        "apiVersion": owner.get("apiVersion", "v1"), "kind": owner.get("kind", "Secret"),
        "name": meta["name"], "uid": meta["uid"], "blockOwnerDeletion": True,
    }]
    return obj


def memory_gib(nbytes: int) -> float:
    return round(nbytes / 2**30, 4)


def fleet_spec(cluster: GatewayCluster, replicas: int = 0) -> dict:
    """The WorkerFleet spec of `cluster` on the wire (camelCase), validated by the fleet model.

    The template supplies what the analyst does not choose (readGbps, pool,
    staging, tolerations, rampUp, env); the options set image, cores and memory;
    the gateway sets the scheduler and the fleet's facility.
    """
    template = dict(cluster.template)
    env = [dict(e) for e in template.pop("env", [])]
    names = {e["name"] for e in env}
    env += [{"name": k, "value": v} for k, v in sorted(cluster.environment.items()) if k not in names]
    body = {
        **template,
        "facilityRef": {"name": cluster.facility},
        "replicas": replicas,
        "image": cluster.image,
        "cores": cluster.worker_cores,
        "memoryGiB": memory_gib(cluster.worker_memory_bytes),
        "dask": {"schedulerAddress": scheduler_address(cluster), "tlsSecret": base_name(cluster)},
        "env": env,
    }
    return WorkerFleetSpec.model_validate(body).model_dump(by_alias=True, exclude_none=True, mode="json")


def fleet(cluster: GatewayCluster, replicas: int = 0) -> dict:
    return {
        "apiVersion": API_VERSION, "kind": "WorkerFleet",
        "metadata": {"name": base_name(cluster), "namespace": cluster.namespace, "labels": labels(cluster, "workers"),
                     "annotations": {"gateway.dask.org/username": cluster.username}},
        "spec": fleet_spec(cluster, replicas),
    }


USERNAME_ANNOTATION = "gateway.dask.org/username"
OPTIONS_ANNOTATION = "gateway.dask.org/options"
CONFIG_ANNOTATION = "gateway.dask.org/config"


def credentials(cluster: GatewayCluster, tls_cert: bytes, tls_key: bytes, token: str,
                options: Mapping | None = None, config: Mapping | None = None) -> dict:
    """The root object: the cluster's TLS pair and API token, as the gateway's own controller keeps them.

    It also records who asked, with which options and resulting config, so a
    restarted gateway knows its clusters again (`restore`).
    """
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": base_name(cluster), "namespace": cluster.namespace, "labels": labels(cluster, "credentials"),
                     "annotations": {USERNAME_ANNOTATION: cluster.username,
                                     OPTIONS_ANNOTATION: json.dumps(dict(options or {}), sort_keys=True),
                                     CONFIG_ANNOTATION: json.dumps(dict(config or {}), sort_keys=True)}},
        "stringData": {CERT_KEY: tls_cert.decode(), PRIVATE_KEY: tls_key.decode(), TOKEN_KEY: token},
    }


@dataclass(frozen=True)
class Restored:
    """A cluster as its root Secret (read back from the API server) records it."""

    name: str
    username: str
    token: str
    tls_cert: bytes
    tls_key: bytes
    options: dict
    config: dict
    created: str  # the Secret's creationTimestamp


def restore(secret: Mapping) -> Restored | None:
    """The cluster a root Secret stands for; None for a Secret being deleted or not a root."""
    meta = secret.get("metadata") or {}
    labels_ = meta.get("labels") or {}
    if meta.get("deletionTimestamp") or labels_.get(COMPONENT_LABEL) != "credentials" or CLUSTER_LABEL not in labels_:
        return None
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    notes = meta.get("annotations") or {}
    try:
        return Restored(name=labels_[CLUSTER_LABEL], username=notes[USERNAME_ANNOTATION], token=data[TOKEN_KEY].decode(),
                        tls_cert=data[CERT_KEY], tls_key=data[PRIVATE_KEY],
                        options=json.loads(notes.get(OPTIONS_ANNOTATION) or "{}"),
                        config=json.loads(notes.get(CONFIG_ANNOTATION) or "{}"),
                        created=meta.get("creationTimestamp", ""))
    except (KeyError, ValueError):
        return None


def scheduler_command(cluster: GatewayCluster) -> list[str]:
    """`dask scheduler` as dask-gateway runs it: TLS only, its preload serving the gateway's API and heartbeats."""
    port, dashboard, api = cluster.scheduler_ports
    return ["dask", "scheduler", "--protocol", "tls", "--host", "0.0.0.0", "--port", str(port),
            "--dashboard-address", f":{dashboard}",
            "--preload", "dask_gateway.scheduler_preload", "--dg-api-address", f"0.0.0.0:{api}",
            "--dg-heartbeat-period", _num(cluster.heartbeat_period),
            "--dg-adaptive-period", _num(cluster.adaptive_period),
            "--dg-idle-timeout", _num(cluster.idle_timeout)]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def scheduler_env(cluster: GatewayCluster) -> list[dict]:
    """The scheduler's environment: the gateway's variables, the token from the root Secret, TLS from its mount."""
    plain = {**{k: str(v) for k, v in cluster.environment.items()},
             "DASK_GATEWAY_API_URL": cluster.api_url,
             "DASK_GATEWAY_CLUSTER_NAME": cluster.name,
             "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
             "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": f"{CREDENTIALS_MOUNT}/{CERT_KEY}",
             "DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__CERT": f"{CREDENTIALS_MOUNT}/{CERT_KEY}",
             "DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__KEY": f"{CREDENTIALS_MOUNT}/{PRIVATE_KEY}"}
    env = [{"name": k, "value": v} for k, v in sorted(plain.items())]
    env.append({"name": "DASK_GATEWAY_API_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": base_name(cluster), "key": TOKEN_KEY}}})
    return env


def scheduler(cluster: GatewayCluster) -> list[dict]:
    """The scheduler Deployment and its Service (not placed by the plan: it reads no data)."""
    name = scheduler_service(cluster)
    pod_labels = labels(cluster, "scheduler")
    selector = {CLUSTER_LABEL: cluster.name, COMPONENT_LABEL: "scheduler"}
    port, dashboard, api = cluster.scheduler_ports
    resources = {"cpu": _num(cluster.scheduler_cores), "memory": str(cluster.scheduler_memory_bytes)}
    container = {
        "name": "scheduler", "image": cluster.image,
        "command": scheduler_command(cluster)[:1], "args": scheduler_command(cluster)[1:],
        "env": scheduler_env(cluster),
        "ports": [{"name": "tls", "containerPort": port}, {"name": "dashboard", "containerPort": dashboard},
                  {"name": "api", "containerPort": api}],
        **dask_scheduler_probes("tls", "dashboard"),
        "resources": {"requests": resources, "limits": resources},
        "securityContext": restricted_security_context(),
        "volumeMounts": [{"name": "credentials", "mountPath": CREDENTIALS_MOUNT, "readOnly": True}],
    }
    # It calls the gateway's API with its own token (scheduler_env), never the Kubernetes API.
    pod_spec = {"containers": [container], "automountServiceAccountToken": False, "enableServiceLinks": False,
                "securityContext": restricted_pod_security_context(),
                "volumes": [{"name": "credentials", "secret": {"secretName": base_name(cluster)}}]}
    if cluster.template.get("tolerations"):
        pod_spec["tolerations"] = [dict(t) for t in cluster.template["tolerations"]]
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": pod_labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": pod_labels},
        "spec": {"selector": selector, "ports": [
            {"name": "tls", "port": port, "targetPort": port},
            {"name": "dashboard", "port": dashboard, "targetPort": dashboard},
            {"name": "api", "port": api, "targetPort": api}]},
    }
    return [deployment, service]


def scheduler_policy(cluster: GatewayCluster) -> dict:
    """Who may reach the scheduler: its own workers (the fleet's pods) and the gateway's pods, which
    proxy every client's comm and dashboard (TLS, routed by SNI) and call its API port. Both run in
    the cluster's namespace, the gateway's own."""
    workers = {"podSelector": {"matchLabels": {FLEET_LABEL: base_name(cluster), COMPONENT_LABEL: "worker"}}}
    gateway = {"podSelector": {"matchLabels": {COMPONENT_LABEL: GATEWAY_COMPONENT}}}
    policy = ingress_policy(scheduler_service(cluster), labels(cluster, "scheduler"),
                            {CLUSTER_LABEL: cluster.name, COMPONENT_LABEL: "scheduler"}, [workers, gateway],
                            list(cluster.scheduler_ports))
    policy["metadata"]["namespace"] = cluster.namespace
    return policy


def children(cluster: GatewayCluster, root: Mapping, network_policy: bool = True) -> list[dict]:
    """Everything the root Secret owns, in creation order (`network_policy`: the scheduler's too)."""
    objs = (fleet(cluster), *scheduler(cluster), *([scheduler_policy(cluster)] if network_policy else []))
    return [owned(obj, root) for obj in objs]


def worker_count(requested: int, max_workers: int | None) -> int:
    """The replicas a heartbeat's count asks for, held to the cluster's limit (as the gateway's backends do)."""
    count = max(0, int(requested))
    return count if max_workers is None else min(count, int(max_workers))


def epoch_ms(timestamp: str) -> int | None:
    """An API server timestamp ("…Z" on the wire, "+00:00" once the client has parsed it) in ms since the epoch."""
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None
    return int(moment.replace(tzinfo=moment.tzinfo or timezone.utc).timestamp() * 1000)


def overdue(pending_since: Mapping[str, float], now: float, timeout: float) -> list[str]:
    """Clusters still waiting for their scheduler's first heartbeat longer than `timeout` seconds (0: never)."""
    if timeout <= 0:
        return []
    return sorted(name for name, since in pending_since.items() if now - since > timeout)
