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
    args = ["vine_worker", "--cores", str(spec.cores), "--memory", str(memory_bytes(spec) // 2**20),
            "--disk", str(vine.disk_mib), "--transfer-port", str(vine.transfer_port)]
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
    ]
    return env


def build_worker_deployment(fleet: str, namespace: str, spec: WorkerFleetSpec, switch: str, count: int,
                            switch_label: str, plan: dict, staging_env: Sequence[dict] = ()) -> dict:
    name = child_name(fleet, switch)
    selector = {FLEET_LABEL: fleet, SWITCH_LABEL: switch}
    pod_labels = labels("worker", fleet, **selector)
    resources = {"cpu": str(spec.cores), "memory": str(memory_bytes(spec))}
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
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


def build_fleet(fleet: str, namespace: str, spec: WorkerFleetSpec, plan: dict, switch_label: str,
                staging_env: Sequence[dict] = ()) -> list[dict]:
    """Every child of one fleet, in a deterministic order."""
    out = []
    if spec.dask is not None and spec.dask.create_scheduler:
        out += build_scheduler(fleet, spec)
    for switch, count in sorted(plan.get("workers", {}).items()):
        if count > 0:
            out.append(build_worker_deployment(fleet, namespace, spec, switch, count, switch_label, plan, staging_env))
    return out


def pod_selector(fleet: str) -> str:
    return f"{FLEET_LABEL}={fleet},app.kubernetes.io/component=worker"
