"""A placement on an emulated fabric: caches, readers, warm-up and measured windows.

Takes what the planner and the baselines produce (a Placement, the ring
weights) on a topology, realises it node by node (the planner's own packing
witness), builds the fabric (fabric.py) at `scale` Mbit/s per model Gbps, starts
the real origin and one real cache per cache host from the config switchyard
renders, warms the caches, shapes the links and runs XRootD-client readers
(fabric_reader.py, one process per node, a thread per stream, each with XRootD
connections of its own, Fabric.start_readers):

- a worker stands for `readGbps` of demand and is one reader stream (up to
  STREAMS_PER_NODE per node and routing kind, each then standing for several);
  the reader paces itself at that demand (fabric_reader.py: it asks for no
  more, as an analysis task reads no faster than it processes) and the node's
  link in is its NIC. Demand "shaped" (the runs before e493285) shaped a
  reader node's link in at its workers' demand instead: a drop-tail shaper
  where no real network has one, which dropped 5-9% of the frames that had
  crossed an uplink (bench/notes/fabric-notes.md);
- a *local* reader reads each file from one of its switch's cache hosts (what
  the switch's cache Service would pick per connection: a fixed pseudo-random
  choice per stream and file); a *ring* reader reads each file from the cache
  rendezvous hashing names (planner/hashing.py with the placement's weights);
- each stream reads the pool's files in order, from its own starting file,
  round and round, so its bytes split over sources in fixed proportions.

Caches are warm before anything is measured (every file a stream will ask a
cache for is read through it once, unshaped), so origin bytes in the windows
are the fills the model's missRatio would add: compare against missRatio 0.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fabric import ORIGIN_IP, PORT, QUEUE_MS, Fabric, cpu_times, process_cpu_seconds  # noqa: E402
from switchyard.api.xcachepool import XCachePoolBody  # noqa: E402
from switchyard.planner.flow import ring_weights  # noqa: E402
from switchyard.planner.hashing import home  # noqa: E402
from switchyard.planner.model import FleetRequest, Placement, PoolRequest  # noqa: E402
from switchyard.planner.packing import witness  # noqa: E402
from switchyard.planner.problem import fleet_pool_index  # noqa: E402
from switchyard.topology import Topology  # noqa: E402
from switchyard.xrootd import render_config  # noqa: E402
from switchyard.xrootd.config import directories_to_create  # noqa: E402

STREAMS_PER_NODE = 16    # a stream per worker, up to this many per node and routing kind
MIB = 1 << 20


@dataclass
class Stream:
    node: str
    fleet: str
    wire_mbit: float                  # pace (0: the node's shaped link in holds it to its demand)
    urls: list[tuple[str, str]]       # (cache node, file), read in order round and round
    ring: bool
    demand_gbps: float = 0.0          # what the workers it stands for read at most (model Gbps)
    process: str = ""                 # "": the node's one reader process, whose streams share its XRootD
                                      # connections (a worker's threads); else a process of its own (a batch job)


@dataclass
class Layout:
    """What runs where on the fabric, before anything starts."""

    hosts: list[tuple[str, str, float, float]]         # node, switch, Mbit/s out, Mbit/s in
    caches: dict[str, str]                             # cache node -> pool
    streams: list[Stream]
    warm: dict[str, set[str]]                          # cache node -> files to read through it first
    workers: dict[str, dict[str, int]]                 # node -> fleet -> workers
    unplaced: int = 0


READER_ORDERS = ("shuffled", "rotation")
DEMANDS = ("paced", "shaped")


def _pick(key: str, options: list[str]) -> str:
    digest = hashlib.sha256(key.encode()).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


def layout(topology: Topology, pools: list[PoolRequest], fleets: list[FleetRequest], placement: Placement,
           weights: dict[str, dict[str, float]], scale: float, files: list[str],
           reader_order: str = "shuffled", demand: str = "paced") -> Layout:
    """The node-level layout of a placement at `scale` Mbit/s per Gbps.

    reader_order: "shuffled", each stream reads the files in an order of its own (seeded by its
    node, fleet and index), as analysis tasks read distinct chunks in no common order; or
    "rotation", every stream the same list from its own offset (the runs recorded before
    2026-11-23 17:30 UTC): streams then follow one host sequence and bunch on a slow host.
    """
    if reader_order not in READER_ORDERS:
        raise ValueError(f"reader_order must be one of {READER_ORDERS}, not {reader_order!r}")
    if demand not in DEMANDS:
        raise ValueError(f"demand must be one of {DEMANDS}, not {demand!r}")
    hosts = {h.name: h for h in topology.hosts}
    packing = witness(topology, pools, fleets, placement)
    pool_of = {p.name: p for p in pools}
    cache_nodes: dict[str, str] = {}
    for pool, by_switch in placement.caches.items():
        for nodes in by_switch.values():
            for n in nodes:
                cache_nodes[n] = pool
    workers = {n: {k: c for k, c in kinds.items() if not k.startswith("cache:")} for n, kinds in packing.nodes.items()}
    workers = {n: kinds for n, kinds in workers.items() if kinds}
    used = sorted(set(cache_nodes) | set(workers))
    read_gbps = {f.name: f.body.read_gbps for f in fleets}
    rows = []
    for n in used:
        nic = hosts[n].nic_gbps
        out = min(nic, pool_of[cache_nodes[n]].body.serve_gbps) if n in cache_nodes else nic
        wanted = sum(c * read_gbps[f] for f, c in workers.get(n, {}).items())
        inn = nic if n in cache_nodes or demand == "paced" else min(nic, wanted)
        rows.append((n, hosts[n].switch, out * scale, inn * scale))
    # Which workers of a (fleet, switch) read through the ring: the placement says how many; take them node by node.
    ring_left = {}
    for fleet in fleets:
        for sw, count in placement.workers.get(fleet.name, {}).items():
            local = [c for c in placement.caches.get(pools[fleet_pool_index(fleet, pools)].name, {}).get(sw, ())]
            ring_left[fleet.name, sw] = count if not local else min(count, placement.hashed.get(fleet.name, {}).get(sw, 0))
    streams: list[Stream] = []
    warm: dict[str, set[str]] = {n: set() for n in cache_nodes}
    by_name = {f.name: f for f in fleets}
    ring_of = ring_weights(topology, pools, placement, weights)   # what the flow model hashes over
    for n in sorted(workers):
        sw = hosts[n].switch
        for fleet_name, count in sorted(workers[n].items()):
            fleet = by_name[fleet_name]
            pool = pools[fleet_pool_index(fleet, pools)].name
            ring = min(count, ring_left.get((fleet_name, sw), 0))
            ring_left[fleet_name, sw] = ring_left.get((fleet_name, sw), 0) - ring
            local_caches = sorted(placement.caches.get(pool, {}).get(sw, ()))
            for kind, k in (("ring", ring), ("local", count - ring)):
                if k <= 0:
                    continue
                s_count = min(k, STREAMS_PER_NODE)
                for i in range(s_count):
                    share = k // s_count + (1 if i < k % s_count else 0)
                    if reader_order == "rotation":
                        order = files[(i + len(streams)) % len(files):] + files[:(i + len(streams)) % len(files)]
                    else:
                        order = list(files)
                        random.Random(f"{n}/{fleet_name}/{kind}/{i}").shuffle(order)
                    urls = []
                    for f in order:
                        if kind == "ring":
                            cache = home(f, ring_of[pool])
                        else:
                            cache = _pick(f"{n}/{fleet_name}/{i}/{f}", local_caches)
                        warm[cache].add(f)
                        urls.append((cache, f))
                    paced = share * fleet.body.read_gbps * scale if n in cache_nodes or demand == "paced" else 0.0
                    streams.append(Stream(n, fleet_name, paced, urls, kind == "ring", share * fleet.body.read_gbps))
    unplaced = sum(packing.shortfall.values())
    return Layout(rows, cache_nodes, streams, warm, workers, unplaced)


@dataclass
class Window:
    seconds: float
    bytes: dict[str, tuple[int, int]]     # counter -> (out, in) bytes over the window
    cpu_busy: float                       # fraction of all cores busy (anything on the machine)
    load: float                           # 1-minute load average at the end
    fabric_cores: float = 0.0             # cores the fabric's own processes used (xrootd, readers)
    softirq_cores: float = 0.0            # cores in softirq (forwarding, shaping: the kernel's share)
    wire: dict[str, tuple[int, int]] = field(default_factory=dict)  # the same, as the shapers sent them (frames)
    ended: float = 0.0                    # time.monotonic() at its end: where it lies beside other samples

    def mbit(self, key: str) -> tuple[float, float]:
        return _mbit(self.bytes[key], self.seconds)

    def wire_mbit(self, key: str) -> tuple[float, float]:
        return _mbit(self.wire[key], self.seconds)


def _mbit(counts: tuple[int, int], seconds: float) -> tuple[float, float]:
    return counts[0] * 8 / seconds / 1e6, counts[1] * 8 / seconds / 1e6


def _delta(after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    return {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after}


@dataclass
class Measured:
    windows: list[Window] = field(default_factory=list)
    warm_seconds: float = 0.0
    fill_bytes: int = 0
    idle_cores_before: float = 0.0


def pool_body(pool: PoolRequest, data: str, meta: str) -> XCachePoolBody:
    """The pool as one cache host runs it here: the origin in the fabric, this host's directories."""
    spec = pool.body.model_dump(by_alias=True, exclude_none=True)
    spec.update(port=PORT, origin={"mode": "fixed", "host": ORIGIN_IP, "port": PORT},
                storage={"dataPaths": [data], "metaPath": meta})
    spec["pfc"] = {**spec.get("pfc", {}), "ramGiB": 1}
    return XCachePoolBody.model_validate({k: v for k, v in spec.items() if k in XCachePoolBody.model_fields
                                          or k in {f.alias for f in XCachePoolBody.model_fields.values()}})


