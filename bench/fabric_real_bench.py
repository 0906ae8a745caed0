"""The fabric bench on real kubelet nodes: the operator's own pods, real bytes, the plan's fair share.

bench/fabric_bench.py emulates the fabric with processes in namespaces. Here the
fabric's nodes ARE kubelet+containerd nodes (e2e/realnodes.py) and its caches and
readers ARE the pods the operator creates:

1. a kwokctl cluster `--cluster` of e2e/topologies/fabric-real.yaml (real nodes only),
   its network shaped by e2e/fabric_real.py at the topology's Gbps x `--scale`
   Mbit/s (NICs and uplinks both ways, the WAN to an origin in a namespace of its own);
2. a real XRootD origin behind the WAN; the operator (`switchyard run`, on the host,
   against the cluster) given an AnalysisFacility with one cache pool (one NVMe host
   per switch) and one Dask WorkerFleet, routing `hashed`; it plans, and creates the
   XCache StatefulSets, the Dask scheduler and the workers on the real nodes;
3. the caches warmed by one read of every file through its home cache; then a task
   pinned to each Dask worker runs `--streams` readers, each reading the files one
   after another in an order of its own (XRootD Python client) through the cache the
   worker's routing environment names (switchyard.routing.Router.from_env: the
   ring's home host of the file; node names are resolved by the bench, the cluster's
   DNS does not serve them);
4. placements alternate, `--repeats` runs each, on the one cluster (only the pods are re-created):
   (a) the operator's plan (its workloads; the operator is stopped once it has created them, so no
   run has it), (b) the default scheduler's (bench/default_scheduler_pods.py: the same rendered pods
   without switchyard's placement, hashed over all caches with equal weights);
5. per run, per-uplink (each way), per-node and WAN bytes from the interface counters over
   `--windows` windows of `--window-seconds` after `--warmup` seconds, the CPU busy
   of each window (more than 75% of all cores: invalid), compared with the max-min
   fair share (planner/fairshare.py fair_share, the files' actual split per worker)
   and with the closed queueing network of the sequential readers (bench/sequential_readers.py);
   the plan's LP prediction from the facility's status. Report: bench/fabric_real_report.py.

Teardown (also on Ctrl-C, SIGTERM or a failure): the operator, realnodes.down (every
`syr-<cluster>-*` namespace, process, mount, cgroup: the shaping goes with the
namespaces), the cluster, the cache disk directory.

    make bench-fabric-real                  # or: .venv/bin/python bench/fabric_real_bench.py
    .venv/bin/python bench/fabric_real_bench.py down      # clean up after a killed run
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import random
import shutil
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "e2e"))

import localcluster  # noqa: E402
import realnodes  # noqa: E402
import default_scheduler_pods  # noqa: E402
import sequential_readers  # noqa: E402
from fabric import allow_congestion, cpu_times, host_congestion, restore_congestion  # noqa: E402
from fabric_real import WAN_ORIGIN_IP, Rates, RealFabric  # noqa: E402
from fabric_real_report import report  # noqa: E402
from harness import Cluster, start_operator, stop_operator  # noqa: E402
from support import wait_for, wait_ready  # noqa: E402
from switchyard.planner.fairshare import fair_share  # noqa: E402
from switchyard.routing import Router  # noqa: E402
from switchyard.topology import load_topology  # noqa: E402

TOPOLOGY = ROOT / "e2e" / "topologies" / "fabric-real.yaml"
DISK = pathlib.Path("/srv/switchyard-fabreal")
NAMESPACE = "fabreal"
ORIGIN_PORT = 1095
CPU_LIMIT = 0.75
# Link loads as the shapers charge them (a header per segment), what the topology's Gbps mean; the
# interface counters read a full link a few per cent low (one header per GSO burst), also reported.
COUNTERS = "wire_mbit"
# NVMe nodes hold the caches only: neither a worker nor the Dask scheduler takes the CPU a cache needs.
CACHE_TAINT = "switchyard.dev/cache-host=true:NoSchedule"
CACHE_TOLERATION = {"key": "switchyard.dev/cache-host", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
# The Dask scheduler the bench runs (a pod beside a cache: a 2-CPU worker node then has room for the
# surge pod of a rolling update, which the fleet's own 1-CPU scheduler would take).
SCHEDULER = f"tcp://dask-scheduler.{NAMESPACE}.svc.cluster.local:8786"
XCACHE_IMAGE, DASK_IMAGE = "localhost/switchyard-xcache:0.1.0", "localhost/switchyard-dask:0.1.0"

# Runs in a worker pod: a Dask client that pins one reading task to each worker.
CLIENT = r"""
import json, sys
from distributed import Client

