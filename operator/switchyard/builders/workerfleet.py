"""WorkerFleet → one Deployment of workers per planned switch (and a Dask scheduler if asked).

Container arguments are lists built from validated fields: nothing a user
writes passes through a shell.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..api.workerfleet import DEFAULT_DASK_IMAGE, DEFAULT_TASKVINE_IMAGE, WorkerFleetSpec
from .common import FLEET_LABEL, SWITCH_LABEL, child_name, labels, restricted_security_context, switch_affinity
from .xcachepool import endpoint

DASK_SCHEDULER_PORT = 8786
DASK_DASHBOARD_PORT = 8787
CHILD_KINDS = ("Deployment", "Service")
HASH_RULE = "rendezvous-sha256-v1"  # documented in switchyard.planner.hashing
TASKVINE_IDLE_TIMEOUT_SECONDS = 86400  # a worker Kubernetes restarts should not quit after 15 idle minutes
# XRootD client settings for reads through the caches: fail over quickly to
# the next cache instead of waiting on a dead one for minutes.
XROOTD_CLIENT_ENV = (
    ("XRD_CONNECTIONWINDOW", "10"),
    ("XRD_CONNECTIONRETRY", "2"),
    ("XRD_REQUESTTIMEOUT", "600"),
    ("XRD_STREAMTIMEOUT", "120"),
)


def engine(spec: WorkerFleetSpec) -> str:
    return "dask" if spec.dask is not None else "taskvine"


def worker_image(spec: WorkerFleetSpec) -> str:
    return spec.image or (DEFAULT_DASK_IMAGE if spec.dask is not None else DEFAULT_TASKVINE_IMAGE)


def scheduler_name(fleet: str) -> str:
    return child_name(fleet, "scheduler")


def memory_bytes(spec: WorkerFleetSpec) -> int:
    return int(spec.memory_gib * 1024**3)


def worker_command(fleet: str, namespace: str, spec: WorkerFleetSpec) -> list[str]:
    """The engine's command line for one worker; $(POD_NAME) is expanded by the kubelet."""
    if spec.dask is not None:
        address = spec.dask.scheduler_address or f"tcp://{scheduler_name(fleet)}.{namespace}.svc:{DASK_SCHEDULER_PORT}"
        return ["dask", "worker", address, "--name", "$(POD_NAME)", "--nthreads", str(spec.cores),
                "--nworkers", "1", "--memory-limit", str(memory_bytes(spec)), "--no-dashboard"]
    vine = spec.taskvine
    # Each pod advertises its own IP for peer transfers: workers sharing an
    # address collide (cctools#4066).
    args = ["vine_worker", "--cores", str(spec.cores), "--memory", str(memory_bytes(spec) // 2**20),
            "--disk", str(vine.disk_mib), "--transfer-port", str(vine.transfer_port),
            "--contact-hostport", f"$(POD_IP):{vine.transfer_port}",
            "--idle-timeout", str(TASKVINE_IDLE_TIMEOUT_SECONDS)]
    if vine.manager_name:
        args += ["--manager-name", vine.manager_name]
        if vine.catalog:
            args += ["--catalog", vine.catalog]
    else:
        args += [vine.manager_host, str(vine.manager_port)]
    return args


def cache_env(plan: dict, namespace: str, switch: str) -> list[dict]:
    """Where a worker on `switch` reads through: its switch's cache, or the whole pool."""
    pool = plan.get("pool")
    if not pool:
        return []
    port = plan.get("poolPort", 1094)
    routing = plan.get("routing", {}).get(switch, "local")
    local = routing == "local" and switch in plan.get("cacheSwitches", [])
    env = [
        {"name": "SWITCHYARD_CACHE_ENDPOINT", "value": "root://" + endpoint(pool, namespace, port, switch if local else None)},
        {"name": "SWITCHYARD_ROUTING", "value": routing},
        {"name": "SWITCHYARD_CACHE_SWITCHES", "value": ",".join(plan.get("cacheSwitches", []))},
        *({"name": k, "value": v} for k, v in XROOTD_CLIENT_ENV),
    ]
    ring = plan.get("cacheRing") or {}
    if routing == "hashed" and ring:
        env += [
            {"name": "SWITCHYARD_HASH_RULE", "value": HASH_RULE},
            {"name": "SWITCHYARD_CACHE_RING",
             "value": ",".join(f"root://{host}:{port}={weight:g}" for host, weight in sorted(ring.items()))},
        ]
    return env


def jitter_container(spec: WorkerFleetSpec, helper_image: str) -> dict:
    """Waits a delay fixed by the pod's name before the engine starts (see switchyard.rampup)."""
    return {
        "name": "jitter",
        "image": helper_image,
        "args": ["jitter", "--name", "$(POD_NAME)", "--max-seconds", str(spec.ramp_up.jitter_seconds)],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {**restricted_security_context(65532), "readOnlyRootFilesystem": True},
    }


def build_worker_deployment(fleet: str, namespace: str, spec: WorkerFleetSpec, switch: str, count: int,
                            switch_label: str, plan: dict, *, helper_image: str,
                            staging_env: Sequence[dict] = ()) -> dict:
    name = child_name(fleet, switch)
    selector = {FLEET_LABEL: fleet, SWITCH_LABEL: switch}
    pod_labels = labels("worker", fleet, **selector)
    resources = {"cpu": str(spec.cores), "memory": str(memory_bytes(spec))}
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "SWITCHYARD_FLEET", "value": fleet},
        {"name": "SWITCHYARD_SWITCH", "value": switch},
        *cache_env(plan, namespace, switch),
        *staging_env,  # builders.s3staging.staging_env: keys as Secret references only
        *({"name": e.name, "value": e.value} for e in spec.env),
    ]
    command = worker_command(fleet, namespace, spec)
    container = {
        "name": "worker",
        "image": worker_image(spec),
        "command": command[:1],
        "args": command[1:],
        "env": env,
        "resources": {"requests": resources, "limits": resources},
        "securityContext": restricted_security_context(),
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "affinity": switch_affinity(switch_label, switch),
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    **({"initContainers": [jitter_container(spec, helper_image)]} if spec.ramp_up.jitter_seconds else {}),
                },
            },
        },
    }


