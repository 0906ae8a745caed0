"""WorkerFleet → one Deployment of workers per planned switch (and a Dask scheduler if asked).

Container arguments are lists built from validated fields: nothing a user
writes passes through a shell.

A worker reads either through its switch's caches (local) or through the
pool's rendezvous ring (hashed), and learns which from its environment, so one
Deployment holds one kind. In `auto` routing the planner may put both kinds of
one fleet on one switch (local readers up to what the switch's caches serve,
the rest on the ring: forbidding that would cost Gbps or uplink headroom the
plan can have for free). Such a switch gets two Deployments, `<fleet>-<switch>-local`
and `<fleet>-<switch>-ring`, each selecting its pods by ROUTING_LABEL as well; a
switch with one kind keeps the single `<fleet>-<switch>`.

What changes with the plan's ring (which caches, their weights, which switches
have caches) is not in the pod template: it is the fleet's routing ConfigMap
(`<fleet>-routing`, keys `ring` and `switches`, and `hot` while the pool's
status lists hot files: build_routing_config), mounted as a directory at
ROUTING_DIR in every worker of a fleet with a pool. The kubelet refreshes a
directory mount (a `subPath` mount it never would) by swapping its `..data`
symlink, and the routing client re-reads the file (switchyard.routing
RingFile), so a cache lost, added or reweighted changes where new reads go
within about a minute and restarts no worker. The fleet owns it, not the pool:
a ConfigMap volume must be in the pod's namespace, the ring is the fleet's
slice of the plan (its status.plan), and it is pruned with the fleet.

The ring names each cache host `name@root://<InternalIP>:<port>`: the rule
hashes the node name (planner/hashing.py; an address change moves no file),
workers connect to the node's InternalIP. Cache pods run on the host network,
so xrootd listens on the node's addresses and an InternalIP reaches it from
any pod through no DNS at all; a node's name resolves only where the site's
DNS knows node names, and per-pod names of a headless Service over
host-network pods would still need cluster DNS records for them (and the
cache advertises its own host to redirected clients). A node without an
InternalIP is named by its node name, which the fleet's status says.

The routing client reaches every worker of a fleet with a pool, whatever its
image: two init containers (routing_containers) copy it from the operator's
image into an emptyDir first on PYTHONPATH, then check, in the worker's image,
that it can route there (the XRootD bindings, fsspec-xrootd), the verdict
going to the pod's status. Always, not on request: a site image that has
switchyard gets the operator's copy first, so the client that reads the ring
file is always of the operator's version, which wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..api.workerfleet import DEFAULT_DASK_IMAGE, DEFAULT_TASKVINE_IMAGE, WorkerFleetSpec
from ..api.plans import FleetPlan
from ..routing import HASH_RULE, HOT_KEY, RING_FILE_ENV, RING_KEY, ring_entry  # HASH_RULE: planner/hashing.py's, as workers are told it
from .common import (COMPONENT_LABEL, FLEET_LABEL, GATEWAY_COMPONENT, SWITCH_LABEL, PolicyPeers, child_name,
                     dask_scheduler_probes, ingress_policy, labels, namespaces_peer, restricted_pod_security_context,
                     restricted_security_context, switch_affinity, tolerations)
from .xcachepool import endpoint

ROUTING_LABEL = "switchyard.dev/routing"  # on the two Deployments (and pods) of a switch with both kinds
DASK_SCHEDULER_PORT = 8786
DASK_DASHBOARD_PORT = 8787
CHILD_KINDS = ("Deployment", "Service", "NetworkPolicy", "ConfigMap")
ROUTING_DIR = "/etc/switchyard/routing"  # the routing ConfigMap, mounted as a directory (never subPath)
SWITCHES_KEY = "switches"
# Dask workers that read through a pool load switchyard.routing.dask_preload: their
# root:// reads (fsspec, uproot) then go to the caches their environment names. The
# routing client is the operator's copy on PYTHONPATH (routing_containers), in any image;
# as preload text, not a module name, so a worker whose Python cannot import it still
# starts (and says in its log that reads are not routed) instead of failing the import.
ROUTING_PRELOAD = (
    "try:\n"
    "    from switchyard.routing.dask_preload import dask_setup\n"
    "except ImportError as error:\n"
    "    import logging\n"
    "    logging.getLogger('distributed.switchyard').warning('root:// reads are not routed through the caches: %s', error)\n"
)
TASKVINE_IDLE_TIMEOUT_SECONDS = 86400  # a worker Kubernetes restarts should not quit after 15 idle minutes
# XRootD client settings for reads through the caches: fail over quickly to
# the next cache instead of waiting on a dead one for minutes, and try a cache
# again soon after it failed: once a connection to a host fails, XrdCl refuses
# that host for its stream error window (30 minutes by default), so a worker
# would not read from a cache that came back and is in its ring again.
XROOTD_CLIENT_ENV = (
    ("XRD_CONNECTIONWINDOW", "10"),
    ("XRD_CONNECTIONRETRY", "2"),
    ("XRD_STREAMERRORWINDOW", "30"),
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


def reader_groups(plan: FleetPlan, switch: str) -> list[tuple[str, str | None, int]]:
    """The fleet's workers on `switch` by how they read: (name suffix, routing, planned count).

    Routing is "local" or "hashed" (None: the fleet reads through no pool). Both kinds on one
    switch give two groups, suffixed "local" and "ring"; one kind, one group without a suffix.
    """
    count = plan.workers.get(switch, 0)
    if not plan.pool:
        return [("", None, count)]
    has_cache = switch in plan.cache_switches
    ring = min(count, plan.hashed.get(switch, 0)) if has_cache else count
    if 0 < ring < count:
        return [("local", "local", count - ring), ("ring", "hashed", ring)]
    return [("", "hashed" if ring else "local", count)]


def cache_env(plan: FleetPlan, namespace: str, switch: str, routing: str | None = None) -> list[dict]:
    """Where a worker on `switch` reads through: its switch's cache, or the whole pool.

    `routing`: how this worker reads (reader_groups); by default the switch's routing. A ring
    reader is told the ring's file (build_routing_config), never the ring: the template stays put."""
    pool = plan.pool
    if not pool:
        return []
    port = plan.pool_port
    routing = routing or plan.routing.get(switch, "local")
    local = routing == "local" and switch in plan.cache_switches
    env = [
        {"name": "SWITCHYARD_CACHE_ENDPOINT", "value": "root://" + endpoint(pool, namespace, port, switch if local else None)},
        {"name": "SWITCHYARD_ROUTING", "value": routing},
        # fixed: a cache fetches misses from its own origin; forward: readers put the origin's URL in the path
        {"name": "SWITCHYARD_CACHE_ORIGIN_MODE", "value": plan.pool_origin_mode},
        *({"name": k, "value": v} for k, v in XROOTD_CLIENT_ENV),
    ]
    if routing == "hashed":
        env += [
            {"name": "SWITCHYARD_HASH_RULE", "value": HASH_RULE},
            {"name": RING_FILE_ENV, "value": f"{ROUTING_DIR}/{RING_KEY}"},
        ]
    return env


