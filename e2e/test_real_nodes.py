"""The operator from its chart, and a facility's caches and workers, running for real on kubelet nodes.

A kwokctl cluster of e2e/topologies/real.yaml: two `real: true` nodes (e2e/realnodes.py:
containerd + kubelet v1.31.4 + kube-proxy each, in network namespaces behind their
switches' bridges, CoreDNS for names) beside 8 simulated ones. Every image they run comes
from a registry, as at a site: the CNCF distribution registry on the host
(realnodes.Cluster.start_registry), which `make images REGISTRY=... PUSH=1` pushes to and
the nodes' containerd pull from by reference (nothing is imported from an archive; the
push and pull times go to real-node-costs.json). `helm install` puts the
operator, from the image `make images` built here, into a namespace enforcing Pod
Security `restricted`, with a toleration and node selector that put it on a real node;
the kubelet runs its probes, the operator reaches the API server through the
`kubernetes` Service and makes a facility Ready. Then a facility whose pool and fleet
tolerate the real nodes' taint runs real xrootd from the rendered ConfigMap and a real
Dask scheduler and worker; a task reads a file from a real origin through its switch's
cache, a real Prometheus scrapes the exporter with the admin guide's scrape job, and a
deleted cache pod comes back with its disk (warm reads). Then the chart's dask-gateway
(`helm upgrade --set gateway.enabled=true`) runs on a real node, and the dask_gateway client,
in an analyst's pod, makes a cluster through it, scales it, runs a task on its real worker pod
that reads through its switch's cache, and shuts it down leaving nothing. The cache's disks are real
mounts (tmpfs, mounted by the test); its data path starts out as a plain directory on
the root filesystem, which the pool must refuse (DiskNotMounted, nothing written)
until a disk is mounted there. xrootd runs as the xrootd user of switchyard's own
image (1094, not OSG's 10940), set by the pool's xrootdUser alone. At the end every
process, mount, namespace, cgroup and sysctl the real nodes made must be gone.

Needs root, the packages of hack/install-realnode-deps.sh, `make tools` and
`make images`; `make test` and `make e2e-real` run it (SWITCHYARD_REAL_NODES=1).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

if not os.environ.get("SWITCHYARD_REAL_NODES"):
    pytest.skip("real-node e2e: run `make e2e-real` (SWITCHYARD_REAL_NODES=1)", allow_module_level=True)

import localcluster  # noqa: E402
import realnodes  # noqa: E402
from facilities import facility  # noqa: E402
from harness import Cluster, temporary_namespace  # noqa: E402
from realchecks import SERVED_KINDS, exporter_metrics, host_state, metric  # noqa: E402
from support import condition, wait_for, wait_ready  # noqa: E402

sys.path.insert(0, str(localcluster.REPO / "operator" / "tests" / "integration"))
from prom import run_prometheus  # noqa: E402

pytestmark = pytest.mark.e2e

CLUSTER = os.environ.get("SWITCHYARD_REAL_CLUSTER", "sy-real")
CHART = localcluster.REPO / "charts" / "switchyard"
RELEASE = "sy"
OPERATOR_NAMESPACE = "sy-operator"
# Real nodes on switches of their own (rack-a, rack-b); the simulated ones on rack-c and rack-d.
# Two real nodes (`real: true` groups), each on a switch of its own, beside 8 simulated ones.
TOPOLOGY = localcluster.REPO / "e2e" / "topologies" / "real.yaml"
NODES = realnodes.from_topology(TOPOLOGY)
CACHE_HOST, OTHER = (node.name for node in NODES)  # rack-a-real has the NVMe disk
# The cache disks of the real cache host (host paths below the chart's default allowlist), each a tmpfs
# the test mounts (the data disk only once the pool has refused it as a plain root-fs directory).
DISK = pathlib.Path("/srv/switchyard-real/nvme0")
META = DISK.parent / "meta"
# The xrootd user of switchyard's own XCache image (images/xcache/Containerfile), not OSG's 10940.
XROOTD_UID = 1094
COSTS = localcluster.CACHE / "e2e-logs" / CLUSTER / "real-node-costs.json"
# Where the chart and the facility take their images from: the harness's registry, with a site's path in it.
REGISTRY = f"{realnodes.REGISTRY}/site"
OPERATOR_IMAGE, XCACHE_IMAGE, DASK_IMAGE = (f"{REGISTRY}/{name}:0.1.0"
                                            for name in ("switchyard", "switchyard-xcache", "switchyard-dask"))
# What `make images ... PUSH=1` pushed: {reference: {"digest", "seconds"}} (the fixture fills it).
PUSHED: dict[str, dict] = {}


def _host_state() -> dict:
    return host_state(extra_mounts=(str(DISK.parent),))


@pytest.fixture(scope="module")
def real():
    nodes = realnodes.Cluster(CLUSTER, localcluster.kubeconfig_path(CLUSTER), registry=REGISTRY)
    # The host lock first: while another run's real nodes are up, their kubelets' sysctls are the machine's.
    nodes._take_host()
    realnodes.down(CLUSTER)  # whatever a run that died left behind
    _remove_disks()
    localcluster.down(CLUSTER)
    before = _host_state()
    try:
        config = realnodes.kwokctl_config(localcluster.CACHE / "clusters" / CLUSTER / "realnodes-kwokctl.yaml")
        kubeconfig = localcluster.up(CLUSTER, TOPOLOGY, config=config)
        localcluster.install_crds(CLUSTER)
        nodes.up(NODES, images=[])   # no archive: the nodes pull every image, pause included, from the registry
        PUSHED.update(_push_images(nodes))
        yield Cluster(CLUSTER, kubeconfig), nodes, before
    finally:
        _post_mortem()
        if os.environ.get("SWITCHYARD_KEEP_CLUSTER"):  # for a post-mortem; then `make realnodes-down`
            return
        nodes.down()   # and the host lock with it
        _remove_disks()
        if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):
            localcluster.down(CLUSTER)


def _mount_disk(path: pathlib.Path, size: str) -> None:
    """A tmpfs at `path`: a filesystem of its own, as a cache host's NVMe is."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", f"switchyard-real-{path.name}", str(path)],
                   check=True)


