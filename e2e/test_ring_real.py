"""The hash ring on real kubelet nodes: a cache lost and back during a running Dask computation (no
restart), and a hot file read from more than one cache.

A kwokctl cluster of e2e/topologies/ring-real.yaml: four real nodes (e2e/realnodes.py), a cache
host on each of two switches, each with a disk of its own at the pool's one data path (a tmpfs in
the node's own mount namespace), and two worker nodes beside rack-a's cache host. The facility routes
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

Then the pool's serveGbps is lowered so that two readers make a file hot, and a second worker
joins: both read one file over and over. The operator lists it in status.hotFiles with two
replicas (from the exporters' per-file rates), the workers' routers read the list beside the ring,
and each reads the file from the cache the rule (planner/hashing.py steps 5-7) names for it, the
file chosen so that the two readers' caches differ: both caches' served bytes grow.

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

from switchyard.planner.hashing import hot_order, order, reader_pick  # noqa: E402
from switchyard.routing import parse_ring  # noqa: E402

pytestmark = pytest.mark.e2e

CLUSTER = os.environ.get("SWITCHYARD_RING_CLUSTER", "sy-ring")
TOPOLOGY = localcluster.REPO / "e2e" / "topologies" / "ring-real.yaml"
NODES = realnodes.from_topology(TOPOLOGY)
LOST, KEPT = "rack-a-cache", "rack-b-cache"
WORKER_NODES = ("rack-a-worker", "rack-a-reader")
DISK, META = "/srv/switchyard-ring/nvme0", "/srv/switchyard-ring/meta"
NAMESPACE = "ring"
LOGS = localcluster.CACHE / "e2e-logs" / CLUSTER
COSTS = LOGS / "ring-costs.json"
HOT_COSTS = LOGS / "hot-costs.json"
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
Event(sys.argv[2], client=Client(sys.argv[1], timeout=60)).set()
"""