def routing_config_name(fleet: str) -> str:
    return child_name(fleet, "routing")


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address  # an IPv6 address in a URL


def ring_entries(plan: FleetPlan, addresses: Mapping[str, str | None]) -> tuple[list[str], list[str]]:
    """The ring's entries (`node@root://InternalIP:port=weight`, by node name) and the cache hosts
    named by their node name for want of an InternalIP (`addresses`: node name -> its InternalIP)."""
    return _entries(plan.cache_ring, plan.pool_port, addresses)


def _entries(ring: Mapping[str, float], port: int, addresses: Mapping[str, str | None]) -> tuple[list[str], list[str]]:
    entries, unaddressed = [], []
    for node, weight in sorted(ring.items()):
        address = addresses.get(node)
        if not address:
            unaddressed.append(node)
        entries.append(ring_entry(node, f"{_host(address or node)}:{port}", weight))
    return entries, unaddressed


def hot_list_text(pool: str, hot_files: Sequence[Mapping]) -> str | None:
    """The `hot` key: `replicas path` per line, by path (a path listed twice keeps its most replicas);
    None for no hot file, so a ConfigMap without hot files is the one of before hot files existed."""
    replicas: dict[str, int] = {}
    for hot in hot_files:
        replicas[hot["path"]] = max(replicas.get(hot["path"], 0), int(hot["replicas"]))
    if not replicas:
        return None
    # The count first and the path as the rest of the line: no path needs quoting (none has white space).
    header = (f"# {HASH_RULE} hot files of XCachePool {pool}: replicas path, one per line; each reader reads "
              "one from the first `replicas` caches of its ring order (planner/hashing.py, steps 5-7)")
    return "".join(f"{line}\n" for line in [header, *(f"{k} {path}" for path, k in sorted(replicas.items()))])


