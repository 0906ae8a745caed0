#!/usr/bin/env python3
"""Readers outside Kubernetes on the emulated fabric (issue #31's acceptance): measured ÷ fair share.

A Nebraska-like case (bench/topologies/nebraska-condor-small{,-facility}.yaml:
Kubernetes switches holding the caches, HTCondor racks holding only outside
readers) is planned by switchyard with its spec.outsideReaders, with and
without switchyard's own workers (the fleets) beside them. On the emulated
fabric (e2e/fabric.py, e2e/fabric_scenario.py) run the real origin and one
real xrootd cache per planned cache host from the config switchyard renders,
each with switchyard's exporter beside it, listening on its host's address
and reading the pool's clients ConfigMap as the operator renders it
(desired_facility -> desired_pool: the client map with the racks' address
ranges, and the ring it serves at /routing/ring), written where the pod
mounts it. Each rack's readers are plain processes in the rack's namespace,
routed by `switchyard route` run there with SWITCHYARD_ROUTING_URL naming the
exporters (nothing else: no Kubernetes, no ring file); switchyard's workers
read as the plan routes them (fabric_scenario.layout). The bytes each uplink
direction carries are compared with the fair share planner/fairshare.py
predicts for the plan with the outside readers (Plan.fair), and with the same
model on the bench's streams (bench/fabric_fairshare.py). During each run the
operator's own drift check reads the exporters (bench/drift_watch.py); a
third run keeps the same readers but leaves them undeclared (issue #31: that
run must trip PredictionDrift on the uplinks they load, the declared ones not).

Writes bench/results/outside-readers.md and .json (--out, --name). Needs root.

    python3 bench/outside_readers_bench.py [--window 20] [--warmup 60] [--repeats 3] [--scale 1.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import pathlib
import platform
import random
import statistics
import sys
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))

from fabric import PREFIX, Fabric, down, host_congestion, namespaces, run as sh, wait_listening  # noqa: E402
from fabric_bench import CPU_LIMIT, add_tcp_arguments, code_version, fabric_run_ready, flows  # noqa: E402
from closed_network import of_placement  # noqa: E402
from fabric_fairshare import of_layout  # noqa: E402
from drift_watch import DriftWatch, read_metrics  # noqa: E402
from fabric_scenario import Layout, Stream, fabric_for, layout, measure, start_exporter, start_servers  # noqa: E402
from headline import about  # noqa: E402
from switchyard.api import AnalysisFacilitySpec  # noqa: E402
from switchyard.desired.facility import desired_facility  # noqa: E402
from switchyard.desired.xcachepool import desired_pool  # noqa: E402
from switchyard.observe import clientmap  # noqa: E402
from switchyard.observe.exporterspec import DEFAULT_METRICS_PORT  # noqa: E402
from switchyard.planner import FleetRequest, PoolRequest  # noqa: E402
from switchyard.planner.flow import ring_weights  # noqa: E402
from switchyard.planner.hashing import home  # noqa: E402
from switchyard.policy.settings import Settings  # noqa: E402
from switchyard.topology import load_topology, read_yaml, snapshot  # noqa: E402

TAG = "o"
CASE = "nebraska-condor-small"
# Released at one moment, the readers start in step: both caches under-filled at first, then one full while
# the other is not, for about 50 s (bench/notes/outside-readers.ramp-bbr4.md: 0.68, 0.83, 0.93, 0.94, 0.95 of
# fair in the first five 10 s windows, 0.98-1.00 after). The first window of a 15 s warm-up read 0.80-0.93.
STEADY_AFTER = 60.0
VARIANTS = {"alone": "outside readers alone", "workers": "outside readers and switchyard's workers",
            "undeclared": "outside readers and switchyard's workers, the readers not declared"}
ORIGIN_URL = "root://origin.example.org/"     # what a batch job asks `switchyard route` about


@dataclasses.dataclass
class Case:
    """A facility as the operator would see it: its spec document, its nodes, and what the planner is given."""

    doc: dict
    nodes: list
    topology: object
    pools: list
    fleets: list


def load_case(where: pathlib.Path, name: str, workers: bool, readers: int = 0, streams: int = 1) -> Case:
    """The case's facility, with its fleets (`workers`) or without them (its outside readers alone); with
    `readers`, each outside group has that many, and with `streams` each of those counts as that many (a
    stream reads one file at a time: what the closed network counts as a reader), the group's Gbps split
    among them."""
    doc = yaml.safe_load((where / f"{name}-facility.yaml").read_text())
    if not workers:
        doc["spec"]["fleets"] = []
    for group in doc["spec"].get("outsideReaders", []) if readers or streams > 1 else ():
        count = (readers or group["count"]) * streams
        group["readGbps"], group["count"] = group["readGbps"] * group["count"] / count, count
    if any(p.get("missRatio", 0.1) for p in doc["spec"]["cachePools"]):
        raise ValueError("the bench warms its caches: give every pool missRatio 0 so the plan predicts no fills")
    nodes = load_topology(read_yaml(str(where / f"{name}.yaml")), name).node_infos()
    spec = AnalysisFacilitySpec.model_validate(doc["spec"])
    topology = snapshot(nodes, spec.network, spec.outside_readers)
    return Case(doc, nodes, topology, [PoolRequest(p.name, p) for p in spec.cache_pools],
                [FleetRequest(f.name, f) for f in spec.fleets])


def render(case: Case, addresses: dict[str, str], rack_addresses: dict[str, str], name: str = "bench",
           declared: bool = True):
    """The facility as the operator renders it with the fabric's addresses: the nodes' InternalIPs, each
    outside group's range its reader namespace's address (with `declared`; else without spec.outsideReaders,
    as a site that has not declared them). Returns (outcome, pool name -> clients data)."""
    doc = json.loads(json.dumps(case.doc))
    if not declared:
        doc["spec"].pop("outsideReaders", None)
    for group in doc["spec"].get("outsideReaders", []):
        group["cidrs"] = [f"{rack_addresses[group['name']]}/32"]
    nodes = [dataclasses.replace(n, internal_ips=(addresses[n.name],), client_networks=(f"{addresses[n.name]}/32",))
             if n.name in addresses else n for n in case.nodes]
    out = desired_facility(name, doc["spec"], None, nodes, [], [], Settings())
    clients = {}
    for pool in (c for c in out.children if c["kind"] == "XCachePool"):
        done = desired_pool(pool["metadata"]["name"], "default", pool["spec"], pool["status"], {}, nodes, Settings())
        config = next(c for c in done.children if c["metadata"]["name"].endswith("-clients"))
        clients[pool["metadata"]["name"].removeprefix(f"{name}-")] = config["data"]    # by the facility's pool name
    return out, clients


def outside_rows(topology, scale: float) -> list[tuple[str, str, float, float]]:
    """A namespace per outside group on its rack; no NIC of theirs is known (the model gives them none), so
    its link is the rack's uplink."""
    uplink = {s.name: s.uplink_gbps for s in topology.switches}
    return [(g.name, g.switch, uplink[g.switch] * scale, uplink[g.switch] * scale) for g in topology.outside]