def start_servers(fabric: Fabric, the: Layout, pools: list[PoolRequest], file_bytes: int,
                  beside_cache=None) -> None:
    """The origin with every file the layout reads, and each cache host's xrootd from switchyard's rendered
    config; beside_cache(node, pool, data, meta), when given, runs first for each cache (its exporter, say)."""
    files = sorted({f for cache_files in the.warm.values() for f in cache_files} |
                   {f for s in the.streams for _, f in s.urls})
    fabric.start_origin({f.lstrip("/"): file_bytes for f in files})
    by_name = {p.name: p for p in pools}
    for node, pool in sorted(the.caches.items()):
        data, meta = fabric.cache_dirs(node)
        body = pool_body(by_name[pool], data, meta)
        for path in directories_to_create(body):
            Path(path).mkdir(parents=True, exist_ok=True)
            uid, gid = Path(data).stat().st_uid, Path(data).stat().st_gid
            os.chown(path, uid, gid)
        if beside_cache is not None:
            beside_cache(node, pool, data, meta)
        fabric.start_cache(node, render_config(body, host_name=node, report_interval_seconds=10))


def start_exporter(fabric: Fabric, node: str, pool: str, switch: str, data: str, meta: str,
                   address: str = "127.0.0.1", client_map: str | None = None) -> None:
    """switchyard's exporter in the cache's namespace (its metrics and routing on `address`), fed by the
    f-stream the rendered config sends to the loopback; `client_map`: the clients.json it reads, the routing
    it serves beside it (the pool's clients ConfigMap as the pod mounts it)."""
    argv = [sys.executable, "-m", "switchyard.observe.exporter", "--pool", pool, "--host", node, "--switch", switch,
            "--metrics-address", address, "--data-path", data, "--meta-path", meta, "--log-level", "WARNING"]
    fabric.spawn(fabric.node(node).ns, argv + (["--client-map", client_map] if client_map else []),
                 fabric.workdir / f"exporter-{node}.log")