def routing_data(pool: str, ring: Mapping[str, float], port: int, addresses: Mapping[str, str | None],
                 hot_files: Sequence[Mapping] = ()) -> dict[str, str]:
    """A pool's ring (`ring`: node -> weight, as published) and hot list as its readers read them: the
    `ring` and `hot` keys of its fleets' routing ConfigMaps, and what its exporters serve to readers outside
    Kubernetes (builders/xcachepool.py build_client_map). No hot file, no `hot` key."""
    entries, unaddressed = _entries(ring, port, addresses)
    header = [f"# {HASH_RULE} ring of XCachePool {pool}: node@root://address:port=weight, one per line"]
    header += [f"# {node}: no InternalIP, named by its node name" for node in unaddressed]
    data = {RING_KEY: "\n".join(header + entries) + "\n"}
    if (hot := hot_list_text(pool, hot_files)) is not None:
        data[HOT_KEY] = hot
    return data


def build_routing_config(fleet: str, plan: FleetPlan, addresses: Mapping[str, str | None],
                         hot_files: Sequence[Mapping] = ()) -> dict | None:
    """The fleet's routing ConfigMap (what its ring readers re-read), or None for a fleet without a pool.

    `hot_files`: the pool's status.hotFiles ({path, replicas}); none, no `hot` key."""
    if not plan.pool:
        return None
    routing = routing_data(plan.pool, plan.cache_ring, plan.pool_port, addresses, hot_files)
    data = {RING_KEY: routing[RING_KEY], SWITCHES_KEY: "".join(f"{sw}\n" for sw in plan.cache_switches),
            **({HOT_KEY: routing[HOT_KEY]} if HOT_KEY in routing else {})}
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": routing_config_name(fleet), "labels": labels("routing", fleet, **{FLEET_LABEL: fleet})},
        "data": data,
    }


JITTER_RESOURCES = {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "16Mi"}
# The routing client in any worker image (routing/bundle.py, routing/check.py): `routing-copy` (the operator's
# image) writes switchyard.routing into an emptyDir mounted at ROUTING_CLIENT_DIR, first on the worker's
# PYTHONPATH; `routing-check` (the worker's image) then writes whether that image can route to its
# termination message, which the fleet's status reports (desired/workerfleet.py routing_verdict).
ROUTING_CLIENT_DIR = "/opt/switchyard-routing"
ROUTING_CLIENT_VOLUME = "routing-client"
COPY_CONTAINER, CHECK_CONTAINER = "routing-copy", "routing-check"
COPY_RESOURCES = {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "16Mi"}
ROUTING_CLIENT_SIZE = "16Mi"  # the copied sources are ~100 KiB


def python_path(spec: WorkerFleetSpec) -> str:
    """The workers' PYTHONPATH: the routing client first, then the fleet's own PYTHONPATH (spec.env), if any.
    A pod's variable replaces its image's (Kubernetes cannot extend an image's ENV): a site whose image sets
    PYTHONPATH repeats it in the fleet's env."""
    own = [e.value for e in spec.env if e.name == "PYTHONPATH" and e.value]
    return ":".join([ROUTING_CLIENT_DIR, *own])


def fleet_env(spec: WorkerFleetSpec) -> list[dict]:
    """The fleet's own env (spec.env) as a container's, its PYTHONPATH folded into python_path's."""
    return [{"name": e.name, "value": e.value} for e in spec.env if e.name != "PYTHONPATH"]


def routing_containers(spec: WorkerFleetSpec, helper_image: str) -> list[dict]:
    """Copy the routing client (operator's image), then check the worker's image can use it (always exit 0)."""
    mount = {"name": ROUTING_CLIENT_VOLUME, "mountPath": ROUTING_CLIENT_DIR}
    resources = {"cpu": str(spec.cores), "memory": str(memory_bytes(spec)), "ephemeral-storage": "16Mi"}
    copy = {
        "name": COPY_CONTAINER,
        "image": helper_image,
        "args": ["copy-routing", ROUTING_CLIENT_DIR],
        "volumeMounts": [mount],
        "resources": {"requests": dict(COPY_RESOURCES), "limits": dict(COPY_RESOURCES)},
        "securityContext": {**restricted_security_context(65532), "readOnlyRootFilesystem": True},
    }
    check = {
        "name": CHECK_CONTAINER,
        "image": worker_image(spec),
        "command": ["python3", "-m", "switchyard.routing.check"],
        "env": [{"name": "PYTHONPATH", "value": python_path(spec)}, *fleet_env(spec)],
        "volumeMounts": [{**mount, "readOnly": True}],
        # The worker's own cpu and memory (the imports run as fast as the worker's would): init containers run
        # one at a time before it, so the pod's request is the larger of theirs and the worker's, i.e. the
        # worker's; limits equal to requests keep the pod's Guaranteed QoS class.
        "resources": {"requests": resources, "limits": dict(resources)},
        # An import that fails before the verdict is written still leaves its traceback's end as the message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {**restricted_security_context(), "readOnlyRootFilesystem": True},
    }
    return [copy, check]