def read_files(config, stream_count, seconds, seed):
    # On the worker: `stream_count` readers, each the files in an order of its own, through the
    # cache the worker's routing environment names for each file (its ring home).
    import os, random, socket, threading, time
    from urllib.parse import urlsplit
    from switchyard.routing import Router
    router = Router.from_env()
    ring = router.current_ring() if hasattr(router, "current_ring") else router.ring
    node_of = {c.address.rsplit(":", 1)[0].strip("[]"): c.name for c in ring}
    pod = socket.gethostname()
    def url_of(path):
        url = urlsplit(router.route(config["origin"] + "/" + path))
        name = node_of.get(url.hostname, url.hostname)  # a ring entry's address -> its node name
        return name, f"root://{config['hosts'][name]}:{url.port}//" + url.path.lstrip("/")
    def read(url):
        # The XRootD client's Python bindings (in the worker image), in 8 MiB reads: no process per file.
        from XRootD import client
        f = client.File()
        status, _ = f.open(url)
        if not status.ok:
            return False
        offset = 0
        while True:
            status, data = f.read(offset, 8 << 20)
            if not status.ok:
                return False
            if not data:
                break
            offset += len(data)
        f.close()
        return offset > 0
    reads, stop = [], time.time() + seconds
    if config["warm"]:   # every file once, one after another
        for path in config["files"]:
            host, url = url_of(path)
            t0 = time.time()
            ok = read(url)
            reads.append([0, path, host, round(t0, 3), round(time.time(), 3), ok])
        return {"pod": pod, "endpoint_env": os.environ.get("SWITCHYARD_ROUTING"), "reads": reads}
    def stream(i):
        rng = random.Random(f"{seed}:{pod}:{i}")
        while time.time() < stop:
            order = list(config["files"])
            rng.shuffle(order)
            for path in order:
                if time.time() >= stop:
                    break
                t0, host = time.time(), None
                try:
                    host, url = url_of(path)
                    ok = read(url)
                except Exception as exc:   # a reader that raised would otherwise vanish without a trace
                    errors.append([i, path, host, round(t0, 3), round(time.time(), 3), repr(exc)[:300]])
                    ok = False
                reads.append([i, path, host, round(t0, 3), round(time.time(), 3), ok])
    errors = []
    # One route before the threads: the worker image's switchyard may predate 753aac7, which made loading
    # the rule safe for threads routing at once (without it a worker lost 1-7 of its 8 readers).
    url_of(config["files"][0])
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(stream_count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"pod": pod, "endpoint_env": os.environ.get("SWITCHYARD_ROUTING"), "reads": reads, "errors": errors}

config = json.loads(sys.argv[2])
client = Client(sys.argv[1], timeout=60)
# The workers of this placement's pods only (a worker's name is its pod's): a previous placement's may
# linger a moment in the scheduler.
import time
deadline = time.time() + 120
while True:
    known = client.run_on_scheduler(lambda dask_scheduler: {a: w.name for a, w in dask_scheduler.workers.items()})
    workers = sorted(a for a, name in known.items() if name in config["worker_pods"])
    if len(workers) == len(config["worker_pods"]):
        break
    if time.time() > deadline:
        raise SystemExit(f"workers {known}, expected {config['worker_pods']}")
    time.sleep(1)
if config["warm"]:   # every file once, through its home cache, from one worker
    futures = [client.submit(read_files, config, 1, 0, 0, workers=workers[:1], pure=False)]
