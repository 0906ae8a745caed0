"""A cache of the ring lost and back during a running Dask computation, on real kubelet nodes: no restart.

A kwokctl cluster of e2e/topologies/ring-real.yaml: three real nodes (e2e/realnodes.py), a cache
host on each of two switches, each with a disk of its own at the pool's one data path (a tmpfs in
the node's own mount namespace), and a worker node beside rack-a's cache host. The facility routes
`hashed`: the worker reads each file from the cache the rule names, through the ring the operator
publishes in the fleet's routing ConfigMap, which the kubelet refreshes in the mounted directory and
the routing client re-reads (issue #33, part 4). The Dask scheduler and the worker run from the
image `make images` builds; the analysis reads with fsspec, as a coffea job does, and the worker's
preload routes it.

The computation reads every file over and over while rack-a's cache host is cordoned and its cache
pod deleted: reads of its files fail over to the next cache and finish; the operator re-plans
without the host and republishes the ring, which the worker picks up (the time is reported); then
the host is uncordoned, the cache comes back with its disk, and the ring brings its files back to
it (served from its disk, nothing from the origin). The worker and the scheduler never restart.

Needs root, the packages of hack/install-realnode-deps.sh, `make tools` and `make images`;
`make test` runs it (SWITCHYARD_REAL_NODES=1). Times are reported, not asserted.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import threading
import time

import pytest

if not os.environ.get("SWITCHYARD_REAL_NODES"):
    pytest.skip("real-node e2e: run `make e2e-real` (SWITCHYARD_REAL_NODES=1)", allow_module_level=True)

import localcluster  # noqa: E402
import realnodes  # noqa: E402
from harness import Cluster, start_operator, stop_operator  # noqa: E402
from realchecks import exporter_metrics, host_state, metric  # noqa: E402
from support import wait_for, wait_ready  # noqa: E402

from switchyard.planner.hashing import order  # noqa: E402
from switchyard.routing import parse_ring  # noqa: E402

pytestmark = pytest.mark.e2e

CLUSTER = os.environ.get("SWITCHYARD_RING_CLUSTER", "sy-ring")
TOPOLOGY = localcluster.REPO / "e2e" / "topologies" / "ring-real.yaml"
NODES = realnodes.from_topology(TOPOLOGY)
LOST, KEPT = "rack-a-cache", "rack-b-cache"
WORKER_NODE = "rack-a-worker"
DISK, META = "/srv/switchyard-ring/nvme0", "/srv/switchyard-ring/meta"
NAMESPACE = "ring"
LOGS = localcluster.CACHE / "e2e-logs" / CLUSTER
COSTS = LOGS / "ring-costs.json"
CACHE_HOST_TAINT = "switchyard.dev/cache-host"
MIB = 2**20
# Files of whole MiB (XrdPfc's default block): a cache's origin bytes are then exactly its files' sizes.
FILES = {f"data/f{i:02d}.bin": os.urandom((2 + i % 3) * MIB) for i in range(16)}

COMPUTATION = r"""
import json, sys, time
from distributed import Client, Event

