#!/usr/bin/env python3
"""Fabric benchmark (issue 14): real bytes through an emulated switch fabric against the plan's prediction.

For each case (a topology file and a facility in bench/topologies/) and each
placement — (a) switchyard's plan, (b) the default-scheduler baseline, (c) a
seeded random eligible placement — it builds the fabric at `scale` Mbit/s per
model Gbps (e2e/fabric.py), starts the real origin and caches from the config
switchyard renders, warms them, runs the readers each placement's routing
names (e2e/fabric_scenario.py) and measures per-uplink bytes each way, per
host bytes and origin bytes from the interface counters over `repeats`
windows after a warm-up. Caches are warm, so predictions are made with
missRatio 0. Measured Gbps are wire bytes divided by the scale, in the
model's units. A window whose CPU was more than CPU_LIMIT busy is invalid.

Writes bench/results/fabric.md, fabric.json and fabric.png. Needs root.

    python3 bench/fabric_bench.py [--cases chicago,...] [--scale 1.5] [--window 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import signal
import statistics
import subprocess
import sys
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))

from fabric import HOST_QUEUES, PREFIX, QUEUE_MS, down, host_congestion, namespaces, queue_floor_bytes  # noqa: E402
from fabric_fairshare import of_layout  # noqa: E402
from fabric_scenario import DEMANDS, READER_ORDERS, fabric_for, layout, run  # noqa: E402
from headline import about  # noqa: E402
from switchyard.api import AnalysisFacilitySpec  # noqa: E402
from switchyard.planner import FleetRequest, PoolRequest, baselines, plan  # noqa: E402
from switchyard.planner.flow import SATURATED, ring_weights  # noqa: E402
from switchyard.planner.hashing import home  # noqa: E402
from switchyard.topology import load_topology, snapshot  # noqa: E402

# The counters see TCP segments as the kernel's GSO packets (one header per up to 64 KB), i.e. about the
# payload, while HTB shapes whole frames (qdisc_pkt_len adds every segment's headers): a link full to
# its shaped rate shows ~1448/1514 of it. The model's Gbps are link rates, so a full link reads PAYLOAD.
PAYLOAD = 1448 / 1514
CPU_LIMIT = 0.75          # fraction of all cores busy above which a window is invalid
TAG = "b"
NOTES = ROOT / "bench" / "notes" / "fabric-notes.md"   # hand-written notes the report links to


def load_case(name: str, where: pathlib.Path = ROOT / "bench" / "topologies"):
    tf = load_topology(yaml.safe_load((where / f"{name}.yaml").read_text()), name)
    doc = yaml.safe_load((where / f"{name}-facility.yaml").read_text())
    spec = AnalysisFacilitySpec.model_validate(doc["spec"])
    topology = snapshot(tf.node_infos(), spec.network)
    # Warm caches: the fills missRatio stands for are not emulated, so predict without them.
    pools = [PoolRequest(p.name, p.model_copy(update={"miss_ratio": 0.0})) for p in spec.cache_pools]
    fleets = [FleetRequest(f.name, f) for f in spec.fleets]
    return topology, pools, fleets, spec.routing


def placements(topology, pools, fleets, routing):
    a = plan(topology, pools, fleets, routing=routing)
    return {"a: switchyard": a,
            "b: default scheduler": baselines.default_scheduler(topology, pools, fleets, bound=a.bound_gbps),
            "c: random (seed 0)": baselines.random_placement(topology, pools, fleets, seed=0, bound=a.bound_gbps)}


def measure_one(topology, pools, fleets, chosen, scale, args, log):
    files = [f"/f{i:04d}.root" for i in range(args.files)]
    the = layout(topology, pools, fleets, chosen.placement, dict(chosen.hash_weights), scale, files, args.reader_order,
                 args.demand)
    fair = of_layout(topology, the, scale)
    log(f"  fair-share reference: {fair.delivered_gbps} Gbps")
    log(f"  {len(the.hosts)} node namespaces, {len(the.caches)} caches, {len(the.streams)} reader streams"
        + (f", {the.unplaced} workers unplaced" if the.unplaced else ""))
    with fabric_for(TAG, topology, the, scale, args.congestion, args.queue_ms, args.host_queue) as fabric:
        t0 = time.monotonic()
        m = run(fabric, the, pools, args.file_kib << 10, args.warmup, args.window, args.repeats, log=log)
        seconds = time.monotonic() - t0
    left = namespaces(PREFIX + TAG + "-")
    if left:
        raise RuntimeError(f"teardown left {left}")
    ring = ring_weights(topology, pools, chosen.placement, dict(chosen.hash_weights))
    split = {}
    for pool, weights in ring.items():
        total = sum(weights.values()) or 1.0
        homes = [home(f, weights) for f in files]
        split[pool] = {c: {"weight": round(w / total, 4), "files": round(homes.count(c) / len(files), 4)}
                       for c, w in weights.items()}
    readers = sorted(the.workers)
    caches = sorted(the.caches)
    windows = []
    for w in m.windows:
        # The shapers' own byte counts (frames as a rate is charged) are the measure; the interface
        # counters are kept beside them (their ratio to a rate depends on the senders' burst sizes).
        windows.append({
            "seconds": round(w.seconds, 2), "cpu_busy": round(w.cpu_busy, 3), "load1": round(w.load, 2),
            "fabric_cores": round(w.fabric_cores, 3), "softirq_cores": round(w.softirq_cores, 3),
            **flows(w.wire_mbit, topology, readers, caches, scale),
            "counters": flows(w.mbit, topology, readers, caches, scale),
        })
    return {
        "planner": chosen.planner, "predicted_gbps": chosen.predicted_gbps, "demand_gbps": chosen.demand_gbps,
        "bound_gbps": chosen.bound_gbps, "bottleneck": chosen.bottleneck, "routing": dict(chosen.routing),
        "predicted_uplinks": {u.switch: {"out": u.out_gbps, "in": u.in_gbps, "capacity": u.capacity_gbps}
                              for u in chosen.uplinks},
        "caches": {s: list(n) for by in chosen.placement.caches.values() for s, n in by.items()},
        "workers": {f: dict(by) for f, by in chosen.placement.workers.items()},
        "fair_gbps": fair.delivered_gbps, "fair_uplinks": fair.uplinks, "fair_served": fair.served,
        "fair_saturated": list(fair.saturated), "fair_full_hosts_behind": {link: list(hosts) for link, hosts in fair.full_hosts_behind.items()},
        "host_switch": {n: sw for n, sw, _, _ in the.hosts}, "ring_split": split, "nodes": len(the.hosts), "streams": len(the.streams), "unplaced": the.unplaced,
        "idle_cores_before": round(m.idle_cores_before, 2), "warm_seconds": round(m.warm_seconds, 1), "fill_mib": round(m.fill_bytes / 2**20, 1),
        "seconds": round(seconds, 1), "windows": windows, "counting": "frames",
    }


def flows(mbit, topology, readers: list[str], caches: list[str], scale: float) -> dict:
    """A window's delivered, served, origin, per-uplink and per-host Gbps (model units) from one kind of count."""
    return {
        "delivered_gbps": round(sum(mbit(f"host:{n}")[1] for n in readers) / scale, 3),
        "served_gbps": round(sum(mbit(f"host:{n}")[0] for n in caches) / scale, 3),
        "origin_gbps": round(mbit("wan")[0] / scale, 3),
        "uplinks": {s.name: {"out": round(mbit(f"uplink:{s.name}")[0] / scale, 3),
                             "in": round(mbit(f"uplink:{s.name}")[1] / scale, 3)} for s in topology.switches},
        "hosts": {n: {"out": round(mbit(f"host:{n}")[0] / scale, 3), "in": round(mbit(f"host:{n}")[1] / scale, 3)}
                  for n in sorted(set(readers) | set(caches))},
    }