else:
    futures = [client.submit(read_files, config, config["streams"], config["seconds"], config["seed"],
                             workers=[w], pure=False) for w in workers]
print(json.dumps(client.gather(futures)))
"""


def log(message: str) -> None:
    print(f"[fabric-real] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def facility(origin: str, args) -> dict:
    host, port = origin.split(":")
    return {
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility",
        "metadata": {"name": "af", "namespace": NAMESPACE},
        "spec": {
            "targetGbps": 40, "routing": "hashed",
            "network": {"switches": [{"name": "rack-a", "uplinkGbps": 10}, {"name": "rack-b", "uplinkGbps": 10}]},
            "cachePools": [{
                "name": "xcache", "image": XCACHE_IMAGE, "serveGbps": 25,
                "origin": {"host": host, "port": int(port)},
                # Plain directories on the machine's root disk, on purpose here
                # (the bench measures the fabric, not disks), so the mount check is off.
                "storage": {"dataPaths": [str(DISK / "nvme0")], "metaPath": str(DISK / "meta"), "allowRootDisk": True},
                "xrootdUser": {"uid": 1094, "gid": 1094},  # switchyard's XCache image's xrootd user
                "pfc": {"ramGiB": 1},
                # Most of a real node's 2 CPUs: a worker (1 core) does not fit beside a cache.
                "resources": {"cpu": "1500m", "memory": "2Gi"},
                "tolerations": [realnodes.TOLERATION, CACHE_TOLERATION],
            }],
            "fleets": [{"name": "dask", "image": DASK_IMAGE, "replicas": args.workers, "cores": 1,
                        "memoryGiB": 1, "readGbps": 25, "dask": {"schedulerAddress": SCHEDULER},
                        "tolerations": [realnodes.TOLERATION]}],
        },
    }


def scheduler(cache_node: str) -> list[dict]:
    """A Dask scheduler pod (and its Service) on a cache node, from the worker image."""
    labels = {"app": "dask-scheduler"}
    return [{
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dask-scheduler", "namespace": NAMESPACE, "labels": labels},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": cache_node},
                 "tolerations": [realnodes.TOLERATION, CACHE_TOLERATION],
                 "containers": [{"name": "scheduler", "image": DASK_IMAGE, "imagePullPolicy": "Never",
                                 "command": ["dask", "scheduler", "--port", "8786", "--no-dashboard"],
                                 "ports": [{"containerPort": 8786}],
                                 "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]},
    }, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "dask-scheduler", "namespace": NAMESPACE},
        "spec": {"selector": labels, "ports": [{"port": 8786, "targetPort": 8786}]},
    }]


def ready(pod: dict) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or [{"ready": False}]
    return not pod["metadata"].get("deletionTimestamp") and all(c["ready"] for c in statuses)


def pods(cluster: Cluster, replicas: int, prefix: str = "af") -> tuple[list[dict], list[dict]]:
    """The cache pods and worker pods (names `prefix`-xcache-*, `prefix`-dask-*) once every one is Ready and
    no rollout is left (no other pod)."""
    def settled():
        everything = cluster.kube.list("Pod", NAMESPACE)
        caches = [p for p in everything if p["metadata"]["name"].startswith(f"{prefix}-xcache-")]
        workers = [p for p in everything if p["metadata"]["name"].startswith(f"{prefix}-dask-")]
        if len(workers) == replicas and caches and all(ready(p) for p in caches + workers):
            return caches, workers
        return None
    return wait_for(settled, timeout=300, interval=2, what=f"{replicas} Ready workers and Ready caches, no rollout")


def routing_ring(cluster: Cluster) -> str:
    """The ring the operator published for the fleet (its routing ConfigMap), which its workers read from a file."""
    return ((cluster.kube.get("ConfigMap", NAMESPACE, "af-dask-routing") or {}).get("data") or {}).get("ring", "")


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", []) if "value" in e}


def run_client(cluster: Cluster, worker: dict, scheduler: str, config: dict) -> subprocess.Popen:
    argv = [str(localcluster.tools() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "exec", "-n", NAMESPACE,
            worker["metadata"]["name"], "-c", worker["spec"]["containers"][0]["name"], "--",
            "python", "-c", CLIENT, scheduler, json.dumps(config)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float) -> list[dict]:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"the reading client failed ({proc.returncode}): {err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def window(fabric: RealFabric, seconds: float) -> dict:
    """Mbit/s by the interface counters ("mbit") and by what the shapers sent ("wire_mbit"), the uplink
    shapers' drops, the CPU."""
    d0, w0, c0, b0, t0 = fabric.qdisc_drops(), fabric.wire_counters(), fabric.counters(), cpu_times(), time.monotonic()
    time.sleep(seconds)
    c1, b1, t1, w1, d1 = fabric.counters(), cpu_times(), time.monotonic(), fabric.wire_counters(), fabric.qdisc_drops()
    wall = t1 - t0

    def rates(a, b):
        return {k: ((b[k][0] - a[k][0]) * 8 / wall / 1e6, (b[k][1] - a[k][1]) * 8 / wall / 1e6) for k in a}
    busy, total, softirq = (b1[i] - b0[i] for i in range(3))
    return {"start": round(time.time() - wall, 2), "seconds": round(wall, 2), "mbit": rates(c0, c1),
            "wire_mbit": rates(w0, w1), "uplink_drops": {k: d1[k] - d0[k] for k in d0},
            "cpu_busy": round(busy / total, 3), "softirq_cores": round(softirq / total * os.cpu_count(), 3),
            "load1": round(os.getloadavg()[0], 2)}