def expected_homes(the: Layout, topology, pools, placement, weights, files: list[str]) -> dict[str, str]:
    """file -> the cache the planner's ring names (what the published routing should say); warmed ahead."""
    (pool, ring), = ring_weights(topology, pools, placement, weights).items()
    homes = {f: home(f, ring) for f in files}
    for f, cache in homes.items():
        the.warm[cache].add(f)
    return homes


def published_routes(fabric: Fabric, group: str, exporters: list[str], files: list[str]) -> list[str]:
    """`switchyard route` run in the group's namespace with SWITCHYARD_ROUTING_URL: the cache URL per file."""
    env = ["env", f"SWITCHYARD_ROUTING_URL={','.join(exporters)}", f"HOSTNAME={group}"]
    argv = [str(pathlib.Path(sys.executable).with_name("switchyard")), "route", *(ORIGIN_URL + f for f in files)]
    done = sh("ip", "netns", "exec", fabric.node(group).ns, *env, *argv)
    routed = done.stdout.split()
    if len(routed) != len(files):
        raise RuntimeError(f"switchyard route in {group} printed {len(routed)} lines for {len(files)} files")
    return routed


def cache_of(url: str, by_address: dict[str, str]) -> str:
    """The cache node a routed root://address:port//path names."""
    address = url.removeprefix("root://").split("/", 1)[0].rsplit(":", 1)[0]
    return by_address[address]