def full_reads(result: dict) -> float:
    """What a link full at its rate reads in the run's counts: 1 for the shapers' frames; PAYLOAD for the
    interface counters the runs before e6f0d45 used (a GSO burst carries one header there)."""
    return 1.0 if result.get("counting") == "frames" else PAYLOAD


def summarise(result: dict) -> dict:
    ws = result["windows"]
    valid = [w for w in ws if w["cpu_busy"] <= CPU_LIMIT]
    use = valid or ws
    agg = [w["delivered_gbps"] for w in use]
    out = {"valid": bool(valid) and len(valid) == len(ws), "valid_windows": len(valid),
           "delivered_mean": statistics.fmean(agg), "delivered_min": min(agg), "delivered_max": max(agg),
           "cpu_busy_max": max(w["cpu_busy"] for w in ws), "load_max": max(w["load1"] for w in ws),
           "fabric_cores_max": max(w.get("fabric_cores", 0) for w in ws),
           "softirq_cores_max": max(w.get("softirq_cores", 0) for w in ws),
           "origin_mean": statistics.fmean(w["origin_gbps"] for w in use),
           "served_mean": statistics.fmean(w["served_gbps"] for w in use), "uplinks": {}}
    out["ratio"] = out["delivered_mean"] / result["predicted_gbps"] if result["predicted_gbps"] else float("nan")
    out["full"] = full = full_reads(result)
    out["ratio_payload"] = out["ratio"] / full
    out["ratio_fair"] = out["delivered_mean"] / result["fair_gbps"] / full if result["fair_gbps"] else float("nan")
    out["spread"] = (out["delivered_max"] - out["delivered_min"]) / out["delivered_mean"] if out["delivered_mean"] else 0
    for s, p in result["predicted_uplinks"].items():
        row = {}
        for d in ("out", "in"):
            vals = [w["uplinks"][s][d] for w in use]
            row[d] = statistics.fmean(vals)
            row[d + "_spread"] = (max(vals) - min(vals)) / row[d] if row[d] > 0.01 * p["capacity"] else 0.0
            row[d + "_saturated"] = p[d] >= p["capacity"] * SATURATED
        out["uplinks"][s] = row
    return out