def prediction(topology, nodes: list[realnodes.RealNode], workers: list[dict], files: list[str], read_gbps: float,
               origin_url: str, ring: str) -> tuple[object, dict, list]:
    """The fair share with each worker's actual split of the files over the ring's hosts (and its streams).

    `ring`: the fleet's routing ConfigMap's, for the workers told its file rather than the ring."""
    switch_of = {n.name: n.switch for n in nodes}
    nic = {n.name: n.nic_gbps for n in nodes}
    streams, splits = [], {}
    for w in workers:
        env = env_of(w)
        if env.pop("SWITCHYARD_CACHE_RING_FILE", None) and "SWITCHYARD_CACHE_RING" not in env:
            env["SWITCHYARD_CACHE_RING"] = ",".join(e for e in ring.splitlines() if e and not e.startswith("#"))
        router = Router.from_env(env)
        node_of = {c.address.rsplit(":", 1)[0].strip("[]"): c.name for c in router.current_ring()}  # address -> node
        homes = [node_of.get(h, h) for h in (urlsplit(router.route(origin_url + "/" + f)).hostname for f in files)]
        shares = {h: homes.count(h) / len(homes) for h in sorted(set(homes))}
        splits[w["spec"]["nodeName"]] = shares
        streams.append((w["spec"]["nodeName"], read_gbps, shares))
    fair = fair_share(switch_of, {s.name: s.uplink_gbps for s in topology.switches},
                      {n: (gbps, gbps) for n, gbps in nic.items()}, streams)
    return fair, splits, streams


def summarise(windows: list[dict], scale: float, worker_nodes: list[str], switches: list[str],
              counters: str = "mbit") -> dict:
    """`counters`: "wire_mbit" (what the shapers sent) or "mbit" (the interface counters)."""
    def mean(key, side):
        return sum(w[counters][key][side] for w in windows) / len(windows) / scale
    delivered = [sum(w[counters][f"host:{n}"][1] for n in worker_nodes) / scale for w in windows]
    return {
        "delivered_gbps": [round(d, 3) for d in delivered],
        "delivered_mean_gbps": round(sum(delivered) / len(delivered), 3),
        "spread": round((max(delivered) - min(delivered)) / (sum(delivered) / len(delivered)), 4),
        "uplinks": {s: {"out": round(mean(f"uplink:{s}", 0), 3), "in": round(mean(f"uplink:{s}", 1), 3)}
                    for s in switches},
        "hosts": {k.split(":", 1)[1]: {"out": round(mean(k, 0), 3), "in": round(mean(k, 1), 3)}
                  for k in windows[0]["mbit"] if k.startswith("host:")},
        "wan_out_gbps": round(mean("wan", 0), 3), "counters": counters,
        "uplink_drops": {k: sum(w.get("uplink_drops", {}).get(k, 0) for w in windows) for k in windows[0].get("uplink_drops", {})},
        "cpu_busy_max": max(w["cpu_busy"] for w in windows), "load_max": max(w["load1"] for w in windows),
        "softirq_cores_max": max(w["softirq_cores"] for w in windows),
        "valid": all(w["cpu_busy"] <= CPU_LIMIT for w in windows),
    }