def outside_streams(topology, routed: dict[str, dict[str, str]], files: list[str], scale: float,
                    per_reader: int = 1) -> list[Stream]:
    """`per_reader` streams per outside reader, each at its share of the reader's Gbps, each file from the cache
    its rack's routing named, in an order of its own in which every stretch holds each cache's files in the
    routing's proportion (balanced_order).

    Each reader is a process of its own, as a batch job is, and each of its streams logs in with XRootD
    connections of its own (Fabric.start_readers): in one connection a rack's readers would split a cache's
    NIC by connection (TCP's share of a few long flows) rather than by reader (what the fair share models).
    A batch job reads several files at once (a TaskVine worker's tasks, a Dask worker's threads); with one
    stream a reader holds one file at a time, and near a cache's cap few such readers bunch on one cache
    while another idles (bench/closed_network.py)."""
    streams = []
    for g in topology.outside:
        by_cache: dict[str, list[str]] = {}
        for f in files:
            by_cache.setdefault(routed[g.name][f], []).append(f)
        for i, j in itertools.product(range(g.count), range(per_reader)):
            order = balanced_order(by_cache, random.Random(f"{g.name}/{i}" + (f"/{j}" if j else "")))
            streams.append(Stream(g.name, g.name, g.read_gbps * scale / per_reader, order, True,
                                  g.read_gbps / per_reader, process=f"job{i}"))
    return streams


def balanced_order(by_cache: dict[str, list[str]], rng: random.Random) -> list[tuple[str, str]]:
    """(cache, file) for every file: each cache's files in a shuffled order, merged so that every prefix holds
    each cache's files in their overall proportion, give or take one.

    A reader reads one file after another, so over a window it reads only the start of its list (about 40 of
    1024 files in 60 s). In a plain shuffle that start holds a cache's files in the ring's proportion only on
    average: a rack whose readers' starts happen to hold more of a slow cache's files reads less, the same
    way in every run (the orders are seeded), which the fair share (each reader split by the ring's weights)
    does not model. Balanced, every reader's window is split as the model splits it."""
    queues = {c: rng.sample(fs, len(fs)) for c, fs in sorted(by_cache.items())}
    total = sum(len(q) for q in queues.values())
    caches = sorted(queues)
    rng.shuffle(caches)                         # ties broken in an order of the reader's own
    taken = dict.fromkeys(caches, 0)
    out = []
    for k in range(1, total + 1):
        cache = max((c for c in caches if taken[c] < len(queues[c])),
                    key=lambda c: k * len(queues[c]) / total - taken[c])
        out.append((cache, queues[cache][taken[cache]]))
        taken[cache] += 1
    return out


def closed_gbps(args, plan) -> float:
    """The outside readers alone as a closed network of sequential readers (bench/closed_network.py), each of
    their streams a reader of its share of the group's Gbps, on the plan's caches and ring: what readers that
    hold one file each at a time deliver when few of them share a cache host near its cap."""
    by_stream = load_case(pathlib.Path(args.topologies), args.case, False, args.readers, args.reader_streams)
    return of_placement(by_stream.topology, by_stream.pools, [], plan.placement, dict(plan.hash_weights))


def scrape_served(fabric: Fabric, caches: list[str]) -> dict[str, dict[str, float]]:
    """Each cache's exporter's served bytes by client_switch (does its client map place the racks?)."""
    out: dict[str, dict[str, float]] = {}
    for node in caches:
        url = f"http://{fabric.node(node).ip}:{DEFAULT_METRICS_PORT}/metrics"
        for line in read_metrics(sh, fabric.node(node).ns, url).splitlines():
            if line.startswith("switchyard_xcache_served_bytes_total{") and 'client_switch="' in line:
                switch = line.split('client_switch="', 1)[1].split('"', 1)[0]
                out.setdefault(node, {})[switch] = float(line.rsplit(" ", 1)[1])
    return out