def read(url):
    # The analysis's own read: fsspec, routed by the worker's preload.
    import fsspec, hashlib
    with fsspec.open(url, "rb") as f:
        data = f.read()
    return {"url": url, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

def ring():
    # The ring the worker's router reads now (the mounted file, re-read when it changes).
    from switchyard.routing import hooks
    router = next(iter(hooks.installed().values()))
    return sorted(c.name for c in router.current_ring())

client = Client(sys.argv[1], timeout=60)
urls = sys.argv[2].split(",")
stop = Event("stop", client=client)
rounds = 0
while not stop.is_set():
    started = time.time()
    reads = client.gather(client.map(read, urls, pure=False))
    print(json.dumps({"round": rounds, "started": started, "ended": time.time(),
                      "ring": client.submit(ring, pure=False).result(), "reads": reads}), flush=True)
    rounds += 1
"""

STOP = r"""
import sys
from distributed import Client, Event
Event("stop", client=Client(sys.argv[1], timeout=60)).set()
"""


@pytest.fixture(scope="module")
def ring():
    nodes = realnodes.Cluster(CLUSTER, localcluster.kubeconfig_path(CLUSTER))
    nodes._take_host()   # before the machine's state is noted: another run's real nodes may be up until then
    realnodes.down(CLUSTER)  # whatever a run that died left behind
    localcluster.down(CLUSTER)
    before = host_state(extra_mounts=(DISK, META))
    config = realnodes.kwokctl_config(localcluster.CACHE / "clusters" / CLUSTER / "realnodes-kwokctl.yaml")
    kubeconfig = localcluster.up(CLUSTER, TOPOLOGY, config=config)
    localcluster.install_crds(CLUSTER)
    operator = None
    LOGS.mkdir(parents=True, exist_ok=True)
    try:
        # The operator's image on every node: the caches' prepare step and exporter, the workers' routing copy.
        nodes.up(NODES, images=["pause", "operator"], disks={LOST: [DISK, META], KEPT: [DISK, META]})
        nodes.import_images(["xcache"], [LOST, KEPT])
        nodes.import_images(["dask"], [WORKER_NODE])
        operator = start_operator(kubeconfig, LOGS / "operator-ring.log",
                                  SWITCHYARD_EXPORTER_IMAGE="localhost/switchyard:0.1.0")
        yield Cluster(CLUSTER, kubeconfig), nodes, before
    finally:
        if operator:
            stop_operator(operator)
        objects = localcluster.kubectl(CLUSTER, "get", "analysisfacilities,xcachepools,workerfleets,configmaps,pods,events",
                                       "-n", NAMESPACE, "-o", "yaml", check=False)
        if objects:
            (LOGS / "objects-ring.yaml").write_text(objects)
        if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):  # else: `realnodes.py down`, `localcluster.py down`
            nodes.down()   # and the host lock with it, for the next real-node module
            localcluster.down(CLUSTER)
            _remove_disk_directory()


def _remove_disk_directory() -> None:
    """The directories the nodes' disks were mounted on (down() removes the mount point, not its parent)."""
    for path in (pathlib.Path(DISK), pathlib.Path(META), pathlib.Path(DISK).parent):
        try:
            path.rmdir()
        except OSError:
            pass


def _facility(origin: str) -> dict:
    host, port = origin.split(":")
    return {
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility",
        "metadata": {"name": "af", "namespace": NAMESPACE},
        "spec": {
            "targetGbps": 2, "routing": "hashed",
            "network": {"switches": [{"name": "rack-a", "uplinkGbps": 10}, {"name": "rack-b", "uplinkGbps": 10}]},
            "cachePools": [{
                "name": "xcache", "image": "localhost/switchyard-xcache:0.1.0", "serveGbps": 5,
                "origin": {"host": host, "port": int(port)},
                "storage": {"dataPaths": [DISK], "metaPath": META},
                "xrootdUser": {"uid": 1094, "gid": 1094},
                "pfc": {"ramGiB": 1},
                "resources": {"cpu": "100m", "memory": "2Gi"},
                "tolerations": [realnodes.TOLERATION,
                                {"key": CACHE_HOST_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            }],
            # The scheduler and the one worker fill the worker node's two CPUs.
            "fleets": [{"name": "dask", "image": "localhost/switchyard-dask:0.1.0", "replicas": 1, "cores": 1,
                        "memoryGiB": 1, "readGbps": 1, "dask": {"createScheduler": True},
                        "tolerations": [realnodes.TOLERATION]}],
        },
    }


def _ring_text(cluster: Cluster) -> str:
    config = cluster.kube.get("ConfigMap", NAMESPACE, "af-dask-routing") or {}
    return (config.get("data") or {}).get("ring", "")


def _homes(ring_text: str, urls: list[str]) -> dict[str, str]:
    """Each file's home cache (node name) by the planner's rule, from the published ring."""
    caches = parse_ring(ring_text, "the routing ConfigMap")
    weights = {c.name: c.weight for c in caches}
    return {url: order("/" + url.split("//", 2)[2], weights)[0] for url in urls}


def _pods(cluster: Cluster, component: str) -> dict[str, tuple[str, int]]:
    return {p["metadata"]["name"]: (p["metadata"]["uid"], sum(c.get("restartCount", 0)
                                                             for c in p["status"].get("containerStatuses", [])))
            for p in cluster.kube.list("Pod", NAMESPACE, {"app.kubernetes.io/component": component})}


def _cache_pod(cluster: Cluster, node: str) -> dict | None:
    return next((p for p in cluster.kube.list("Pod", NAMESPACE)
                 if p["spec"].get("nodeName") == node and p["metadata"]["name"].startswith("af-xcache-")
                 and all(c["ready"] for c in p["status"].get("containerStatuses", [{"ready": False}]))), None)


def test_a_lost_cache_and_its_return_restart_no_worker(ring):
    cluster, nodes, _ = ring
    costs: dict = {"nodes": nodes.nodes}
    origin = nodes.start_origin(FILES)
    urls = [f"root://{origin}//{path}" for path in FILES]
    size = {url: len(FILES[path]) for url, path in zip(urls, FILES)}
    digest = {url: hashlib.sha256(FILES[path]).hexdigest() for url, path in zip(urls, FILES)}
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kube.apply(_facility(origin))
    wait_ready(cluster, NAMESPACE, timeout=400)
    text = wait_for(lambda: (t := _ring_text(cluster)) and LOST in t and KEPT in t and t, timeout=60,
                    what="both cache hosts in the published ring")
    homes = _homes(text, urls)
    mine = {host: [u for u in urls if homes[u] == host] for host in (LOST, KEPT)}
    assert mine[LOST] and mine[KEPT], homes   # both caches are some file's home (16 files, two caches)
    workers, schedulers = _pods(cluster, "worker"), _pods(cluster, "scheduler")
    assert len(workers) == 1 and len(schedulers) == 1, (workers, schedulers)
    worker = cluster.kube.list("Pod", NAMESPACE, {"app.kubernetes.io/component": "worker"})[0]
    assert worker["spec"]["nodeName"] == WORKER_NODE
    scheduler = next(a for a in worker["spec"]["containers"][0].get("args", []) if a.startswith("tcp://"))

    rounds: list[dict] = []
    computation = subprocess.Popen(
        [str(localcluster.tools() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "exec", "-n", NAMESPACE,
         worker["metadata"]["name"], "-c", worker["spec"]["containers"][0]["name"], "--",
         "python", "-c", COMPUTATION, scheduler, ",".join(urls)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader = threading.Thread(target=lambda: rounds.extend(json.loads(line) for line in computation.stdout
                                                           if line.startswith("{")), daemon=True)
    reader.start()

    def rounds_since(moment: float, ring_has_lost: bool | None = None) -> list[dict]:
        if computation.poll() is not None:
            raise AssertionError(f"the computation ended (exit {computation.returncode}): "
                                 f"{computation.stderr.read()[-3000:]}")
        return [r for r in list(rounds) if r["started"] >= moment
                and (ring_has_lost is None or (LOST in r["ring"]) == ring_has_lost)]

    try:
        # Both caches serve their own files: each fetched its files from the origin once.
        wait_for(lambda: rounds_since(0), timeout=180, what="a first round of reads")
        for host in (LOST, KEPT):
            pod = wait_for(lambda: _cache_pod(cluster, host), timeout=60, what=f"{host}'s cache pod Ready")
            text = exporter_metrics(cluster, pod, lambda t: metric(t, "switchyard_xcache_origin_bytes")
                                    >= sum(size[u] for u in mine[host]))
            assert metric(text, "switchyard_xcache_origin_bytes") == sum(size[u] for u in mine[host]), host
        lost_pod = _cache_pod(cluster, LOST)

        # The cache host cordoned and its cache pod deleted, mid-computation.
        cluster.kubectl("cordon", LOST)
        lost_at = time.time()
        cluster.kubectl("delete", "pod", "-n", NAMESPACE, lost_pod["metadata"]["name"], "--wait=false")
        wait_for(lambda: LOST not in _ring_text(cluster), timeout=120, what="the ring republished without the lost host")
        costs["ring_published_without_lost_seconds"] = round(time.time() - lost_at, 1)
        first = wait_for(lambda: rounds_since(lost_at, ring_has_lost=False), timeout=240,
                         what="the worker reading the ring without the lost host")[0]
        costs["worker_ring_without_lost_seconds"] = round(first["started"] - lost_at, 1)
        # A whole round on the new ring: every file, the lost host's too, read from the other cache.
        wait_for(lambda: rounds_since(first["ended"]), timeout=120, what="a round on the new ring")
        kept = exporter_metrics(cluster, _cache_pod(cluster, KEPT),
                                lambda t: metric(t, "switchyard_xcache_origin_bytes") >= sum(size.values()))
        # The kept cache fetched the lost host's files from the origin once, and its own not again.
        assert metric(kept, "switchyard_xcache_origin_bytes") == sum(size.values())

        # The host back: its cache returns with its disk and takes its files back.
        cluster.kubectl("uncordon", LOST)
        back_at = time.time()
        wait_for(lambda: LOST in _ring_text(cluster), timeout=180, what="the ring republished with the host back")
        costs["ring_published_with_host_back_seconds"] = round(time.time() - back_at, 1)
        returned = wait_for(lambda: rounds_since(back_at, ring_has_lost=True), timeout=240,
                            what="the worker reading the ring with the host back")[0]
        costs["worker_ring_with_host_back_seconds"] = round(returned["started"] - back_at, 1)
        wait_for(lambda: rounds_since(returned["ended"]), timeout=120, what="a round on the ring with the host back")
        returned_pod = wait_for(lambda: _cache_pod(cluster, LOST), timeout=180, what="the returned cache pod Ready")
        back = exporter_metrics(cluster, returned_pod,
                                lambda t: metric(t, "switchyard_xcache_hit_bytes") >= sum(size[u] for u in mine[LOST]))
        # Its files again, served from its own disk (its exporter is new: counters from zero).
        assert metric(back, "switchyard_xcache_origin_bytes") == 0, "the returned cache read its files from the origin"
    finally:
        cluster.kubectl("exec", "-n", NAMESPACE, worker["metadata"]["name"], "-c",
                        worker["spec"]["containers"][0]["name"], "--", "python", "-c", STOP, scheduler, check=False)
        try:
            computation.wait(timeout=120)
        except subprocess.TimeoutExpired:
            computation.kill()
        reader.join(timeout=10)
        costs["rounds"] = len(rounds)
        COSTS.write_text(json.dumps(costs, indent=1))
        print(json.dumps(costs, indent=1))

    # The computation completed: every read of every round whole and right, the lost host's files too.
    assert computation.returncode == 0, computation.stderr.read()[-3000:]
    assert rounds and all(r["bytes"] == size[r["url"]] and r["sha256"] == digest[r["url"]]
                          for rnd in rounds for r in rnd["reads"])
    # No worker (nor the scheduler) restarted or was replaced.
    assert _pods(cluster, "worker") == workers and _pods(cluster, "scheduler") == schedulers
    assert all(restarts == 0 for _, restarts in [*workers.values(), *schedulers.values()])


def test_teardown_leaves_the_machine_as_it_was(ring):
    cluster, nodes, before = ring
    realnodes.down(CLUSTER)
    _remove_disk_directory()
    assert realnodes.leftovers(CLUSTER) == []
    assert host_state(extra_mounts=(DISK, META)) == before
    assert not pathlib.Path(DISK).parent.exists()