def _remove_disks() -> None:
    """Unmount the test's disks (deepest first, all of them if mounted twice), then remove their directories."""
    for path in (DISK, META):
        while realnodes._is_mount(str(path)):
            if subprocess.run(["umount", str(path)], check=False).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], check=False)
    subprocess.run(["rm", "-rf", str(DISK.parent)], check=False)


def _post_mortem() -> None:
    """The operator's log and the objects' state, kept beside the real nodes' logs."""
    COSTS.parent.mkdir(parents=True, exist_ok=True)
    for name, args in (("operator.log", ["logs", "-n", OPERATOR_NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}",
                                         "--tail=-1", "--prefix"]),
                       ("objects.yaml", ["get", "analysisfacilities,xcachepools,workerfleets,pods,events", "-A",
                                         "-o", "yaml"])):
        text = localcluster.kubectl(CLUSTER, *args, check=False)
        if text:   # after the nodes are gone there is no log to fetch: keep the one taken before
            (COSTS.parent / name).write_text(text)


def helm(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(localcluster.tools() / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _probe_counts(cluster: Cluster, node: str, pod: str) -> dict[tuple[str, str], float]:
    """The kubelet's own prober counters for `pod`: {(probe_type, result): count}."""
    text = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics/probes")
    out = {}
    for line in text.splitlines():
        if line.startswith("prober_probe_total{") and f'pod="{pod}"' in line:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            out[(labels["probe_type"], labels["result"])] = float(line.rsplit(" ", 1)[1])
    return out


def _push_images(nodes: realnodes.Cluster) -> dict[str, dict]:
    """The registry started on the host, and `make images REGISTRY=<it> PUSH=1`, as a site pushes to its own."""
    address = nodes.start_registry()
    # It listens on the host's end of the fabric veth alone: nothing beyond this host and the nodes reaches it.
    listening = subprocess.run(["ss", "-Hltn", f"sport = :{realnodes.REGISTRY_PORT}"], capture_output=True,
                               text=True, check=True).stdout.split()
    assert [field for field in listening if field.endswith(f":{realnodes.REGISTRY_PORT}")] == [address], listening
    result = subprocess.run(["make", "-C", str(localcluster.REPO), "images", f"REGISTRY={REGISTRY}", "PUSH=1",
                             "PUSH_TLS_VERIFY=false"], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, f"make images ... PUSH=1 failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    pushed = {}
    for line in result.stdout.splitlines():
        if line.startswith("pushed\t"):
            _, ref, digest, seconds = line.split("\t")
            pushed[ref] = {"digest": digest, "seconds": float(seconds.rstrip("s"))}
    assert {OPERATOR_IMAGE, XCACHE_IMAGE, DASK_IMAGE, nodes.pause_image} <= set(pushed), result.stdout
    return pushed


PULLED = re.compile(r'Successfully pulled image "([^"]+)" in (\S+) \((\S+) including waiting\)'
                    r'(?:\. Image size: (\d+) bytes)?')


def _go_seconds(duration: str) -> float:
    """A Go duration as the kubelet prints it (1m2.5s, 812ms, 3.25s) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    return round(sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|us|µs|ns|h|m|s)", duration)), 3)


def _pulls(cluster: Cluster, namespace: str) -> list[dict]:
    """The image pulls the kubelets made for pods of `namespace`, from their Pulled events."""
    out = []
    for event in cluster.kube.list("Event", namespace):
        found = PULLED.search(event.get("message", "")) if event.get("reason") == "Pulled" else None
        if found:
            out.append({"node": (event.get("source") or {}).get("host"), "pod": event["involvedObject"]["name"],
                        "image": found[1], "seconds": _go_seconds(found[2]),
                        "seconds_including_waiting": _go_seconds(found[3]),
                        "bytes": int(found[4]) if found[4] else None})
    return sorted(out, key=lambda p: (p["image"], p["node"] or ""))


def _ran_pushed(status: dict, image: str) -> None:
    """The container ran the image `make images ... PUSH=1` pushed, by the digest the registry gave it."""
    assert status["imageID"] == f"{image.rsplit(':', 1)[0]}@{PUSHED[image]['digest']}", (status, PUSHED.get(image))


def test_operator_from_the_chart_runs_on_a_real_node(real):
    cluster, nodes, _ = real
    costs = {"nodes": nodes.nodes}
    # Real nodes registered by their kubelets, labelled like simulated ones, tainted, untouched by kwok.
    for node in NODES:
        obj = cluster.kube.get("Node", None, node.name)
        assert obj["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.4"
        assert obj["metadata"]["labels"]["switchyard.dev/switch"] == node.switch
        assert realnodes.REAL_TAINT["key"] in [t["key"] for t in obj["spec"].get("taints", [])]
        assert "kwok.x-k8s.io/node" not in obj["metadata"].get("annotations", {})

    namespace = OPERATOR_NAMESPACE
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    started = time.monotonic()
    helm(cluster, "install", RELEASE, str(CHART), "-n", namespace, "--wait", "--timeout", "5m",
         "--set", f"image.repository={OPERATOR_IMAGE.rsplit(':', 1)[0]}", "--set", "image.tag=0.1.0",
         "--set-json", f"tolerations=[{json.dumps(realnodes.TOLERATION)}]",
         "--set-json", f'nodeSelector={{"{realnodes.REAL_LABEL}": "true"}}')
    # Two replicas: the one that holds the leader Lease reconciles (docs/admin-guide.md, "Several replicas, one leader").
    name = wait_for(lambda: ((cluster.kube.get("Lease", namespace, f"{RELEASE}-switchyard-leader") or {})
                             .get("spec") or {}).get("holderIdentity"), timeout=60, what="a leader")
    pod = cluster.kube.get("Pod", namespace, name)
    node = pod["spec"]["nodeName"]
    costs["operator_pod_ready_after_helm_install_seconds"] = round(time.monotonic() - started, 1)
    assert node in nodes.nodes, f"the operator pod landed on {node}, not on a real node"
    status = pod["status"]
    assert status["podIP"].startswith("10.244."), status.get("podIP")
    assert status["containerStatuses"][0]["state"].get("running"), status["containerStatuses"][0]
    assert status["containerStatuses"][0]["imageID"], "no image ID: the container did not run from an image"
    # Pulled from the registry by its reference, and no node holds an image it did not pull (no archive import).
    _ran_pushed(status["containerStatuses"][0], OPERATOR_IMAGE)
    pulls = wait_for(lambda: [p for p in _pulls(cluster, namespace)
                              if p["image"] == OPERATOR_IMAGE and p["node"] == node],
                     timeout=60, what="the kubelet's Pulled event for the operator image")
    costs["push"] = PUSHED
    costs["pulls"] = _pulls(cluster, namespace)
    assert pulls[0]["bytes"], pulls
    for real_node in nodes.nodes:
        refs = nodes.images(real_node)
        assert nodes.pause_image in refs and not [r for r in refs if r.startswith("localhost/")], (real_node, refs)

    # The kubelet probed the container: liveness and readiness succeeded, none failed.
    counts = wait_for(lambda: (c := _probe_counts(cluster, node, name)).get(("Liveness", "successful"), 0) >= 1 and c,
                      timeout=120, what="a successful liveness probe by the kubelet")
    assert counts.get(("Readiness", "successful"), 0) >= 1, counts
    assert counts.get(("Liveness", "failed"), 0) == 0 and counts.get(("Liveness", "unknown"), 0) == 0, counts

    # /metrics and /healthz, served by the process in the container (through the API server's pod proxy).
    metrics = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}:8080/proxy/metrics")
    assert "# TYPE switchyard_" in metrics, metrics[:500]
    health = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}:8081/proxy/healthz")
    assert health.strip(), "empty /healthz"

    # In the container: the chart's ServiceAccount, names resolved by the cluster's DNS.
    resolved = cluster.kubectl("exec", "-n", namespace, name, "--", "python", "-c",
                               "import socket; print(socket.gethostbyname('kubernetes.default.svc.cluster.local'))")
    assert resolved.strip() == realnodes.SERVICE_IP
    whoami = cluster.kubectl("exec", "-n", namespace, name, "--", "cat",
                             "/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    assert whoami.strip() == namespace

    # The operator, talking to the API server through the `kubernetes` Service, makes a facility Ready.
    af_namespace = next(temporary_namespace(cluster.kube, "real-af"))
    obj = facility(workers=4)
    obj["spec"]["network"]["switches"] = [{"name": "rack-c", "uplinkGbps": 80}, {"name": "rack-d", "uplinkGbps": 80}]
    obj["metadata"]["namespace"] = af_namespace
    cluster.kube.apply(obj)
    af = wait_ready(cluster, af_namespace, timeout=240)
    assert af["status"]["workers"] == 4
    logs = cluster.kubectl("logs", "-n", namespace, name)
    assert "Created StatefulSet af-xcache-rack-c" in logs and "Ready=True" in logs, logs[-2000:]
    pod = cluster.kube.get("Pod", namespace, name)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0

    # Pod start on a real node, from a local image (the pause binary as the container; no probes).
    started = time.monotonic()
    cluster.kube.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "start", "namespace": af_namespace},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": OTHER}, "tolerations": [realnodes.TOLERATION],
                 "containers": [{"name": "c", "image": nodes.pause_image}]},
    })
    wait_for(lambda: (cluster.kube.get("Pod", af_namespace, "start") or {}).get("status", {}).get("phase") == "Running",
             timeout=60, interval=0.1, what="a pause pod Running on a real node")
    costs["pod_running_after_create_seconds"] = round(time.monotonic() - started, 2)

    costs["memory_mib_per_node"] = nodes.memory_mib()
    COSTS.parent.mkdir(parents=True, exist_ok=True)
    COSTS.write_text(json.dumps(costs, indent=1))
    print(json.dumps(costs, indent=1))


READ = r"""
import hashlib, json, os, subprocess, sys, time
from distributed import Client

def read(path):
    # On the worker: through the cache endpoint its environment names.
    import hashlib, os, subprocess, time
    endpoint = os.environ["SWITCHYARD_CACHE_ENDPOINT"]
    started = time.monotonic()
    data = subprocess.run(["xrdcp", "-f", "-s", endpoint + "/" + path, "-"], capture_output=True, check=True).stdout
    return {"endpoint": endpoint, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "seconds": round(time.monotonic() - started, 3), "worker_host": os.uname().nodename}

client = Client(sys.argv[1], timeout=60)
print(json.dumps([client.submit(read, sys.argv[2], pure=False).result(timeout=120) for _ in range(2)]))
"""


def _read_on_worker(cluster: Cluster, worker: dict, scheduler: str, path: str) -> list[dict]:
    """Two reads of `path`, as tasks the Dask scheduler runs on the worker."""
    out = cluster.kubectl("exec", "-n", worker["metadata"]["namespace"], worker["metadata"]["name"], "-c",
                          worker["spec"]["containers"][0]["name"], "--", "python", "-c", READ, scheduler, path)
    return json.loads(out.strip().splitlines()[-1])


def _exporter_after_served(cluster: Cluster, cache: dict, served: int) -> str:
    """The cache exporter's metrics, once its pfc close records account for `served` bytes to clients.

    Bytes, not a count of closes: XrdPfc closes a file only once its writes are synced, and a read
    that opens the file before that reattaches to the same open file, whose one close record then
    carries both reads' bytes (two xrdcp in a row gave 1 close now and then, with every byte in it).
    """
    return exporter_metrics(cluster, cache, lambda text: sum(metric(text, f"switchyard_xcache_{kind}_bytes")
                                                             for kind in SERVED_KINDS) >= served,
                            what=f"{served} bytes served in the exporter's close records")


def test_cache_and_dask_workers_run_on_real_nodes(real):
    """A facility whose cache pool and fleet use the local images, placed on the real nodes: real xrootd
    from the rendered ConfigMap, a real Dask scheduler and worker, a task reading a file from a real
    origin through the cache endpoint its worker was given."""
    cluster, nodes, _ = real
    costs = json.loads(COSTS.read_text()) if COSTS.exists() else {}
    # The images come from the registry: the kubelets pull them as the pods start (their times: costs["pulls"]).
    # The pool and the fleet tolerate the real nodes' taint, and the plan puts them there (the facility's
    # switches are theirs). The Dask scheduler is not placed by the plan: the simulated nodes are
    # tainted so that it, too, lands on a real node.
    cluster.kubectl("taint", "nodes", "-l", "type=kwok", "--overwrite", "switchyard.dev/simulated=true:NoSchedule")

    payload = os.urandom(20 * 2**20)
    origin = nodes.start_origin({"data/real.bin": payload})
    host, port = origin.split(":")
    namespace = "real-facility"
    cluster.kubectl("create", "namespace", namespace)
    # The Dask scheduler asks for a whole CPU, a worker for another: a 2-CPU real node holds a cache and
    # a worker, or the scheduler. Hold the cache host until the scheduler is bound elsewhere.
    cluster.kubectl("taint", "node", CACHE_HOST, "switchyard.dev/hold=true:PreferNoSchedule")
    # The meta disk is mounted; the data path is a plain directory on the root filesystem (a disk that
    # failed to mount): the hostPath type is Directory, so both must exist.
    _remove_disks()
    DISK.mkdir(parents=True), META.mkdir()
    _mount_disk(META, "64m")
    cluster.kube.apply({
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility",
        "metadata": {"name": "af", "namespace": namespace},
        "spec": {
            "targetGbps": 2, "routing": "local",
            "network": {"switches": [{"name": "rack-a", "uplinkGbps": 10}, {"name": "rack-b", "uplinkGbps": 10}]},
            "cachePools": [{
                "name": "xcache", "image": XCACHE_IMAGE, "serveGbps": 5,
                "origin": {"host": host, "port": int(port)},
                "storage": {"dataPaths": [str(DISK)], "metaPath": str(META)},
                "xrootdUser": {"uid": XROOTD_UID, "gid": XROOTD_UID},
                "pfc": {"ramGiB": 1},
                "resources": {"cpu": "100m", "memory": "2Gi"},
                "tolerations": [realnodes.TOLERATION],
            }],
            "fleets": [{"name": "dask", "image": DASK_IMAGE, "replicas": 1, "cores": 1,
                        "memoryGiB": 1, "readGbps": 1, "dask": {"createScheduler": True},
                        "tolerations": [realnodes.TOLERATION]}],
        },
    })
    try:
        wait_for(lambda: [p for p in cluster.kube.list("Pod", namespace)
                          if "scheduler" in p["metadata"]["name"] and p["spec"].get("nodeName")],
                 timeout=120, what="the Dask scheduler pod bound")
        cluster.kubectl("taint", "node", CACHE_HOST, "switchyard.dev/hold-")

        # The data path is no disk: the pool says so, naming host and path, and nothing is written there.
        started = time.monotonic()
        degraded = wait_for(lambda: (c := condition(cluster.kube.get("XCachePool", namespace, "af-xcache"), "Degraded"))
                            .get("reason") == "DiskNotMounted" and c, timeout=180, what="the pool Degraded: DiskNotMounted")
        costs["disk_not_mounted_reported_seconds"] = round(time.monotonic() - started, 1)
        assert degraded["status"] == "True" and f"{CACHE_HOST}:{DISK}" in degraded["message"], degraded
        assert str(META) not in degraded["message"], degraded  # the meta disk is mounted
        warnings = wait_for(lambda: [e for e in cluster.kube.list("Event", namespace)
                                     if e.get("reason") == "DiskNotMounted" and e.get("type") == "Warning"
                                     and e["involvedObject"]["name"] == "af-xcache"],
                            timeout=60, what="a DiskNotMounted event")
        assert f"{CACHE_HOST}:{DISK}" in warnings[0]["message"], warnings
        pod = next(p for p in cluster.kube.list("Pod", namespace) if p["metadata"]["name"].startswith("af-xcache-"))
        prepare = pod["status"]["initContainerStatuses"][0]
        refused = prepare["state"].get("terminated") or (prepare.get("lastState") or {}).get("terminated") or {}
        assert refused["exitCode"] == 3 and f"DiskNotMounted {DISK}:" in refused["message"], prepare
        assert not pod["status"].get("containerStatuses", [{}])[0].get("state", {}).get("running"), "xrootd started"
        assert list(DISK.iterdir()) == [] and DISK.stat().st_uid == 0, "something was written to the unmounted path"
        assert list(META.iterdir()) == [], "the prepare step made the meta directories though the data disk was missing"

        # A disk mounted there: the pod's next start finds it (deleted here rather than waiting out the
        # init container's back-off), and the pool serves.
        _mount_disk(DISK, "256m")
        cluster.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--wait=true")
        started = time.monotonic()
        wait_ready(cluster, namespace, timeout=300)
        costs["ready_after_disk_mounted_seconds"] = round(time.monotonic() - started, 1)
        assert condition(cluster.kube.get("XCachePool", namespace, "af-xcache"), "Degraded")["status"] == "False"
        pods = cluster.kube.list("Pod", namespace)
        caches = [p for p in pods if p["metadata"]["name"].startswith("af-xcache-")]
        workers = [p for p in pods if p["metadata"]["name"].startswith("af-dask-") and "scheduler" not in p["metadata"]["name"]]
        assert [p["spec"]["nodeName"] for p in caches] == [CACHE_HOST], [p["spec"]["nodeName"] for p in caches]
        assert workers and all(p["spec"]["nodeName"] in nodes.nodes for p in pods), \
            {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        cache = caches[0]
        assert all(c["ready"] for c in cache["status"]["containerStatuses"]), cache["status"]
        # xrootd and the Dask worker run the images pushed to the registry, pulled by their references.
        _ran_pushed(next(c for c in cache["status"]["containerStatuses"] if c["name"] == "xrootd"), XCACHE_IMAGE)
        worker_container = workers[0]["spec"]["containers"][0]["name"]
        _ran_pushed(next(c for c in workers[0]["status"]["containerStatuses"] if c["name"] == worker_container),
                    DASK_IMAGE)
        # Every container of the facility's pods (the exporter sidecar and init containers from the operator
        # image included) ran an image pulled from the registry.
        ran = {(p["metadata"]["name"], c["name"]): c["imageID"] for p in pods
               for c in p["status"].get("initContainerStatuses", []) + p["status"].get("containerStatuses", [])}
        assert set(ran.values()) <= {f"{ref.rsplit(':', 1)[0]}@{v['digest']}" for ref, v in PUSHED.items()}, ran
        pulls = _pulls(cluster, namespace)
        costs["pulls"] = costs.get("pulls", []) + pulls
        assert {(p["image"], p["node"]) for p in pulls} >= {(XCACHE_IMAGE, CACHE_HOST),
                                                            (DASK_IMAGE, workers[0]["spec"]["nodeName"])}, pulls
        # xrootd runs as the pool's xrootdUser, which owns the disk directories the prepare step made.
        ids = cluster.kubectl("exec", "-n", namespace, cache["metadata"]["name"], "-c", "xrootd", "--", "id", "-u")
        assert ids.strip() == str(XROOTD_UID), ids
        assert {(p.stat().st_uid, p.stat().st_gid) for p in (DISK, META / "meta", META / "namespace")} == \
            {(XROOTD_UID, XROOTD_UID)}
        # xrootd runs the rendered config, and the kubelet's readiness probe (xrdfs query) passed.
        probes = _probe_counts(cluster, CACHE_HOST, cache["metadata"]["name"])
        assert probes.get(("Readiness", "successful"), 0) >= 1, probes

        worker = workers[0]
        args = worker["spec"]["containers"][0].get("args", [])
        scheduler = next(a for a in args if a.startswith("tcp://"))
        started = time.monotonic()
        reads = _read_on_worker(cluster, worker, scheduler, "/data/real.bin")
        costs["two_reads_through_the_cache_seconds"] = round(time.monotonic() - started, 1)
        digest = hashlib.sha256(payload).hexdigest()
        assert all(r["bytes"] == len(payload) and r["sha256"] == digest for r in reads), reads
        # The endpoint the worker was given is its own switch's cache Service.
        switch = cluster.kube.get("Node", None, worker["spec"]["nodeName"])["metadata"]["labels"]["switchyard.dev/switch"]
        assert all(f"af-xcache-{switch}." in r["endpoint"] for r in reads), reads
        costs["reads"] = reads

        # The exporter beside xrootd accounts for both reads, and the file fetched from the origin once.
        # (XrdPfc counts hits and misses per block; with prefetch, blocks of the first read that
        # arrived before the client asked for them count as hits: the origin bytes tell the miss.)
        text = _exporter_after_served(cluster, cache, 2 * len(payload))
        served = sum(metric(text, f"switchyard_xcache_{kind}_bytes") for kind in SERVED_KINDS)
        assert metric(text, "switchyard_xcache_origin_bytes") == len(payload)
        assert 2 * len(payload) <= served <= 2 * (len(payload) + 10 * 2**20), served  # + a prefetch window (10 x 1 MiB)
        assert metric(text, "switchyard_xcache_hit_bytes") >= len(payload)
        costs["exporter"] = {kind: metric(text, f"switchyard_xcache_{kind}_bytes") for kind in ("hit", "miss", "origin")}
        logs = cluster.kubectl("logs", "-n", namespace, cache["metadata"]["name"], "-c", "xrootd")
        assert "xcache" in logs

        # A real Prometheus on the host scrapes the exporter in the pod, at the pod's address and the
        # port the admin guide's scrape job keeps (Debian's Prometheus is built without Kubernetes service
        # discovery, so the job's pod discovery itself is not exercised here).
        port = next(p["containerPort"] for c in cache["spec"]["containers"] for p in c.get("ports", [])
                    if p.get("name") == "metrics")
        job = {"job_name": "switchyard-caches",
               "static_configs": [{"targets": [f"{cache['status']['podIP']}:{port}"], "labels": {"namespace": namespace}}]}
        with run_prometheus([], workdir=COSTS.parent, scrape_configs=[job]) as prom:
            origin_bytes = f'sum(switchyard_xcache_origin_bytes_total{{namespace="{namespace}"}})'
            prom.wait_for(lambda: prom.value(origin_bytes) == len(payload), timeout=90,
                          what="the exporter's origin bytes in Prometheus")
            up = prom.query('up{job="switchyard-caches"}')
            assert [(r["metric"]["instance"], r["value"][1]) for r in up] == \
                [(f"{cache['status']['podIP']}:{port}", "1")], up

        # The cache pod deleted: the StatefulSet brings it back on its host, with its disk, and the
        # file is served again without a byte from the origin (a new exporter: counters from zero).
        cluster.kubectl("delete", "pod", "-n", namespace, cache["metadata"]["name"], "--wait=true")
        started = time.monotonic()
        cache = wait_for(lambda: next((p for p in cluster.kube.list("Pod", namespace)
                                       if p["metadata"]["name"] == cache["metadata"]["name"]
                                       and p["metadata"]["uid"] != cache["metadata"]["uid"]
                                       and all(c["ready"] for c in p["status"].get("containerStatuses", [{"ready": False}]))),
                                      None), timeout=180, what="the cache pod back and Ready")
        costs["cache_pod_ready_after_delete_seconds"] = round(time.monotonic() - started, 1)
        assert cache["spec"]["nodeName"] == CACHE_HOST
        warm = _read_on_worker(cluster, worker, scheduler, "/data/real.bin")
        assert all(r["bytes"] == len(payload) and r["sha256"] == digest for r in warm), warm
        text = _exporter_after_served(cluster, cache, 2 * len(payload))
        assert metric(text, "switchyard_xcache_origin_bytes") == 0, "warm reads after a restart went to the origin"
        assert metric(text, "switchyard_xcache_hit_bytes") >= 2 * len(payload)
        costs["warm_reads_after_restart"] = warm
    finally:
        COSTS.write_text(json.dumps(costs, indent=1))
        print(json.dumps(costs, indent=1))


# The analyst's side of the gateway step: the dask_gateway client in a pod of its own (a notebook's
# place), which reaches the gateway by its Service's DNS name as the analyst guide's path does.
ANALYST = r"""
import hashlib, json, sys, time
from dask_gateway import BasicAuth, Gateway

gateway = Gateway(sys.argv[1], auth=BasicAuth("alice", "x"))
step = sys.argv[2]
if step == "new":
    cluster = gateway.new_cluster(worker_cores=1, worker_memory=1, shutdown_on_close=False)
    print(json.dumps({"name": cluster.name, "options": sorted(gateway.cluster_options())}))
elif step == "scale":
    gateway.connect(sys.argv[3]).scale(int(sys.argv[4]))
    print(json.dumps({"scaled": int(sys.argv[4])}))
elif step == "read":
    def read(url):
        # The analysis's own read: fsspec by the origin's URL, routed by the worker's preload.
        import fsspec, hashlib, os, time
        from switchyard.routing import route
        started = time.monotonic()
        with fsspec.open(url, "rb") as f:
            data = f.read()
        return {"routed": route(url), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                "seconds": round(time.monotonic() - started, 3), "pod": os.environ["POD_NAME"],
                "switch": os.environ["SWITCHYARD_SWITCH"]}
    cluster = gateway.connect(sys.argv[3])
    with cluster.get_client() as client:
        client.wait_for_workers(1, timeout=120)
        workers = sorted(w.get("name") for w in client.scheduler_info()["workers"].values())
        print(json.dumps({"workers": workers, "read": client.submit(read, sys.argv[4], pure=False).result(timeout=120)}))
elif step == "shutdown":
    gateway.connect(sys.argv[3]).shutdown()
    print(json.dumps({"clusters": [c.name for c in gateway.list_clusters()]}))
"""


def _analyst(cluster: Cluster, address: str, *args: str) -> dict:
    out = cluster.kubectl("exec", "-n", "analyst", "notebook", "--", "python", "-c", ANALYST, address, *args)
    return json.loads(out.strip().splitlines()[-1])


def _gateway_objects(cluster: Cluster, namespace: str, name: str) -> dict[str, list[str]]:
    """Everything gateway cluster `name` made: its objects by label, and its fleet's and scheduler's pods."""
    select = {"gateway.dask.org/cluster": name}
    out = {kind: sorted(o["metadata"]["name"] for o in cluster.kube.list(kind, namespace, select))
           for kind in ("Secret", "WorkerFleet", "Deployment", "Service", "NetworkPolicy", "Pod")}
    out["fleet pods"] = sorted(p["metadata"]["name"] for p in cluster.kube.list("Pod", namespace)
                               if p["metadata"].get("labels", {}).get("switchyard.dev/fleet", "").startswith("dg-"))
    out["fleet deployments"] = sorted(d["metadata"]["name"] for d in cluster.kube.list("Deployment", namespace)
                                      if d["metadata"]["name"].startswith("dg-"))
    return {k: v for k, v in out.items() if v}


def test_gateway_from_the_chart_runs_clusters_on_real_nodes(real):
    """The chart's dask-gateway on a real node (`helm upgrade --set gateway.enabled=true`), driven by the
    dask_gateway client as in the analyst guide's path: a cluster made through the gateway pod, scaled,
    a task on a real worker pod reading by the origin's URL through its switch's cache, and shut down
    leaving nothing. The gateway, its facility and its clusters share the release's namespace, as at a
    site; that facility has a cache pool (host network), so the namespace enforces `privileged` from here."""
    cluster, nodes, _ = real
    costs = json.loads(COSTS.read_text()) if COSTS.exists() else {}
    gateway_costs = costs.setdefault("gateway", {})
    namespace = OPERATOR_NAMESPACE
    # The gateway's facility: the first one's cache pool (its origin, disks, image), no fleets of its own.
    first = cluster.kube.get("AnalysisFacility", "real-facility", "af")
    assert first, "no first facility: test_cache_and_dask_workers_run_on_real_nodes did not get that far"
    spec = {**first["spec"], "fleets": []}
    pool = spec["cachePools"][0]
    # The nodes have 2 CPUs each: the first facility's cache (its host port) and its scheduler and worker go.
    cluster.kubectl("delete", "analysisfacility", "af", "-n", "real-facility", "--wait=true")
    wait_for(lambda: not cluster.kube.list("Pod", "real-facility"), timeout=180, what="the first facility's pods gone")
    # A file the cache has not seen, on the first test's origin (realnodes.Cluster.start_origin's export).
    payload = os.urandom(16 * 2**20)
    served = nodes.state / "origin" / "export" / "data" / "gateway.bin"
    served.write_bytes(payload)
    shutil.chown(served, "xrootd")
    url = f"root://{pool['origin']['host']}:{pool['origin']['port']}//data/gateway.bin"
    # The gateway image, as every other, pushed by `make images ... PUSH=1` and pulled from the registry.
    gateway_image, dask_image = f"{REGISTRY}/switchyard-gateway:0.1.0", DASK_IMAGE
    assert gateway_image in PUSHED, sorted(PUSHED)

    cluster.kubectl("label", "namespace", namespace, "--overwrite", "pod-security.kubernetes.io/enforce=privileged")
    cluster.kube.apply({"apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility",
                        "metadata": {"name": "gw", "namespace": namespace}, "spec": spec})
    started = time.monotonic()
    cache = wait_for(lambda: next((p for p in cluster.kube.list("Pod", namespace)
                                   if p["metadata"]["name"].startswith("gw-xcache-")
                                   and all(c["ready"] for c in p["status"].get("containerStatuses", [{"ready": False}]))),
                                  None), timeout=240, what="the gateway facility's cache pod Ready")
    gateway_costs["cache_ready_seconds"] = round(time.monotonic() - started, 1)
    assert cache["spec"]["nodeName"] == CACHE_HOST, cache["spec"]["nodeName"]

    started = time.monotonic()
    real_toleration = json.dumps([realnodes.TOLERATION])
    helm(cluster, "upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values", "--wait", "--timeout", "5m",
         "--set", "gateway.enabled=true", "--set", "gateway.facility=gw",
         "--set", f"gateway.image.repository={gateway_image.rsplit(':', 1)[0]}", "--set", "gateway.image.tag=0.1.0",
         "--set-json", f"gateway.images=[{json.dumps(dask_image)}]",
         "--set-json", "gateway.fleetTemplates=" + json.dumps(
             {"default": {"readGbps": 0.5, "pool": "xcache", "tolerations": [realnodes.TOLERATION]}}),
         "--set", "gateway.maxWorkerCores=1", "--set", "gateway.maxWorkerMemoryGib=2",
         "--set-json", f"gateway.tolerations={real_toleration}",
         "--set-json", f'gateway.nodeSelector={{"{realnodes.REAL_LABEL}": "true"}}')
    gateway_costs["helm_upgrade_ready_seconds"] = round(time.monotonic() - started, 1)
    (service,) = [s for s in cluster.kube.list("Service", namespace)
                  if s["metadata"]["labels"].get("app.kubernetes.io/component") == "dask-gateway"]
    (pod,) = [p for p in cluster.kube.list("Pod", namespace)
              if p["metadata"]["labels"].get("app.kubernetes.io/component") == "dask-gateway"]
    assert pod["spec"]["nodeName"] in nodes.nodes, pod["spec"]["nodeName"]
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"], status
    _ran_pushed(status, gateway_image)
    costs["pulls"] = costs.get("pulls", []) + [p for p in _pulls(cluster, namespace) if p["image"] == gateway_image]
    probes = _probe_counts(cluster, pod["spec"]["nodeName"], pod["metadata"]["name"])
    assert probes.get(("Readiness", "successful"), 0) >= 1, probes
    address = f"http://{service['metadata']['name']}.{namespace}:{service['spec']['ports'][0]['port']}"

    # The analyst's notebook: a pod in a namespace of its own, on a real node, with the Dask image's client.
    cluster.kubectl("create", "namespace", "analyst")
    cluster.kube.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notebook", "namespace": "analyst"},
        "spec": {"nodeSelector": {realnodes.REAL_LABEL: "true"}, "tolerations": [realnodes.TOLERATION],
                 "automountServiceAccountToken": False,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "notebook", "image": dask_image, "command": ["sleep", "3600"],
                                 "env": [{"name": "HOME", "value": "/tmp"}],
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "capabilities": {"drop": ["ALL"]}}}]},
    })
    wait_for(lambda: (cluster.kube.get("Pod", "analyst", "notebook") or {}).get("status", {}).get("phase") == "Running",
             timeout=120, what="the analyst's notebook pod Running")

    # A cluster through the gateway pod. The scheduler asks for a whole CPU, as a worker does: hold the
    # cache host (where the plan puts the worker, beside the cache) until the scheduler is bound elsewhere.
    cluster.kubectl("taint", "node", CACHE_HOST, "switchyard.dev/hold=true:PreferNoSchedule")
    started = time.monotonic()
    made = _analyst(cluster, address, "new")
    gateway_costs["new_cluster_seconds"] = round(time.monotonic() - started, 1)
    name = made["name"]
    assert {"worker_cores", "worker_memory", "image", "template"} <= set(made["options"]), made
    try:
        select = {"gateway.dask.org/cluster": name}
        (fleet,) = cluster.kube.list("WorkerFleet", namespace, select)
        assert fleet["spec"]["facilityRef"] == {"name": "gw"} and fleet["spec"]["image"] == dask_image, fleet["spec"]
        (scheduler,) = cluster.kube.list("Pod", namespace, {**select, "app.kubernetes.io/component": "scheduler"})
        cluster.kubectl("taint", "node", CACHE_HOST, "switchyard.dev/hold-")
        assert scheduler["spec"]["nodeName"] in nodes.nodes and scheduler["status"]["phase"] == "Running", \
            (scheduler["spec"].get("nodeName"), scheduler["status"].get("phase"))

        # scale(1): the fleet's replicas, a worker pod Ready on a real node of the switch the plan chose.
        started = time.monotonic()
        _analyst(cluster, address, "scale", name, "1")

        def worker_ready():
            pods = [p for p in cluster.kube.list("Pod", namespace, {"switchyard.dev/fleet": fleet["metadata"]["name"]})
                    if not p["metadata"].get("deletionTimestamp")]
            ready = [p for p in pods if any(c["ready"] for c in p["status"].get("containerStatuses", []))]
            return ready if len(pods) == len(ready) == 1 else None
        (worker,) = wait_for(worker_ready, timeout=240, what="the gateway cluster's worker pod Ready")
        gateway_costs["scale_to_worker_ready_seconds"] = round(time.monotonic() - started, 1)
        assert worker["spec"]["nodeName"] in nodes.nodes, worker["spec"]["nodeName"]
        assert cluster.kube.get("WorkerFleet", namespace, fleet["metadata"]["name"])["spec"]["replicas"] == 1

        # A task on it reads the origin's file by its URL: routed to its switch's cache, which fetched it.
        started = time.monotonic()
        result = _analyst(cluster, address, "read", name, url)
        gateway_costs["read_task_seconds"] = round(time.monotonic() - started, 1)
        read = result["read"]
        assert result["workers"] == [worker["metadata"]["name"]] and read["pod"] == worker["metadata"]["name"], result
        assert read["bytes"] == len(payload) and read["sha256"] == hashlib.sha256(payload).hexdigest(), read
        switch = cluster.kube.get("Node", None, worker["spec"]["nodeName"])["metadata"]["labels"]["switchyard.dev/switch"]
        assert read["switch"] == switch and f"gw-xcache-{switch}." in read["routed"], read
        gateway_costs["read"] = read
        text = _exporter_after_served(cluster, cache, len(payload))
        assert metric(text, "switchyard_xcache_origin_bytes") == len(payload)
    finally:
        cluster.kubectl("taint", "node", CACHE_HOST, "switchyard.dev/hold-", check=False)
        COSTS.write_text(json.dumps(costs, indent=1))
        # Shut down (also after a failure: the teardown check wants nothing left).
        started = time.monotonic()
        left = _analyst(cluster, address, "shutdown", name)
    # The gateway lists no cluster, and everything the cluster made is gone.
    assert left == {"clusters": []}, left
    wait_for(lambda: _gateway_objects(cluster, namespace, name) == {}, timeout=180,
             what="every object and pod of the gateway cluster gone after shutdown")
    gateway_costs["shutdown_to_nothing_left_seconds"] = round(time.monotonic() - started, 1)
    COSTS.write_text(json.dumps(costs, indent=1))
    print(json.dumps(gateway_costs, indent=1))


def test_teardown_leaves_the_machine_as_it_was(real):
    cluster, nodes, before = real
    _post_mortem()
    realnodes.down(CLUSTER)
    _remove_disks()
    assert realnodes.leftovers(CLUSTER) == []
    after = _host_state()
    assert after["sysctls"] == before["sysctls"]
    assert after["netns"] == before["netns"]
    assert after["routes"] == before["routes"]
    assert after["iptables"] == before["iptables"]
    assert after["links"] == before["links"]
    assert after["mounts"] == before["mounts"]