def measure_variant(case: Case, args, log, declared: bool = True) -> dict:
    files = [f"/f{i:04d}.root" for i in range(args.files)]
    # The fabric is laid out, and the readers read, as the plan with the declaration has it; without it
    # (`declared` False) only what the operator renders differs: the exporters' client map and the plan the
    # drift check judges against.
    out, _ = render(case, {}, {g.name: "10.40.0.1" for g in case.topology.outside})
    plan = out.plan
    bare = desired_facility("bench", {k: v for k, v in case.doc["spec"].items() if k != "outsideReaders"}, None,
                            case.nodes, [], [], Settings()).plan
    the = layout(case.topology, case.pools, case.fleets, plan.placement, dict(plan.hash_weights), args.scale, files)
    the.hosts.extend(outside_rows(case.topology, args.scale))
    homes = expected_homes(the, case.topology, case.pools, plan.placement, dict(plan.hash_weights), files)
    caches = sorted(the.caches)
    log(f"  plan: {plan.predicted_gbps} Gbps predicted, fair share {plan.fair.delivered_gbps} Gbps; "
        f"{len(caches)} caches, {len(the.streams)} worker streams, {sum(g.count for g in case.topology.outside)} "
        "outside readers")
    with fabric_for(TAG, case.topology, the, args.scale, args.congestion, host_queue=args.host_queue) as fabric:
        addresses = {n.name: n.ip for n in fabric.nodes}
        by_address = {fabric.node(c).ip: c for c in caches}
        rendered, clients = render(case, addresses, {g.name: addresses[g.name] for g in case.topology.outside},
                                   declared=declared)
        if rendered.plan.placement != plan.placement:
            raise RuntimeError("the plan changed with the fabric's addresses")
        switch_of = {h.name: h.switch for h in case.topology.hosts}

        def beside(node: str, pool: str, data: str, meta: str) -> None:
            mounted = fabric.workdir / f"clients-{node}"       # the pool's clients ConfigMap as the pod mounts it
            mounted.mkdir()
            for key, text in clients[pool].items():
                (mounted / key).write_text(text)
            start_exporter(fabric, node, pool, switch_of[node], data, meta, address=fabric.node(node).ip,
                           client_map=str(mounted / clientmap.KEY))

        start_servers(fabric, the, case.pools, args.file_kib << 10, beside_cache=beside)
        for c in caches:
            wait_listening(fabric.node(c).ns, fabric.node(c).ip, DEFAULT_METRICS_PORT)
        exporters = [f"http://{fabric.node(c).ip}:{DEFAULT_METRICS_PORT}" for c in caches]
        if declared:
            routed = {g.name: dict(zip(files, (cache_of(u, by_address) for u in published_routes(
                fabric, g.name, exporters, files)))) for g in case.topology.outside}
            differ = {g: sum(cache != homes[f] for f, cache in by_file.items()) for g, by_file in routed.items()}
            log(f"  routed by switchyard route from the exporters: files whose cache differs from the plan's ring: "
                f"{differ}")
        else:   # nothing publishes a ring for readers not declared: they read as the declared run's did
            routed, differ = {g.name: homes for g in case.topology.outside}, None
        the.streams.extend(outside_streams(case.topology, routed, files, args.scale, args.reader_streams))
        for s in the.streams:
            for cache, f in s.urls:
                the.warm[cache].add(f)
        fair_layout = of_layout(case.topology, the, args.scale)
        t0 = time.monotonic()
        watch = DriftWatch(rendered.plan, rendered.status["plan"], args.scale,
                           {c: (fabric.node(c).ns, f"{url}/metrics") for c, url in zip(caches, exporters)}, sh).start()
        try:
            m = measure(fabric, the, args.warmup, args.window, args.repeats, log)
        finally:
            watch.stop()
        served = scrape_served(fabric, caches)
        seconds = time.monotonic() - t0
    left = namespaces(PREFIX + TAG + "-")
    if left:
        raise RuntimeError(f"teardown left {left}")
    readers = sorted(set(the.workers) | {g.name for g in case.topology.outside})
    windows = [{"seconds": round(w.seconds, 2), "cpu_busy": round(w.cpu_busy, 3), "load1": round(w.load, 2),
                "fabric_cores": round(w.fabric_cores, 3), "softirq_cores": round(w.softirq_cores, 3),
                **flows(w.wire_mbit, case.topology, readers, caches, args.scale)} for w in m.windows]
    return {
        "predicted_gbps": plan.predicted_gbps, "routing": dict(plan.routing),
        "caches": {s: list(n) for by in plan.placement.caches.values() for s, n in by.items()},
        "workers": {f: dict(by) for f, by in plan.placement.workers.items()},
        "outside": {g.name: {"switch": g.switch, "count": g.count, "read_gbps": g.read_gbps} for g in case.topology.outside},
        "predicted_uplinks": {u.switch: {"out": u.out_gbps, "in": u.in_gbps, "capacity": u.capacity_gbps}
                              for u in plan.uplinks},
        "predicted_uplinks_undeclared": {u.switch: {"out": u.out_gbps, "in": u.in_gbps} for u in bare.uplinks},
        "fair_gbps": plan.fair.delivered_gbps, "fair_uplinks": dict(plan.fair.uplinks),
        "fair_outside": dict(plan.fair.outside),
        "fair_layout_gbps": fair_layout.delivered_gbps, "fair_layout_uplinks": fair_layout.uplinks,
        "closed_gbps": None if case.fleets else round(closed_gbps(args, plan), 3),
        "routed_differ_from_plan": differ, "exporter_served_bytes": served, "declared": declared,
        "drift": watch.summary(),
        "idle_cores_before": round(m.idle_cores_before, 2), "warm_seconds": round(m.warm_seconds, 1),
        "seconds": round(seconds, 1), "windows": windows,
    }