def build_scheduler(fleet: str, spec: WorkerFleetSpec) -> list[dict]:
    name = scheduler_name(fleet)
    selector = {FLEET_LABEL: fleet, "app.kubernetes.io/component": "scheduler"}
    pod_labels = {**labels("scheduler", fleet), **selector}
    container = {
        "name": "scheduler",
        "image": worker_image(spec),
        "command": ["dask"],
        "args": ["scheduler", "--port", str(DASK_SCHEDULER_PORT), "--dashboard-address", f":{DASK_DASHBOARD_PORT}"],
        "ports": [{"name": "comm", "containerPort": DASK_SCHEDULER_PORT}, {"name": "dashboard", "containerPort": DASK_DASHBOARD_PORT}],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "securityContext": restricted_security_context(),
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": pod_labels},
                              "spec": {"automountServiceAccountToken": False, "containers": [container],
                                       "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {"selector": selector, "ports": [
            {"name": "comm", "port": DASK_SCHEDULER_PORT, "targetPort": DASK_SCHEDULER_PORT},
            {"name": "dashboard", "port": DASK_DASHBOARD_PORT, "targetPort": DASK_DASHBOARD_PORT}]},
    }
    return [deployment, service]


def build_fleet(fleet: str, namespace: str, spec: WorkerFleetSpec, plan: dict, switch_label: str, *,
                helper_image: str, counts: dict[str, int] | None = None,
                staging_env: Sequence[dict] = ()) -> list[dict]:
    """Every child of one fleet, in a deterministic order.

    `counts` (workers per switch) are where the ramp-up stands; they default
    to the plan's. A switch at zero keeps its Deployment while the plan has
    workers there, so a ramp never prunes what it is about to grow.
    """
    out = []
    if spec.dask is not None and spec.dask.create_scheduler:
        out += build_scheduler(fleet, spec)
    planned = plan.get("workers", {})
    counts = planned if counts is None else counts
    for switch in sorted(planned):
        if planned[switch] > 0:
            out.append(build_worker_deployment(fleet, namespace, spec, switch, counts.get(switch, 0), switch_label,
                                               plan, helper_image=helper_image, staging_env=staging_env))
    return out


def pod_selector(fleet: str) -> str:
    return f"{FLEET_LABEL}={fleet},app.kubernetes.io/component=worker"