PREFIX = {"a": "af", "b": default_scheduler_pods.PREFIX}


def switch_placement(cluster: Cluster, which: str, own: dict[str, list[dict]], baseline: list[dict]) -> None:
    """Only the pods change: (b) scales the operator's workloads to 0 and applies the baseline's; (a) deletes
    the baseline's and scales the operator's back to their planned replicas."""
    other = PREFIX["b" if which == "a" else "a"]
    if which == "b":
        for kind, objs in own.items():
            for o in objs:
                cluster.kubectl("scale", "-n", NAMESPACE, f"{kind.lower()}/{o['metadata']['name']}", "--replicas=0")
    else:
        for o in baseline:
            cluster.kube.delete(o["kind"], NAMESPACE, o["metadata"]["name"])
    wait_for(lambda: not [p for p in cluster.kube.list("Pod", NAMESPACE)
                          if p["metadata"]["name"].startswith((f"{other}-xcache-", f"{other}-dask-"))],
             timeout=240, interval=2, what=f"no {other}-* pod left")
    if which == "b":
        for o in baseline:
            cluster.kube.apply({**o, "metadata": {**o["metadata"], "namespace": NAMESPACE}})
    else:
        for kind, objs in own.items():
            for o in objs:
                cluster.kubectl("scale", "-n", NAMESPACE, f"{kind.lower()}/{o['metadata']['name']}",
                                f"--replicas={o['spec']['replicas']}")