def summarise(r: dict) -> dict:
    """Measured ÷ fair share per loaded uplink direction and for the bytes delivered, over the valid windows."""
    valid = [w for w in r["windows"] if w["cpu_busy"] <= CPU_LIMIT]
    use = valid or r["windows"]
    uplinks = {}
    for switch, p in r["predicted_uplinks"].items():
        for d in ("out", "in"):
            fair = r["fair_uplinks"][switch][d]
            if fair <= 0.01 * p["capacity"]:
                continue
            measured = statistics.fmean(w["uplinks"][switch][d] for w in use)
            uplinks[f"{switch} {d}"] = {"fair": fair, "fair_layout": r["fair_layout_uplinks"][switch][d],
                                        "measured": round(measured, 3), "ratio": round(measured / fair, 3)}
    delivered = statistics.fmean(w["delivered_gbps"] for w in use)
    return {"valid": bool(valid) and len(valid) == len(r["windows"]), "valid_windows": len(valid),
            "cpu_busy_max": max(w["cpu_busy"] for w in r["windows"]), "delivered": round(delivered, 3),
            "ratio_delivered": round(delivered / r["fair_gbps"], 3) if r["fair_gbps"] else float("nan"),
            "uplinks": uplinks}


def drift_lines(d: dict) -> list[str]:
    """The live drift check's verdict on the run (bench/drift_watch.py)."""
    return [f"The operator's drift check on the exporters, read {d['reads']} times during the run: "
            + (f"PredictionDrift on {', '.join(d['drifted_during_run'])}" if d["drifted_during_run"]
               else "no PredictionDrift") + (f"; at the end: {d['message']}" if d["message"] else "."),
            "", "Judged at the end: " + ("; ".join(d["verdicts"]) or "nothing") + "."]


def within(ratio: float) -> bool:
    return 0.95 <= ratio <= 1.05