# ---------------------------------------------------------------- report

def report(results: dict, args, meta: dict) -> str:
    floor_kb = queue_floor_bytes(args.queue_ms) / 1000
    frames = any(r.get("counting") == "frames" for by in results.values() for r in by.values())
    lines = [
        "# Fabric benchmark: measured bytes against the plan's prediction",
        "",
        *about("real bytes through an emulated switch fabric (network namespaces, tc-shaped links, real xrootd caches "
               "and XRootD readers) against the plan's per-uplink prediction and the fair share, for switchyard's "
               "placement, the default scheduler's and a random one",
               "`make bench-fabric` (`bench/fabric_bench.py`, needs root); experiments with other arguments: "
               "bench/notes/README.md",
               f"{meta.get('finished', 'not recorded')}, commit {meta.get('head', 'not recorded')}"
               + (" with uncommitted planner changes" if meta.get("planner_changed") else "")),
        "Generated by `bench/fabric_bench.py` (`make bench-fabric`); issue 14. Each case's topology and facility",
        "(bench/topologies/) become an emulated fabric of network namespaces: a spine bridge, one bridge per switch,",
        "a namespace per node that hosts a cache or workers, an origin behind the WAN link; each direction of every",
        "uplink, NIC and the WAN shaped with tc HTB at the topology's Gbps × the scale. Real xrootd: the origin, and",
        "one cache per planned cache host started from the config switchyard renders. Readers are real XRootD",
        "clients (e2e/fabric_reader.py: a thread per stream reading whole files in turn) in the worker nodes' namespaces, routed as the placement says (local: one of the switch's caches per",
        "file; ring: the cache rendezvous hashing names with the placement's weights); each stream paces itself at its",
        "workers' readGbps and a node's link in is its NIC (demand paced; demand shaped, the runs before e493285,",
        "shaped a reader node's link in at its workers' demand instead). Caches are warmed first, so predictions",
        "use missRatio 0 and the origin column shows what still came from the origin during the windows.",
        "",
        "Measured Gbps = bytes over the window ÷ the scale (model units). Runs since e6f0d45 count the bytes each",
        "direction's shaper sent (tc's HTB byte count: whole frames, a header per TCP segment, what its rate is",
        "charged with), so a full link reads 1.0 of its rate (full = 1). Earlier runs counted the interface counters,",
        "which see a GSO burst as one packet with one header: a full link reads about 0.96 of its rate there",
        "(`python3 bench/notes/scripts/shaper_counts.py`: 0.958-0.964); those runs divide by full = 0.956 (1448/1514).",
        "Delivered = bytes into the worker nodes. Predictions are the flow",
        "model's (planner/flow.py) for the same placement: the best total the routing allows, not a fair share.",
        f"A window with more than {CPU_LIMIT:.0%} of all cores busy (by anything: this machine is shared) is",
        "invalid: the CPU may have bound, not the network. The fabric's own share is shown beside it (its xrootd",
        "and reader processes, and the kernel's softirq time, which is where bridging and shaping are paid).",
        "",
        f"- machine: {os.cpu_count()} cores, {platform.system()} {platform.release()}; whatever else ran on it shows in each window's CPU busy and load",
        f"- scale (Mbit/s per model Gbps): {', '.join(f'{c} {s}' for c, s in args.scales.items())}; windows {args.repeats} × {args.window:.0f} s after "
        f"{args.warmup:.0f} s warm-up; {args.files} files × {args.file_kib} KiB; demand {args.demand}; bytes counted by "
        f"{'the shapers' if frames else 'the interface counters'}; each stream reads them "
        + ("in an order of its own" if args.reader_order == "shuffled" else "in one common order from its own offset (rotation)"),
        f"- 1-minute load average at start {meta.get('load_start', float('nan')):.2f}, at end "
        f"{meta.get('load_end', float('nan')):.2f}; run took {meta.get('seconds', float('nan')):.0f} s; "
        f"finished {meta.get('finished', '?')}",
        f"- TCP congestion control in every namespace: {meta.get('congestion', 'the host default (not recorded)')}; "
        f"every shaped link's drop-tail FIFO {args.queue_ms:g} ms of its rate, at least {floor_kb:g} KB (longer "
        f"on links below {floor_kb * 8 / args.queue_ms:g} Mbit/s); a host's NIC out "
        + ("a queue per flow (e2e/fabric.py shape_host)" if args.host_queue == "fair" else "one FIFO too"),
        f"- planner: the working tree at the run's start, commit {meta.get('head', '?')}"
        + (" with uncommitted planner changes" if meta.get("planner_changed") else "")
        + (f" ({meta['note']})" if meta.get("note") else ""),
        "",
    ]
    for case, by in results.items():
        lines += [f"## {case} (scale {args.scales[case]} Mbit/s per Gbps)", "", "| placement | predicted Gbps | fair-share Gbps | measured Gbps (mean, min–max) | measured ÷ predicted "
                  "| ÷ (predicted × full) | ÷ (fair share × full) "
                  "| spread | served by caches | from origin | CPU busy (max) | fabric processes / softirq (cores, max) "
                  "| load (max) | valid |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for name, r in by.items():
            s = r["summary"]
            lines.append(f"| {name} | {r['predicted_gbps']:.1f} | {r['fair_gbps']:.1f} | {s['delivered_mean']:.1f} ({s['delivered_min']:.1f}–"
                         f"{s['delivered_max']:.1f}) | {s['ratio']:.3f} | {s['ratio_payload']:.3f} | {s['ratio_fair']:.3f} "
                         f"| {s['spread']:.1%} | {s['served_mean']:.1f} "
                         f"| {s['origin_mean']:.2f} | {s['cpu_busy_max']:.0%} | {s['fabric_cores_max']:.2f} / "
                         f"{s['softirq_cores_max']:.2f} | {s['load_max']:.2f} "
                         f"| {'yes' if s['valid'] else 'NO (CPU)'} |")
        names = list(by)
        if len(names) >= 2:
            a, b = by[names[0]], by[names[1]]
            pa, pb = a["predicted_gbps"], b["predicted_gbps"]
            ma, mb = a["summary"]["delivered_mean"], b["summary"]["delivered_mean"]
            if pb and mb:
                lines += ["", f"(a) ÷ (b): predicted {pa / pb:.2f}×, measured {ma / mb:.2f}× "
                              f"(measured ÷ predicted ratio {(ma / mb) / (pa / pb):.3f})."]
        lines += ["", "Per uplink (Gbps, model units; * = predicted saturated): flow-model prediction, fair-share "
                      "reference, measured mean (÷ predicted; spread between windows)", "",
                  "| placement | switch | capacity | out predicted | out fair share | out measured | in predicted "
                  "| in fair share | in measured |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, r in by.items():
            for sw, p in r["predicted_uplinks"].items():
                m = r["summary"]["uplinks"][sw]
                cells = []
                for d in ("out", "in"):
                    star = "*" if m[d + "_saturated"] else ""
                    ratio = f" ({m[d] / p[d]:.3f}×)" if p[d] > 0.01 * p["capacity"] else ""
                    cells += [f"{p[d]:.1f}{star}", f"{r['fair_uplinks'][sw][d]:.1f}",
                              f"{m[d]:.1f}{ratio} ±{m[d + '_spread']:.1%}"]
                lines.append(f"| {name} | {sw} | {p['capacity']:.0f} | " + " | ".join(cells) + " |")
        lines += ["", "Placements:", ""]
        for name, r in by.items():
            lines.append(f"- {name}: caches {r['caches']}; workers {r['workers']}; routing "
                         f"{sorted(set(r['routing'].values()))}; bottleneck (model) {r['bottleneck']}; "
                         f"{r['nodes']} node namespaces, {r['streams']} reader streams; caches warmed in "
                         f"{r['warm_seconds']:.0f} s ({r['fill_mib']:.0f} MiB)")
        for name, r in by.items():
            for pool, by_cache in r.get("ring_split", {}).items():
                worst = max((abs(v["files"] - v["weight"]) for v in by_cache.values()), default=0)
                lines.append(f"- {name}, ring of {pool}: share of files per cache vs its weight: " + ", ".join(
                    f"{c} {v['files']:.3f}/{v['weight']:.3f}" for c, v in by_cache.items()) + f" (worst {worst:.3f})")
        lines.append("")
    return "\n".join(lines + findings(results)) + "\n"


def undelivered(r: dict) -> float | None:
    """Of the bytes that crossed the uplinks into switches with readers only, the share their nodes did not
    receive (dropped past the uplink, at a node's link); None when no such switch carried any."""
    def switch_of(host: str) -> str:
        return r.get("host_switch", {}).get(host) or next(s for s in r["predicted_uplinks"] if host.startswith(s + "-"))
    readers_only = [s for s in r["predicted_uplinks"] if s not in r["caches"]]
    crossed = sum(w["uplinks"][s]["in"] for w in r["windows"] for s in readers_only)
    received = sum(v["in"] for w in r["windows"] for h, v in w["hosts"].items() if switch_of(h) in readers_only)
    return (crossed - received) / crossed if crossed > 0 else None


def findings(results: dict) -> list[str]:
    """The comparisons the issue's targets name, computed from the windows above."""
    rows = [(case, name, r) for case, by in results.items() for name, r in by.items()]
    if not rows:
        return []
    flow = [r["summary"]["ratio_payload"] for _, _, r in rows]
    fair = [r["summary"]["ratio_fair"] for _, _, r in rows]
    valid = sum(1 for _, _, r in rows if r["summary"]["valid"])
    lines = ["## Findings (computed from the runs above)", "",
             f"- Runs: {len(rows)}, of which {valid} valid by the CPU rule (the rest ran while the machine was more "
             f"than {CPU_LIMIT:.0%} busy, mostly with other work; their figures are shown but are not results).",
             f"- Aggregate, measured ÷ (flow-model prediction × full): {min(flow):.3f}–{max(flow):.3f}; "
             f"measured ÷ (fair-share reference × full): {min(fair):.3f}–{max(fair):.3f}. Target 0.95–1.05 "
             "(full: what a link full at its rate reads in the run's counts, see the top)."]
    sat, other = [], []
    for case, name, r in rows:
        for sw, p in r["predicted_uplinks"].items():
            m = r["summary"]["uplinks"][sw]
            for d in ("out", "in"):
                if p[d] <= 0.05 * p["capacity"] and m[d] <= 0.05 * p["capacity"]:
                    continue
                # measured as link Gbps: ÷ what a full link reads in this run's counts
                item = (case, name, sw, d, p[d], r["fair_uplinks"][sw][d], m[d] / r["summary"]["full"], p["capacity"])
                (sat if m[d + "_saturated"] else other).append(item)
    if sat:
        errs = [(m - p) / p for _, _, _, _, p, _, m, _ in sat]
        worst = max(sat, key=lambda it: abs(it[6] - it[4]))
        lines.append(f"- Uplink directions the flow model predicts saturated: {len(sat)}; measured vs "
                     f"predicted {min(errs):+.1%} to {max(errs):+.1%} (target ±5%); worst {worst[0]} {worst[1]} "
                     f"{worst[2]} {worst[3]}: predicted {worst[4]:.1f}, fair share {worst[5]:.1f}, measured "
                     f"{worst[6]:.1f} Gbps.")
    # The same target against the prediction the aggregate is judged by: what fair-sharing flows give.
    fair_sat = [it for it in sat + other if it[5] >= it[7] * SATURATED]
    if fair_sat:
        errs = [(m - f) / f for _, _, _, _, _, f, m, _ in fair_sat]
        outside = [it for it, e in zip(fair_sat, errs) if abs(e) > 0.05]
        lines.append(f"- Uplink directions the fair share predicts saturated: {len(fair_sat)}; measured vs "
                     f"fair share {min(errs):+.1%} to {max(errs):+.1%} (target ±5%); outside it: "
                     + (", ".join(f"{c} {n[0]} {sw} {d} ({(m - f) / f:+.1%})"
                                  for c, n, sw, d, _, f, m, _ in outside) or "none") + ".")
        behind = {(case, name): r["fair_full_hosts_behind"] for case, name, r in rows if "fair_full_hosts_behind" in r}
        if behind:
            lines += tandem_finding([it for it in fair_sat if (it[0], it[1]) in behind], behind)
    both = sat + other
    if both:
        flow_err = statistics.fmean(abs(m - p) / c for _, _, _, _, p, _, m, c in both)
        fair_err = statistics.fmean(abs(m - f) / c for _, _, _, _, _, f, m, c in both)
        lines.append(f"- Every loaded uplink direction ({len(both)}): mean |measured − predicted| = "
                     f"{flow_err:.1%} of capacity for the flow model, {fair_err:.1%} for the fair-share reference.")
    lost = [(case, name[0], u) for case, name, r in rows if (u := undelivered(r)) is not None]
    if lost:
        lines.append("- Bytes that crossed an uplink into a switch of readers only but never reached a node there "
                     "(dropped at a node's link): " + ", ".join(f"{c} {n} {u:.1%}" for c, n, u in lost) + ".")
    for case, by in results.items():
        names = list(by)
        if len(names) >= 2 and names[0].startswith("a") and names[1].startswith("b"):
            a, b = by[names[0]], by[names[1]]
            if b["summary"]["delivered_mean"] and b["predicted_gbps"] and b["fair_gbps"]:
                lines.append(f"- {case}: (a) ÷ (b) measured {a['summary']['delivered_mean'] / b['summary']['delivered_mean']:.2f}×,"
                             f" flow model {a['predicted_gbps'] / b['predicted_gbps']:.2f}×, fair share "
                             f"{a['fair_gbps'] / b['fair_gbps']:.2f}×.")
    return lines + [""]


def plot(results: dict, path: pathlib.Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 11), squeeze=False)
    for row, (key, what) in enumerate((("predicted_uplinks", "flow model"), ("fair_uplinks", "fair-share reference"))):
        for ax, (case, by) in zip(axes[row], results.items()):
            top = 1.0
            for marker, (name, r) in zip("os^", by.items()):
                xs, ys = [], []
                for sw, p in r["predicted_uplinks"].items():
                    for d in ("out", "in"):
                        x = r[key][sw][d]
                        if p[d] > 0.01 * p["capacity"] or x > 0.01 * p["capacity"] or \
                                r["summary"]["uplinks"][sw][d] > 0.01 * p["capacity"]:
                            xs.append(x)
                            ys.append(r["summary"]["uplinks"][sw][d] / r["summary"]["full"])
                label = name + ("" if r["summary"]["valid"] else " (machine CPU > 75% busy: invalid)")
                ax.scatter(xs, ys, marker=marker, label=label)
                top = max([top] + xs + ys)
            ax.plot([0, top * 1.05], [0, top * 1.05], color="grey", linewidth=0.8, label="measured = predicted")
            ax.set_title(f"{case}: per uplink direction vs {what}")
            ax.set_xlabel(f"predicted Gbps ({what})")
            ax.set_ylabel("measured link Gbps (bytes ÷ scale ÷ full)")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def tandem_finding(fair_sat: list[tuple], behind: dict) -> list[str]:
    """The fair-share-saturated uplink directions split by whether their flows also cross a cache host at its
    serving cap (FairShare.full_hosts_behind: two full links in tandem, where TCP's share is not the fair share's)."""
    def err(it) -> float:
        return (it[6] - it[5]) / it[5]
    tandem = [it for it in fair_sat if behind[it[0], it[1]].get(f"up_{it[3]}:{it[2]}")]
    alone = [it for it in fair_sat if it not in tandem]
    lines = []
    if alone:
        errs = sorted(map(err, alone))
        lines.append(f"  - {len(alone)} carry no flow that also crosses a cache host at its serving cap: measured vs fair "
                     f"share {errs[0]:+.1%} to {errs[-1]:+.1%}.")
    if tandem:
        named = []
        for it in tandem:
            case, name, switch, direction = it[:4]
            hosts = behind[case, name][f"up_{direction}:{switch}"]
            named.append(f"{case} {name[0]} {switch} {direction} {err(it):+.1%}, behind {len(hosts)} full host(s)")
        lines.append(f"  - {len(tandem)} also carry flows from cache hosts at their serving cap (two full links in "
                     "tandem): " + ", ".join(named) + ".")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="fabric-netbound:4,chicago:1.5,nebraska:1.5",
                        help="case[:scale],...: bench/topologies/<case>.yaml and <case>-facility.yaml")
    parser.add_argument("--topologies", default=str(ROOT / "bench" / "topologies"),
                        help="where <case>.yaml and <case>-facility.yaml are")
    parser.add_argument("--placements", default="a,b,c", help="which of a, b, c to run")
    parser.add_argument("--scale", type=float, default=1.5, help="Mbit/s per model Gbps, where a case names none")
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--files", type=int, default=1024,
                        help="files per pool (more files: the ring's split closer to its weights)")
    parser.add_argument("--file-kib", type=int, default=512)
    parser.add_argument("--reader-order", choices=READER_ORDERS, default="shuffled",
                        help="each stream's file order: its own (shuffled), or one list from its own offset (rotation, "
                             "the runs before 2026-11-23 17:30 UTC: readers bunch on a slow host)")
    parser.add_argument("--demand", choices=DEMANDS, default="paced",
                        help="how a worker's readGbps is held: the reader paces itself (paced), or its node's link in "
                             "is shaped at it (shaped, the runs before e493285: drops frames that crossed an uplink)")
    add_tcp_arguments(parser)
    parser.add_argument("--queue-ms", type=float, default=QUEUE_MS,
                        help="every shaped link's drop-tail FIFO, in ms of its rate (e2e/fabric.py shape())")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--name", default="fabric", help="report file name (without extension)")
    parser.add_argument("--from-json", help="only write the report (md, png) again from a run's JSON")
    args = parser.parse_args()
    args.scales = {}
    out = pathlib.Path(args.out)
    if args.from_json:
        doc = json.loads(pathlib.Path(args.from_json).read_text())
        args.reader_order = "rotation"      # runs recorded before the option was one
        args.demand = "shaped"
        args.queue_ms = QUEUE_MS            # and before this one
        args.host_queue = "fifo"            # and this one
        for key, value in doc["args"].items():
            if key not in ("from_json", "out", "name"):
                setattr(args, key, value)
        for by in doc["results"].values():
            for r in by.values():
                r["summary"] = summarise(r)
        write(doc["results"], args, doc.get("meta", {}), out)
        return 0
    if not fabric_run_ready(TAG):
        return 2
    started = time.monotonic()
    meta = {"load_start": os.getloadavg()[0], "congestion": args.congestion or host_congestion(), **code_version()}
    results: dict = {}

    def save() -> None:
        meta.update(load_end=os.getloadavg()[0], seconds=round(time.monotonic() - started, 1),
                    finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        doc = {"args": vars(args), "meta": meta,
               "results": {c: {n: {k: v for k, v in r.items() if k != "summary"} for n, r in by.items()}
                           for c, by in results.items()}}
        (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1))

    try:
        for item in args.cases.split(","):
            case, _, scale = item.partition(":")
            scale = float(scale) if scale else args.scale
            args.scales[case] = scale
            topology, pools, fleets, routing = load_case(case, pathlib.Path(args.topologies))
            results[case] = {}
            for name, chosen in placements(topology, pools, fleets, routing).items():
                if name[0] not in args.placements.split(","):
                    continue
                print(f"{case} / {name}: predicted {chosen.predicted_gbps} Gbps ({chosen.bottleneck}); "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
                r = measure_one(topology, pools, fleets, chosen, scale, args, lambda m: print(m, flush=True))
                r["summary"] = summarise(r)
                s = r["summary"]
                print(f"  measured {s['delivered_mean']:.1f} Gbps ({s['ratio']:.3f} of predicted), spread "
                      f"{s['spread']:.1%}, CPU busy ≤ {s['cpu_busy_max']:.0%}", flush=True)
                results[case][name] = r
                save()
    finally:
        down(PREFIX + TAG + "-")
    save()
    write(results, args, meta, out)
    return 0


def from_json(args, write) -> bool:
    """With --from-json: the run's arguments taken back from its JSON and `write(results, args, meta)` called,
    nothing measured; False without it."""
    if not args.from_json:
        return False
    doc = json.loads(pathlib.Path(args.from_json).read_text())
    vars(args).update({k: v for k, v in doc["args"].items() if k not in ("from_json", "out", "name")})
    write(doc["results"], args, doc["meta"])
    return True


def fabric_run_ready(tag: str) -> bool:
    """Whether a fabric run can start (root: network namespaces); if so, a kill unwinds through the fabric's
    teardown as Ctrl-C does, and what a dead run of `tag` left is removed."""
    if os.geteuid() != 0:
        print("the fabric needs root (network namespaces)", file=sys.stderr)
        return False
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    down(PREFIX + tag + "-")
    return True


def add_tcp_arguments(parser) -> None:
    """--congestion and --host-queue, as every emulated-fabric bench takes them."""
    parser.add_argument("--congestion", default="",
                        help="TCP congestion control in every namespace (cubic, bbr, reno); default: the host's")
    parser.add_argument("--host-queue", default="fair", choices=HOST_QUEUES,
                        help="a host's NIC out: fair (a queue per flow, as fq_codel) or fifo (the runs before 2026-11-27)")


def code_version() -> dict:
    """Which planner judged the placements: the commit, and whether its files differed from it."""
    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True, check=False)
        return done.stdout.strip()
    return {"head": git("rev-parse", "--short", "HEAD") or "?",
            "planner_changed": bool(git("status", "--porcelain", "operator/switchyard/planner"))}


def write(results: dict, args, meta: dict, out: pathlib.Path) -> None:
    (out / f"{args.name}.md").write_text(report(results, args, meta))
    if plot(results, out / f"{args.name}.png"):
        with open(out / f"{args.name}.md", "a") as md:
            md.write(f"\n![predicted vs measured per uplink]({args.name}.png)\n")
    if NOTES.exists():
        link = os.path.relpath(NOTES, out.resolve())
        with open(out / f"{args.name}.md", "a") as md:
            md.write("\nNotes on these figures, and the model assumptions they contradict: "
                     f"[fabric-notes.md]({link}) (hand-written; they name the run they quote).\n")
    print(f"wrote {out / args.name}.md")


if __name__ == "__main__":
    sys.exit(main())