def measure(cluster: Cluster, fabric: RealFabric, real, topology, nodes, caches: list[dict], workers: list[dict],
            files: list[str], origin_url: str, base: dict, args) -> dict:
    """One placement's run: warm every file through its home cache, then the readers over the windows."""
    base = {**base, "worker_pods": [w["metadata"]["name"] for w in workers]}
    placement = {"caches": {p["metadata"]["name"]: p["spec"]["nodeName"] for p in caches},
                 "workers": {p["metadata"]["name"]: p["spec"]["nodeName"] for p in workers},
                 "scheduler": SCHEDULER}
    log(f"placed: {placement}")
    run: dict = {"placement": placement}
    t0 = time.monotonic()
    warm = finish(run_client(cluster, workers[0], SCHEDULER, {**base, "warm": True, "seconds": 0}),
                  timeout=len(files) * (args.file_mib * 8 / (topology.wan_gbps * args.scale) + 2) + 120)
    run["warm"] = {"seconds": round(time.monotonic() - t0, 1), "reads": len(warm[0]["reads"]),
                   "failed": sum(1 for r in warm[0]["reads"] if not r[5])}
    log(f"warm: {run['warm']}")
    fair, splits, streams = prediction(topology, nodes, workers, files, 25.0, origin_url.rstrip("/"),
                                       routing_ring(cluster))
    run["split"] = splits
    run["fair_share"] = {"delivered_gbps": fair.delivered_gbps, "uplinks": fair.uplinks,
                         "served": fair.served, "saturated": list(fair.saturated),
                         "full_hosts_behind": {link: list(hosts) for link, hosts in fair.full_hosts_behind.items()}}
    switch_of = {n.name: n.switch for n in nodes}
    uplink = {s.name: s.uplink_gbps for s in topology.switches}
    nic = {n.name: n.nic_gbps for n in nodes}
    run["closed"] = {str(k): sequential_readers.prediction(switch_of, uplink, nic, streams, k)
                     for k in sorted({4, 8, args.streams})}
    seconds = args.warmup + args.windows * args.window_seconds + 5
    counters = "mbit" if args.no_shaping else COUNTERS
    c0 = fabric.counters()
    proc = run_client(cluster, workers[0], SCHEDULER, {**base, "warm": False, "seconds": seconds})
    time.sleep(args.warmup)
    windows = []
    for i in range(args.windows):
        windows.append(window(fabric, args.window_seconds))
        s = summarise(windows[-1:], args.scale, list(placement["workers"].values()), list(real.switches), counters)
        log(f"window {i + 1}: delivered {s['delivered_mean_gbps']:.2f} Gbps (model), uplinks {s['uplinks']}, "
            f"CPU busy {s['cpu_busy_max']:.0%}, load {s['load_max']:.2f}")
    reads = finish(proc, seconds + 180)
    c1 = fabric.counters()
    run["windows"] = windows
    run["summary"] = summarise(windows, args.scale, list(placement["workers"].values()), list(real.switches), counters)
    run["summary_interface"] = summarise(windows, args.scale, list(placement["workers"].values()), list(real.switches))
    run["whole_run_bytes"] = {k: [c1[k][0] - c0[k][0], c1[k][1] - c0[k][1]] for k in c0}
    run["reads"] = [{"pod": r["pod"], "routing": r["endpoint_env"], "count": len(r["reads"]),
                     "failed": sum(1 for x in r["reads"] if not x[5]), "errors": r.get("errors", []),
                     "by_host": {h: sum(1 for x in r["reads"] if x[2] == h) for h in sorted({x[2] for x in r["reads"]}, key=str)}}
                    for r in reads]
    run["exporter"] = _exporters(cluster, caches)
    run["raw_reads"] = {r["pod"]: r["reads"] for r in reads}   # [reader, file, host, t0, t1, ok]
    start, end = windows[0]["start"], windows[-1]["start"] + windows[-1]["seconds"]
    node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in workers}
    run["occupancy"] = {f"{node_of.get(r['pod'], r['pod'])}<-{h}": sequential_readers.occupancy(r["reads"], h, start, end)
                        for r in reads for h in sorted({x[2] for x in r["reads"] if x[2]})}
    return run


def teardown(cluster_name: str, operator: subprocess.Popen | None = None) -> list[str]:
    if operator is not None:
        stop_operator(operator)
    removed = realnodes.down(cluster_name)
    localcluster.down(cluster_name)
    shutil.rmtree(DISK, ignore_errors=True)
    rest = realnodes.leftovers(cluster_name)
    if rest:
        log("LEFT BEHIND: " + "; ".join(rest))
    return removed