def jitter_container(spec: WorkerFleetSpec, helper_image: str) -> dict:
    """Waits a delay fixed by the pod's name before the engine starts (see switchyard.rampup)."""
    return {
        "name": "jitter",
        "image": helper_image,
        "args": ["jitter", "--name", "$(POD_NAME)", "--max-seconds", str(spec.ramp_up.jitter_seconds)],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        # Limits equal to requests, as the worker's: the pod keeps its Guaranteed QoS class.
        "resources": {"requests": dict(JITTER_RESOURCES), "limits": dict(JITTER_RESOURCES)},
        "securityContext": {**restricted_security_context(65532), "readOnlyRootFilesystem": True},
    }


TLS_MOUNT = "/etc/dask-tls"


def tls_env(spec: WorkerFleetSpec) -> list[dict]:
    """Dask's TLS settings for workers given dask.tlsSecret (the pair mounted at TLS_MOUNT), else nothing."""
    if spec.dask is None or not spec.dask.tls_secret:
        return []
    return [{"name": "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION", "value": "True"},
            {"name": "DASK_DISTRIBUTED__COMM__TLS__CA_FILE", "value": f"{TLS_MOUNT}/dask.crt"},
            {"name": "DASK_DISTRIBUTED__COMM__TLS__WORKER__CERT", "value": f"{TLS_MOUNT}/dask.crt"},
            {"name": "DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY", "value": f"{TLS_MOUNT}/dask.pem"}]


def build_worker_deployment(fleet: str, namespace: str, spec: WorkerFleetSpec, switch: str, count: int,
                            switch_label: str, plan: FleetPlan, *, helper_image: str,
                            staging_env: Sequence[dict] = (), group: str = "", routing: str | None = None) -> dict:
    """`group`, `routing`: one of reader_groups' (a suffix only where a switch has both kinds)."""
    name = child_name(fleet, switch, group)
    selector = {FLEET_LABEL: fleet, SWITCH_LABEL: switch, **({ROUTING_LABEL: group} if group else {})}
    pod_labels = labels("worker", fleet, **selector)
    resources = {"cpu": str(spec.cores), "memory": str(memory_bytes(spec))}
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "SWITCHYARD_FLEET", "value": fleet},
        {"name": "SWITCHYARD_SWITCH", "value": switch},
        *cache_env(plan, namespace, switch, routing),
        *staging_env,  # builders.s3staging.staging_env: keys as Secret references only
        *(fleet_env(spec) if plan.pool else ({"name": e.name, "value": e.value} for e in spec.env)),
        *([{"name": "PYTHONPATH", "value": python_path(spec)}] if plan.pool else []),
        *tls_env(spec),
    ]
    command = worker_command(fleet, namespace, spec)
    if spec.dask is not None and plan.pool:
        command += ["--preload", ROUTING_PRELOAD]
    container = {
        "name": "worker",
        "image": worker_image(spec),
        "command": command[:1],
        "args": command[1:],
        "env": env,
        "resources": {"requests": resources, "limits": resources},
        "securityContext": restricted_security_context(),
    }
    tls = spec.dask.tls_secret if spec.dask is not None else None
    mounts, volumes = [], []
    if tls:
        mounts.append({"name": "dask-tls", "mountPath": TLS_MOUNT, "readOnly": True})
        volumes.append({"name": "dask-tls", "secret": {"secretName": tls}})
    if plan.pool:  # a directory, never subPath: the kubelet refreshes it as the ring changes
        mounts.append({"name": "routing", "mountPath": ROUTING_DIR, "readOnly": True})
        volumes.append({"name": "routing", "configMap": {"name": routing_config_name(fleet)}})
        mounts.append({"name": ROUTING_CLIENT_VOLUME, "mountPath": ROUTING_CLIENT_DIR, "readOnly": True})
        volumes.append({"name": ROUTING_CLIENT_VOLUME, "emptyDir": {"sizeLimit": ROUTING_CLIENT_SIZE}})
    init = [jitter_container(spec, helper_image)] if spec.ramp_up.jitter_seconds else []
    if plan.pool:
        init += routing_containers(spec, helper_image)
    if mounts:
        container["volumeMounts"] = mounts
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
                    **tolerations(spec.tolerations),
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": restricted_pod_security_context(),
                    "containers": [container],
                    **({"volumes": volumes} if volumes else {}),
                    **({"initContainers": init} if init else {}),
                },
            },
        },
    }