def report(results: dict, args, meta: dict) -> str:
    lines = [
        "# Readers outside Kubernetes on the emulated fabric: measured ÷ fair share",
        "",
        *about("real bytes through an emulated fabric from real xrootd caches to HTCondor racks' readers routed by "
               "`switchyard route` from the routing the caches' exporters publish, against planner/fairshare.py's "
               "prediction for the plan with the outside readers, with and without switchyard's own workers",
               "`make bench-outside-readers` (`bench/outside_readers_bench.py`, needs root)",
               f"{meta.get('finished', 'not recorded')}, commit {meta.get('head', 'not recorded')}"),
        f"Generated by `bench/outside_readers_bench.py`; issue #31's acceptance. Case bench/topologies/{args.case}"
        "{,-facility}.yaml. Each cache host runs a real xrootd from the config switchyard renders and switchyard's",
        "exporter on its address, reading the pool's clients ConfigMap as the operator renders it (client map with the",
        "racks' ranges, the ring it serves at /routing/ring). Each HTCondor rack's readers are plain processes in the",
        "rack's namespace, routed by `switchyard route` run there with SWITCHYARD_ROUTING_URL naming the exporters; the",
        "workers read as the plan routes them. Measured = the shapers' bytes over each window ÷ the scale (model Gbps).",
        f"Fair share = Plan.fair (planner/fairshare.py on the plan); the same model on the bench's streams beside it.",
        f"A window with more than {CPU_LIMIT:.0%} of all cores busy (the machine is shared) is invalid. The windows",
        "begin after the readers' start-up: released at one moment they read in step for about 50 s, below the fair",
        "share (bench/notes/outside-readers.ramp-bbr4.md), which is the steady state's.",
        "",
        f"- machine: {os.cpu_count()} cores, {platform.system()} {platform.release()}; scale {args.scale} Mbit/s per "
        f"Gbps; {args.runs} runs per variant, each on a fabric of its own, the variants in turn; {args.repeats} "
        f"windows × {args.window:.0f} s after {args.warmup:.0f} s warm-up; {args.files} files × "
        f"{args.file_kib} KiB; each outside reader a process reading {args.reader_streams} file(s) at once, each "
        f"stream at that share of its Gbps (--reader-streams); TCP {meta.get('congestion', '?')}; hosts' NIC "
        f"queues {meta.get('host_queue', 'fifo')} "
        f"(e2e/fabric.py shape_host); run took {meta.get('seconds', float('nan')):.0f} s",
        "",
    ]
    for variant, runs in results.items():
        r = runs[0]          # the plan is the same in every run
        lines += [f"## {variant}", "",
                  f"Plan: caches {r['caches']}, workers {r['workers']}, outside {r['outside']}; routing {r['routing']}.",
                  f"Predicted per-uplink in without the declaration: "
                  + ", ".join(f"{sw} {v['in']:.1f}" for sw, v in r["predicted_uplinks_undeclared"].items())
                  + "; with it: " + ", ".join(f"{sw} {v['in']:.1f}" for sw, v in r["predicted_uplinks"].items()) + " Gbps.",
                  *([] if r["declared"] else [
                      "Not declared: the exporters' client map leaves the racks out and the drift check judges against "
                      "the plan without them; nothing publishes a ring for the racks' readers, so they read each file "
                      "from the cache the declared plan's ring names, as in the runs above (the fair share below is "
                      "that plan's: the bytes are the same)."]), "",
                  "| uplink direction | fair share Gbps | fair share on the bench's streams | "
                  + " | ".join(f"run {i}: measured Gbps (÷ fair)" for i in range(1, len(runs) + 1))
                  + " | mean of the runs (÷ fair) |",
                  "|---|---:|---:|" + "---:|" * (len(runs) + 1)]
        for link, u in r["summary"]["uplinks"].items():
            cells = [(x["summary"]["uplinks"][link]["measured"], x["summary"]["uplinks"][link]["ratio"]) for x in runs]
            mean = statistics.fmean(m for m, _ in cells)
            cells.append((mean, mean / u["fair"]))
            lines.append(f"| {link} | {u['fair']:.2f} | {u['fair_layout']:.2f} | " + " | ".join(
                f"{m:.2f} ({q:.3f}{'' if within(q) else ', outside 0.95–1.05'})" for m, q in cells) + " |")
        delivered = [x["summary"]["delivered"] for x in runs]
        lines += [f"| delivered | {r['fair_gbps']:.2f} | {r['fair_layout_gbps']:.2f} | " + " | ".join(
                  f"{m:.2f} ({m / r['fair_gbps']:.3f})" for m in [*delivered, statistics.fmean(delivered)]) + " |", ""]
        if r.get("closed_gbps") is not None:
            lines += [f"The closed network of sequential readers (bench/closed_network.py, each outside stream a reader "
                      f"holding one file at a time, no fitted parameter) delivers {r['closed_gbps']:.2f} Gbps, "
                      f"{r['closed_gbps'] / r['fair_gbps']:.3f} of the fair share: what bunching on one cache host "
                      "while another idles costs readers this few near the hosts' caps.", ""]
        for i, x in enumerate(runs, 1):
            lines += [f"Run {i}: CPU headroom before the readers {x['idle_cores_before']} cores, CPU busy max "
                      f"{x['summary']['cpu_busy_max']:.0%} ({'valid' if x['summary']['valid'] else 'INVALID: CPU bound possible'})"
                      + (f"; files whose routed cache differs from the plan's ring: {x['routed_differ_from_plan']}"
                         if x["declared"] else "")
                      + "; per window, measured ÷ fair: " + "; ".join(
                          f"{link} " + " / ".join(f"{w['uplinks'][link.split()[0]][link.split()[1]] / u['fair']:.3f}"
                                                  for w in x["windows"])
                          for link, u in x["summary"]["uplinks"].items())
                      + f"; exporters' served bytes by client_switch: {x['exporter_served_bytes']}.", "",
                      *drift_lines(x["drift"]), ""]
    return "\n".join(lines) + "\n"