def bench(args) -> dict:
    topology = load_topology(yaml.safe_load(TOPOLOGY.read_text()), str(TOPOLOGY))
    nodes = realnodes.from_topology(TOPOLOGY)
    scheduler_node = next(n.name for n in nodes if n.nvme_disks)
    started = time.time()
    meta = {"started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "load_start": os.getloadavg()[0],
            "scale_mbit_per_gbps": args.scale, "cpu_limit": CPU_LIMIT, "machine": f"{os.cpu_count()} cores, {platform.system()} {platform.release()}",
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                     cwd=ROOT).stdout.strip()}
    config = realnodes.kwokctl_config(localcluster.CACHE / "clusters" / args.cluster / "realnodes-kwokctl.yaml")
    kubeconfig = localcluster.up(args.cluster, TOPOLOGY, config=config)
    localcluster.install_crds(args.cluster)
    cluster = Cluster(args.cluster, kubeconfig)
    # The simulated node localcluster needs stays out of the facility (and the Dask scheduler off it).
    cluster.kubectl("taint", "nodes", "-l", "type=kwok", "--overwrite", "switchyard.dev/simulated=true:NoSchedule")
    real = realnodes.Cluster(args.cluster, kubeconfig)
    t0 = time.monotonic()
    if args.reuse and (real.state / "nodes.json").exists():   # the nodes of a --keep run
        real.nodes = json.loads((real.state / "nodes.json").read_text())
        real.switches = {info["switch"]: int(info["address"].split(".")[2]) for info in real.nodes.values()}
    else:
        real.up(nodes, images=["pause"])
    if not args.reuse or args.reimport:
        # The exporter sidecar and init containers need the operator image everywhere; caches go on NVMe
        # nodes only, workers elsewhere, and the bench's Dask scheduler on the first NVMe node.
        real.import_images(["operator"])
        real.import_images(["xcache"], [n.name for n in nodes if n.nvme_disks])
        real.import_images(["dask"], [n.name for n in nodes if not n.nvme_disks] + [scheduler_node])
    meta["real_nodes_up_seconds"] = round(time.monotonic() - t0, 1)
    for node in nodes:
        if node.nvme_disks:
            cluster.kubectl("taint", "node", node.name, "--overwrite", CACHE_TAINT)
    fabric = RealFabric(real)
    fabric.wan_up()
    rates = Rates(uplink={s.name: s.uplink_gbps * args.scale for s in topology.switches},
                  nic={n.name: n.nic_gbps * args.scale for n in nodes}, wan=topology.wan_gbps * args.scale)
    fabric.switch_local_routes()
    if not args.no_shaping:
        fabric.shape(rates)
    if args.congestion:   # the nodes' own namespaces: what the host-network caches send with
        allow_congestion(args.congestion)
        for info in real.nodes.values():
            realnodes._netns_exec(info["netns"], "sysctl", "-qw", f"net.ipv4.tcp_congestion_control={args.congestion}")
    meta["congestion"] = args.congestion or host_congestion()
    rng = random.Random(args.seed)
    files = [f"data/{args.file_mib}m/f{i:03d}.bin" for i in range(args.files)]
    if args.reuse:
        # The origin a --keep run left (found by its state path, stopped by its pid).
        realnodes._kill([pid for pid, cmd in realnodes._processes(str(real.state / "origin")) if "xrootd" in cmd])
    # Its readiness check (xrdfs) must not wait out the client's 120 s connection window on a refused connect.
    os.environ.update(XRD_CONNECTIONWINDOW="2", XRD_CONNECTIONRETRY="1")
    origin = real.start_origin({f: rng.randbytes(args.file_mib * 2**20) for f in files}, port=ORIGIN_PORT,
                               netns=fabric.wan_ns, ip=WAN_ORIGIN_IP)
    for key in ("XRD_CONNECTIONWINDOW", "XRD_CONNECTIONRETRY"):
        os.environ.pop(key)
    origin_url = f"root://{origin}/"
    # Sidecars and init containers from the operator image the nodes have (not the registry's name).
    operator = start_operator(kubeconfig, real.logs / "operator.log",
                              SWITCHYARD_EXPORTER_IMAGE="localhost/switchyard:0.1.0")
    if args.reuse:   # the operator removes its finalizers
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=180s")
        shutil.rmtree(DISK, ignore_errors=True)   # cold caches
    result = {"meta": meta, "args": vars(args), "rates_mbit": {"uplink": rates.uplink, "nic": rates.nic, "wan": rates.wan}}
    try:
        cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        for obj in scheduler(scheduler_node):
            cluster.kube.apply(obj)
        cluster.kube.apply(facility(origin, args))
        af = wait_ready(cluster, NAMESPACE, timeout=args.timeout)
        result["status"] = af.get("status", {})
        # The operator has planned and created its pods: from here the bench alternates the placements by
        # hand, so it stops (it would restore its own workloads' replicas under (b)). Every run, (a) or (b),
        # is measured with the operator stopped.
        pods(cluster, args.workers)
        stop_operator(operator)
        own = {kind: [o for o in cluster.kube.list(kind, NAMESPACE) if o["metadata"]["name"].startswith(prefix)]
               for kind, prefix in (("StatefulSet", "af-xcache-"), ("Deployment", "af-dask-"))}
        baseline = default_scheduler_pods.workloads(own["StatefulSet"], own["Deployment"],
                                                    yaml.safe_load(TOPOLOGY.read_text())["nvmeLabel"],
                                                    routing_ring(cluster))
        result["baseline_workloads"] = baseline
        result["runs"] = []
        hosts = {n: info["address"] for n, info in real.nodes.items()}
        base = {"files": files, "hosts": hosts, "origin": origin_url.rstrip("/"), "streams": args.streams,
                "seed": args.seed}
        for i, which in enumerate(["a", "b"] * args.repeats):
            if i:
                switch_placement(cluster, which, own, baseline)
            caches, workers = pods(cluster, args.workers, PREFIX[which])
            run = measure(cluster, fabric, real, topology, nodes, caches, workers, files, origin_url, base, args)
            run = {"placement_kind": which, "repeat": i // 2 + 1, **run}
            result["runs"].append(run)
            log(f"run {i + 1} ({which}): delivered {run['summary']['delivered_mean_gbps']:.2f}, fair share "
                f"{run['fair_share']['delivered_gbps']:.2f}")
            pathlib.Path(args.out).with_suffix(".partial.json").write_text(json.dumps(result, indent=1, default=str))
        meta["load_end"] = os.getloadavg()[0]
        meta["seconds"] = round(time.time() - started, 1)
        return result
    finally:
        stop_operator(operator)
        (real.logs.parent / "objects.yaml").write_text(
            localcluster.kubectl(args.cluster, "get", "analysisfacilities,xcachepools,workerfleets,pods", "-A", "-o",
                                 "yaml", check=False) or "")


def _exporters(cluster: Cluster, caches: list[dict]) -> dict:
    out = {}
    for cache in caches:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{cache['metadata']['name']}:9933/proxy/metrics"
        text = cluster.kubectl("get", "--raw", path, check=False) or ""
        out[cache["spec"]["nodeName"]] = {
            kind: sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith(f"switchyard_xcache_{kind}_bytes") and not line.startswith("#"))
            for kind in ("hit", "miss", "origin")}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=("run", "down", "report"))
    parser.add_argument("--cluster", default="sy-fabreal")
    parser.add_argument("--scale", type=float, default=3.0, help="Mbit/s per model Gbps")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--streams", type=int, default=8, help="readers per Dask worker")
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--file-mib", type=int, default=4)
    # All readers start at once and leave the fast (local) files first: until a few files have passed per
    # reader, they crowd the slow (remote) paths and leave the local ones idle (a trial at 8 s measured 0.42 of
    # the fair share with the local paths busy 2% of the time). The windows begin after that start-up.
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window-seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3, help="runs of (a) and of (b), alternating")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=420.0)
    parser.add_argument("--no-shaping", action="store_true")
    parser.add_argument("--congestion", default="",
                        help="TCP congestion control in the nodes' namespaces (what the caches send with); default: the host's")
    parser.add_argument("--reuse", action="store_true", help="reuse the cluster and nodes a --keep run left")
    parser.add_argument("--reimport", action="store_true", help="with --reuse: import the images again")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up (then: `down`)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fabric-real.md"))
    args = parser.parse_args(argv)
    if args.command == "down":
        for line in teardown(args.cluster):
            log(line)
        return 1 if realnodes.leftovers(args.cluster) else 0
    out = pathlib.Path(args.out)
    if args.command == "report":   # again, from the .json (or the .partial.json a failed run left)
        source = next(p for p in (out.with_suffix(".json"), out.with_suffix(".partial.json")) if p.exists())
        out.write_text(report(json.loads(source.read_text())))
        print(out.read_text())
        return 0

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupted)
    if not args.reuse:
        teardown(args.cluster)   # whatever a run that died left behind
    try:
        result = bench(args)
    finally:
        if not args.keep:
            teardown(args.cluster)
        restore_congestion()
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))
    out.with_suffix(".partial.json").unlink(missing_ok=True)
    out.write_text(report(result))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