def scheduler_policy(fleet: str, namespace: str, spec: WorkerFleetSpec, peers: PolicyPeers) -> dict:
    """Who may reach the fleet's scheduler (comm and dashboard): its own workers, the chart's
    dask-gateway, and pods in the namespaces dask.clientNamespaces names (default: the fleet's)."""
    own_workers = {"podSelector": {"matchLabels": {FLEET_LABEL: fleet, COMPONENT_LABEL: "worker"}}}
    clients = spec.dask.client_namespaces or [namespace]
    return ingress_policy(scheduler_name(fleet), labels("scheduler", fleet, **{FLEET_LABEL: fleet}),
                          scheduler_selector(fleet),
                          [own_workers, peers.chart_pods(GATEWAY_COMPONENT), namespaces_peer(clients)],
                          [DASK_SCHEDULER_PORT, DASK_DASHBOARD_PORT])


def scheduler_selector(fleet: str) -> dict[str, str]:
    return {FLEET_LABEL: fleet, COMPONENT_LABEL: "scheduler"}


def build_scheduler(fleet: str, spec: WorkerFleetSpec) -> list[dict]:
    name = scheduler_name(fleet)
    selector = scheduler_selector(fleet)
    pod_labels = {**labels("scheduler", fleet), **selector}
    container = {
        "name": "scheduler",
        "image": worker_image(spec),
        "command": ["dask"],
        "args": ["scheduler", "--port", str(DASK_SCHEDULER_PORT), "--dashboard-address", f":{DASK_DASHBOARD_PORT}"],
        "ports": [{"name": "comm", "containerPort": DASK_SCHEDULER_PORT}, {"name": "dashboard", "containerPort": DASK_DASHBOARD_PORT}],
        **dask_scheduler_probes("comm", "dashboard"),
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "securityContext": restricted_security_context(),
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": pod_labels},
                              "spec": {"automountServiceAccountToken": False, "enableServiceLinks": False,
                                       "containers": [container], **tolerations(spec.tolerations),
                                       "securityContext": restricted_pod_security_context()}}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {"selector": selector, "ports": [
            {"name": "comm", "port": DASK_SCHEDULER_PORT, "targetPort": DASK_SCHEDULER_PORT},
            {"name": "dashboard", "port": DASK_DASHBOARD_PORT, "targetPort": DASK_DASHBOARD_PORT}]},
    }
    return [deployment, service]


def build_fleet(fleet: str, namespace: str, spec: WorkerFleetSpec, plan: FleetPlan, *,
                helper_image: str, counts: dict[str, int] | None = None,
                staging_env: Sequence[dict] = (), policies: PolicyPeers | None = None) -> list[dict]:
    """Every child of one fleet, in a deterministic order.

    `counts` (workers per switch) are where the ramp-up stands; they default
    to the plan's. A switch at zero keeps its Deployment while the plan has
    workers there, so a ramp never prunes what it is about to grow.
    `policies`: a scheduler gets its NetworkPolicy, admitting these too (None: no policy).
    """
    out = []
    if spec.dask is not None and spec.dask.create_scheduler:
        out += build_scheduler(fleet, spec)
        if policies is not None:
            out.append(scheduler_policy(fleet, namespace, spec, policies))
    planned = plan.workers
    counts = planned if counts is None else counts
    for switch in sorted(planned):
        if planned[switch] <= 0:
            continue
        now = counts.get(switch, 0)
        groups = reader_groups(plan, switch)
        # a ramp in progress grows the groups in proportion; at the planned count each has its own
        left = now
        for i, (group, routing, n) in enumerate(groups):
            share = left if i == len(groups) - 1 else min(left, now * n // planned[switch])
            left -= share
            out.append(build_worker_deployment(fleet, namespace, spec, switch, share, plan.switch_label, plan,
                                               helper_image=helper_image, staging_env=staging_env,
                                               group=group, routing=routing))
    return out


def pod_selector(fleet: str) -> str:
    return f"{FLEET_LABEL}={fleet},app.kubernetes.io/component=worker"