def warm_caches(fabric: Fabric, warm: dict[str, set[str]]) -> None:
    """Read each cache's files through it once, from its own node (cache node -> files)."""
    def one(node: str) -> None:
        ip = fabric.node(node).ip
        fabric.read_once(node, [f"root://{ip}:{PORT}/{f}" for f in sorted(warm[node])])

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, sorted(n for n in warm if warm[n])))


def run(fabric: Fabric, the: Layout, pools: list[PoolRequest], file_bytes: int, warmup: float, window: float,
        repeats: int, log=print) -> Measured:
    """Start origin and caches, warm them, shape, run the readers; measure `repeats` windows."""
    start_servers(fabric, the, pools, file_bytes)
    return measure(fabric, the, warmup, window, repeats, log)


def measure(fabric: Fabric, the: Layout, warmup: float, window: float, repeats: int, log=print) -> Measured:
    """With origin and caches started: warm the caches, shape, run the readers; measure `repeats` windows."""
    measured = Measured()
    start = time.monotonic()
    warm_caches(fabric, the.warm)
    measured.warm_seconds = time.monotonic() - start
    measured.fill_bytes = fabric.counters()["wan"][0]
    log(f"  caches warm in {measured.warm_seconds:.0f} s ({measured.fill_bytes / MIB:.0f} MiB from the origin)")
    fabric.shape_links()
    cores = os.cpu_count() or 1
    cpu0 = cpu_times()
    time.sleep(2)
    cpu1 = cpu_times()
    measured.idle_cores_before = (1 - (cpu1[0] - cpu0[0]) / max(1e-9, cpu1[1] - cpu0[1])) * cores
    log(f"  CPU headroom before the readers start: {measured.idle_cores_before:.2f} of {cores} cores idle")
    by_process: dict[tuple[str, str], list] = {}
    for s in the.streams:
        by_process.setdefault((s.node, s.process), []).append(
            ([f"root://{fabric.node(c).ip}:{PORT}/{f}" for c, f in s.urls], s.wire_mbit))
    for (node, process), streams in sorted(by_process.items()):
        fabric.start_readers(node, streams, process=process)
    fabric.release_readers()
    time.sleep(warmup)
    for _ in range(repeats):
        own0 = process_cpu_seconds(fabric.prefix)
        before, wire0, cpu0, t0 = fabric.counters(), fabric.wire_counters(), cpu_times(), time.monotonic()
        time.sleep(window)
        after, wire1, cpu1, t1 = fabric.counters(), fabric.wire_counters(), cpu_times(), time.monotonic()
        own1 = process_cpu_seconds(fabric.prefix)
        jiffies = max(1e-9, cpu1[1] - cpu0[1])
        busy = (cpu1[0] - cpu0[0]) / jiffies
        w = Window(t1 - t0, _delta(after, before), busy, os.getloadavg()[0], (own1 - own0) / (t1 - t0),
                   (cpu1[2] - cpu0[2]) / jiffies * cores, _delta(wire1, wire0), t1)
        measured.windows.append(w)
        log(f"  window {len(measured.windows)}: {w.seconds:.1f} s, CPU busy {busy:.0%}, headroom "
            f"{(1 - busy) * cores:.2f} cores (fabric processes "
            f"{w.fabric_cores:.2f} cores, softirq {w.softirq_cores:.2f}), load {w.load:.2f}")
    fabric.stop_readers()
    return measured


def fabric_for(tag: str, topology: Topology, the: Layout, scale: float, congestion: str = "",
               queue_ms: float = QUEUE_MS, host_queue: str = "fair") -> Fabric:
    return Fabric.plan(tag, {s.name: s.uplink_gbps * scale for s in topology.switches}, the.hosts,
                       topology.wan_gbps * scale, congestion, queue_ms, host_queue)