def positive(text: str) -> int:
    if (n := int(text)) < 1:
        raise argparse.ArgumentTypeError(f"{text}: at least 1")
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", default=CASE)
    parser.add_argument("--topologies", default=str(ROOT / "bench" / "topologies"))
    parser.add_argument("--variants", default=",".join(VARIANTS), help="a comma list of " + ", ".join(VARIANTS))
    parser.add_argument("--scale", type=float, default=1.5, help="Mbit/s per model Gbps")
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=STEADY_AFTER,
                        help="seconds from the readers' start to the first window; the fair share is the steady "
                             "state (STEADY_AFTER)")
    parser.add_argument("--repeats", type=int, default=3, help="measured windows per run")
    add_tcp_arguments(parser)
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant, each on a fabric of its own")
    parser.add_argument("--files", type=int, default=1024, help="files the readers read (more: the ring split closer to its weights)")
    parser.add_argument("--file-kib", type=int, default=512)
    parser.add_argument("--readers", type=int, default=0,
                        help="readers per outside group, its Gbps split among them (0: the case's count)")
    parser.add_argument("--reader-streams", type=positive, default=4,
                        help="files each outside reader reads at once, its Gbps split among them (the case's readers "
                             "each stand for about four of the challenge's workers)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--name", default="outside-readers")
    args = parser.parse_args()
    if not fabric_run_ready(TAG):
        return 2
    out = pathlib.Path(args.out)
    started = time.monotonic()
    meta = {"load_start": os.getloadavg()[0], "congestion": args.congestion or host_congestion(),
            "host_queue": args.host_queue, **code_version()}
    results: dict = {}
    try:
        for run, (key, variant) in itertools.product(range(1, args.runs + 1), VARIANTS.items()):
            if key not in args.variants.split(","):
                continue
            print(f"{variant}, run {run}: load {os.getloadavg()[0]:.2f}", flush=True)
            case = load_case(pathlib.Path(args.topologies), args.case, workers=key != "alone", readers=args.readers)
            r = measure_variant(case, args, lambda m: print(m, flush=True), declared=key != "undeclared")
            r["summary"] = summarise(r)
            print(f"  measured ÷ fair: delivered {r['summary']['ratio_delivered']}, "
                  + ", ".join(f"{k} {u['ratio']}" for k, u in r["summary"]["uplinks"].items()), flush=True)
            print(f"  drift check ({r['drift']['reads']} reads): drifted {r['drift']['drifted_during_run'] or 'nowhere'}",
                  flush=True)
            results.setdefault(variant, []).append(r)
    finally:
        down(PREFIX + TAG + "-")
    meta.update(load_end=os.getloadavg()[0], seconds=round(time.monotonic() - started, 1),
                finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    out.mkdir(parents=True, exist_ok=True)   # an --out of the admin's choosing may not exist yet
    (out / f"{args.name}.json").write_text(json.dumps({"args": vars(args), "meta": meta, "results": results}, indent=1))
    (out / f"{args.name}.md").write_text(report(results, args, meta))
    print(f"wrote {out / args.name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