class Computation:
    """A Dask computation (`script`, given the scheduler's address and `args`) run in a worker pod with
    kubectl exec; the JSON lines it prints are its rounds."""

    def __init__(self, cluster: Cluster, worker: dict, script: str, *args: str) -> None:
        self.cluster, self.pod = cluster, worker["metadata"]["name"]
        self.container = worker["spec"]["containers"][0]["name"]
        self.scheduler = next(a for a in worker["spec"]["containers"][0].get("args", []) if a.startswith("tcp://"))
        self.rounds: list[dict] = []
        self.process = subprocess.Popen(
            [str(localcluster.tools() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "exec", "-n", NAMESPACE,
             self.pod, "-c", self.container, "--", "python", "-c", script, self.scheduler, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=lambda: self.rounds.extend(
            json.loads(line) for line in self.process.stdout if line.startswith("{")), daemon=True)
        self.reader.start()

    def rounds_where(self, ok) -> list[dict]:
        """The rounds so far for which `ok` holds; the computation must still run."""
        if self.process.poll() is not None:
            raise AssertionError(f"the computation ended (exit {self.process.returncode}): "
                                 f"{self.process.stderr.read()[-3000:]}")
        return [r for r in list(self.rounds) if ok(r)]

    def stop(self, event: str, costs: dict, record: pathlib.Path) -> None:
        """Set the Dask Event the script waits on, wait for it to end, and record `costs` with its rounds."""
        self.cluster.kubectl("exec", "-n", NAMESPACE, self.pod, "-c", self.container, "--", "python", "-c",
                             STOP, self.scheduler, event, check=False)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.reader.join(timeout=10)
        costs["rounds"] = len(self.rounds)
        record.write_text(json.dumps(costs, indent=1))
        print(json.dumps(costs, indent=1))

    def check_ended_well(self) -> None:
        assert self.process.returncode == 0, self.process.stderr.read()[-3000:]


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
        nodes.import_images(["dask"], list(WORKER_NODES))
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
    assert worker["spec"]["nodeName"] in WORKER_NODES
    computation = Computation(cluster, worker, COMPUTATION, ",".join(urls))

    def rounds_since(moment: float, ring_has_lost: bool | None = None) -> list[dict]:
        return computation.rounds_where(lambda r: r["started"] >= moment
                                        and (ring_has_lost is None or (LOST in r["ring"]) == ring_has_lost))

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
        computation.stop("stop", costs, COSTS)

    # The computation completed: every read of every round whole and right, the lost host's files too.
    computation.check_ended_well()
    assert computation.rounds and all(r["bytes"] == size[r["url"]] and r["sha256"] == digest[r["url"]]
                                      for rnd in computation.rounds for r in rnd["reads"])
    # No worker (nor the scheduler) restarted or was replaced.
    assert _pods(cluster, "worker") == workers and _pods(cluster, "scheduler") == schedulers
    assert all(restarts == 0 for _, restarts in [*workers.values(), *schedulers.values()])


HOT_COMPUTATION = r"""
import json, sys, time
from distributed import Client, Event

def read(url):
    # The analysis's own read (fsspec, routed by the preload), and which cache the router chose for it.
    import fsspec, hashlib
    from switchyard.routing import hooks
    router = next(iter(hooks.installed().values()))
    via = router.route(url)
    with fsspec.open(url, "rb") as f:
        data = f.read()
    return {"url": url, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "via": via,
            "reader": router.reader, "hot": router.hot_file.current() if router.hot_file else {},
            "ring": {c.name: c.weight for c in router.current_ring()}}

client = Client(sys.argv[1], timeout=60)
client.wait_for_workers(2, timeout=300)
workers = sorted(client.scheduler_info()["workers"])
stop = Event("stop-hot", client=client)
rounds = 0
while not stop.is_set():
    started = time.time()
    # Every worker reads the hot file each round: two readers of one file.
    reads = client.gather([client.submit(read, sys.argv[2], workers=[w], allow_other_workers=False, pure=False)
                           for w in workers])
    print(json.dumps({"round": rounds, "started": started, "ended": time.time(), "reads": reads}), flush=True)
    rounds += 1
    time.sleep(0.5)
"""

HOT_SERVE_GBPS = 0.05   # 6.25 MB/s: two readers of a 4 MiB file every half second make it hot (desired/hotfiles.py)


def _hot_file_choice(readers: list[str], urls: list[str]) -> str:
    """A file the rule (planner/hashing.py step 6, k=2) has the two readers read from different replicas:
    with a ring of two caches, from different caches, whatever the weights. The readers are the worker
    pods' names (their HOSTNAME); among the files one splits them unless the hash is broken."""
    for url in sorted(urls):
        path = "/" + url.split("//", 2)[2]
        if len({reader_pick(reader, path, 2) for reader in readers}) == 2:
            return url
    raise AssertionError(f"no file of {len(urls)} splits the readers {readers}")


def test_a_hot_file_is_read_from_more_than_one_cache(ring):
    """Issue #30's real-node acceptance: a Dask computation whose file is hot reads it from more than one
    cache, as the exporters' counters show, with correct results; no worker restarts for it."""
    cluster, _, _ = ring
    facility = cluster.kube.get("AnalysisFacility", NAMESPACE, "af")
    origin = facility["spec"]["cachePools"][0]["origin"]
    urls = [f"root://{origin['host']}:{origin['port']}//{path}" for path in FILES if len(FILES[path]) == 4 * MIB]
    digest = {url: hashlib.sha256(FILES[url.split("//", 2)[2]]).hexdigest() for url in urls}
    # A small serving cap, so that two readers make a file hot; a second worker, a second reader.
    cluster.kubectl("patch", "analysisfacility", "af", "-n", NAMESPACE, "--type=json", "-p", json.dumps([
        {"op": "replace", "path": "/spec/cachePools/0/serveGbps", "value": HOT_SERVE_GBPS},
        {"op": "replace", "path": "/spec/fleets/0/replicas", "value": 2}]))
    workers = wait_for(lambda: (w := [p for p in cluster.kube.list("Pod", NAMESPACE, {"app.kubernetes.io/component": "worker"})
                                      if all(c["ready"] for c in p["status"].get("containerStatuses", [{"ready": False}]))])
                       and len(w) == 2 and w, timeout=240, what="two Ready workers")
    assert {w["spec"]["nodeName"] for w in workers} <= set(WORKER_NODES)
    readers = sorted(w["metadata"]["name"] for w in workers)
    url = _hot_file_choice(readers, urls)
    path = "/" + url.split("//", 2)[2]
    home = _homes(_ring_text(cluster), [url])[url]
    before = {host: exporter_metrics(cluster, _cache_pod(cluster, host), lambda t: True) for host in (LOST, KEPT)}
    costs: dict = {"hot_file": path, "home": home, "readers": readers}
    computation = Computation(cluster, workers[0], HOT_COMPUTATION, url)
    rounds_where = computation.rounds_where
    started = time.time()
    try:
        wait_for(lambda: rounds_where(lambda r: True), timeout=240, what="a first round of reads")
        pool = wait_for(lambda: (p := cluster.kube.get("XCachePool", NAMESPACE, "af-xcache"))
                        and {"path": path, "replicas": 2} in (p.get("status") or {}).get("hotFiles", []) and p,
                        timeout=240, interval=2, what=f"the pool's status.hotFiles listing {path} with 2 replicas")
        costs["listed_seconds"] = round(time.time() - started, 1)
        # Both workers' routers read the list (the kubelet refreshes the mounted ConfigMap), no restart.
        seen = wait_for(lambda: rounds_where(lambda r: all(x["hot"].get(path) == 2 for x in r["reads"])),
                        timeout=240, what="both workers' routers reading the hot list")[0]
        costs["both_readers_seconds"] = round(seen["started"] - started, 1)
        wait_for(lambda: len(rounds_where(lambda r: r["started"] > seen["ended"])) >= 5, timeout=120,
                 what="five rounds on the hot list")
        spread = rounds_where(lambda r: r["started"] >= seen["started"])
        served_by = set()
        for rnd in spread:
            for r in rnd["reads"]:
                assert r["reader"] in readers, (r["reader"], readers)
                # Each reader from the cache the rule names for it over its ring of the moment (load-fed
                # weights may move the order; the two replicas stay the two caches).
                served_by.add(cache := _address_node(cluster, r["via"]))
                assert cache == hot_order(path, r["ring"], r["reader"], 2)[0], r
        assert served_by == {LOST, KEPT}, served_by   # the two readers from the two caches
        costs["served_by"] = sorted(served_by)
        after = {host: exporter_metrics(
            cluster, _cache_pod(cluster, host),
            lambda t, h=host: metric(t, "switchyard_xcache_served_bytes") - metric(before[h], "switchyard_xcache_served_bytes")
            >= len(spread) * 4 * MIB, what=f"{host}'s served bytes counting its reader's reads")
            for host in (LOST, KEPT)}
        costs["served_bytes"] = {h: metric(after[h], "switchyard_xcache_served_bytes")
                                 - metric(before[h], "switchyard_xcache_served_bytes") for h in after}
        # The extra origin bytes a replica costs: at most one copy, fetched by the second cache (none when it
        # kept the file from the first test, where it served the lost host's files); the home's none.
        origin = {h: metric(after[h], "switchyard_xcache_origin_bytes") - metric(before[h], "switchyard_xcache_origin_bytes")
                  for h in after}
        costs["origin_bytes"] = origin
        assert origin[home] == 0 and origin[KEPT if home == LOST else LOST] in (0, 4 * MIB), origin
        events = cluster.kube.list("Event", NAMESPACE)
        assert any(e.get("reason") == "HotFilesChanged" and e["involvedObject"]["name"] == "af-xcache" for e in events)
        assert pool["status"]["hotFiles"]
    finally:
        computation.stop("stop-hot", costs, HOT_COSTS)

    computation.check_ended_well()
    assert computation.rounds and all(r["bytes"] == 4 * MIB and r["sha256"] == digest[url]
                                      for rnd in computation.rounds for r in rnd["reads"])
    assert _pods(cluster, "worker") == {w["metadata"]["name"]: (w["metadata"]["uid"], 0) for w in workers}


def _address_node(cluster: Cluster, cache_url: str) -> str:
    """The node whose InternalIP a routed URL names (root://<ip>:<port>//path)."""
    ip = cache_url.split("//")[1].rsplit(":", 1)[0]
    for node in cluster.kube.list("Node", None):
        if any(a["address"] == ip for a in node["status"].get("addresses", [])):
            return node["metadata"]["name"]
    raise AssertionError(f"no node has the address {ip} of {cache_url}")


def test_teardown_leaves_the_machine_as_it_was(ring):
    cluster, nodes, before = ring
    realnodes.down(CLUSTER)
    _remove_disk_directory()
    assert realnodes.leftovers(CLUSTER) == []
    assert host_state(extra_mounts=(DISK, META)) == before
    assert not pathlib.Path(DISK).parent.exists()
