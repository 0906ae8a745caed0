#!/usr/bin/env python3
"""Hot-spot bench (issue 30 item 4): skewed file popularity on the emulated fabric, static ring against hot-file
replicas and replicas with load-fed ring weights.

One placement, switchyard's plan of a small case (bench/topologies/fabric-hotspots: four cache hosts whose
serving caps bind), built as an emulated fabric (e2e/fabric.py) with the real origin and caches from the config
switchyard renders (e2e/fabric_scenario.py), each cache with switchyard's exporter beside it on the loopback its
config sends monitoring to. Every reader stream (one worker, paced at its readGbps) reads a fixed list of files
drawn from a popularity, once, and its completion time is recorded: the analysis ends when its slowest reader
does. Per repeat:

- uniform: every file equally popular, static ring: the baseline the others' delivered Gbps are divided by;
- for each Zipf exponent, on a fabric of its own (caches start empty, so fills are this workload's):
  1. static: every file read from its rendezvous home (today);
  2. hot: the static run's per-file load decides the hot list by the operator's own rule (desired/hotfiles.py
     with desired/xcachepool.py's host budgets), published as the routing ConfigMap's `hot` text and applied
     by each reader with switchyard.routing's Router (planner/hashing.py steps 5-7); the replicas are filled
     first. The load (--hot-source): by default the caches' exporters'
     `switchyard_xcache_hot_file_read_bytes_per_second` (the operator's input), read while the static run
     reads; or what the static run's readers asked of each cache per file (the bench's count). Both lists are
     recorded. (Before c646689, `xrootd.async off`, the exporter counted 0 bytes for the Python client's reads
     through a cache. The f-stream counts what a request asks for, so a read past a file's end counts whole:
     until 6dbce60 the fabric's readers read 1 MiB requests until one came back empty, and at --file-kib 1024
     each read of a file counted twice, the exporters reading 1.6-2.4x what the links carried. They stop at
     the size the open gives now, as fsspec's and uproot's readers do.)
  3. load-fed: the hot list over ring weights lowered by switchyard.desired.ringload's rule, run step by step
     against load measured again: the hot run is the first round; after each round whose reads step a factor
     the readers are routed again by the new weights and read their lists again, until a round steps nothing
     (the factors have stopped changing) or --loadfed-rounds; the last round is the set-up's run. The load the
     rule reads is each cache host's link's bytes sent (the fabric's count, what the caps bind on) while every
     reader still reads; the exporters' served bytes over the same reads are recorded beside it.

Caches are warm before each run (the files its readers will ask each cache for, read through it once); the
origin bytes those fills took, summed over the set-ups of a workload, ÷ the distinct files' bytes, are what
replicas cost. A run whose CPU was more than fabric_bench.CPU_LIMIT busy is invalid.

Writes bench/results/hotspots.md, .json and .png (--out, --name elsewhere). Needs root.

    python3 bench/hotspots_bench.py [--exponents 0.8,1.1,1.4] [--repeats 3] [--reads 30] [--file-kib 1024]

At the defaults a repeat is, on 4 fabrics, the uniform run and per exponent the static and hot runs and up to
6 more for the load-fed set-up (rounds 2-6, and a run at the last factors when they did not settle), ~80 s
each: 7-25 runs, ~12-35 min, so the full run (3 repeats) ~35-100 min on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time
from dataclasses import asdict

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))

from fabric import ORIGIN_IP, PORT, PREFIX, cpu_times, down, namespaces, run as sh  # noqa: E402
from fabric_bench import CPU_LIMIT, PAYLOAD, code_version, fabric_run_ready, from_json, load_case, placements  # noqa: E402
from fabric_scenario import fabric_for, layout, start_exporter, start_servers, warm_caches  # noqa: E402
from headline import about  # noqa: E402
from hotspots_workload import (  # noqa: E402
    bench_load_rules, decide_hot, draw_reads, figures, hot_from_rates, load_fed_rounds, popularity, route,
    steady_rates, warm_pairs, workload_rates,
)
from switchyard.desired.hotfiles import HotFileRules, file_rates  # noqa: E402
from switchyard.desired.ringload import served_counters, served_gbps  # noqa: E402
from switchyard.observe.exporterspec import DEFAULT_METRICS_PORT  # noqa: E402

TAG = "h"
POLL_SECONDS = 0.5      # how often the readers are checked for having ended
# /metrics read from inside a cache's namespace (the project's Python: no curl needed)
SCRAPE = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
          f"'http://127.0.0.1:{DEFAULT_METRICS_PORT}/metrics', timeout=3).read().decode())")


def while_all_read(run: dict) -> list[tuple[float, dict]]:
    """The run's reads of each cache's bytes sent taken while every reader still read (the tail, readers
    ending, is not the load)."""
    return [(t, sent) for t, sent in run["served_bytes"] if t <= min(run["seconds"])]


def window_served_gbps(run: dict, pool: str, scale: float) -> dict:
    """{"fabric": cache -> model Gbps its link sent, "exporter": by its exporter's served-bytes counter (what
    the operator's rule reads)}, both between the first and the last read taken while every reader still read
    (the two are read together)."""
    taken = [(t, texts, sent) for (t, texts), (_, sent) in zip(run["scrapes"], run["served_bytes"])
             if texts and t <= min(run["seconds"])]
    if len(taken) < 2:
        return {"fabric": {}, "exporter": {}}
    (t0, first, sent0), (t1, last, sent1) = taken[0], taken[-1]
    return {"fabric": {c: round((sent1[c] - sent0[c]) * 8 / (t1 - t0) / 1e6 / scale, 3) for c in sent1},
            "exporter": {c: round(g * 1000 / scale, 3) for c, g in
                         served_gbps(served_counters(first, pool), served_counters(last, pool), t1 - t0).items()}}


def hot_rules(text: str) -> HotFileRules:
    """HotFileRules with the fields `text` names ("spread_share=0.15,shrink_share=0.1"), the product's for the rest."""
    given = dict(item.split("=", 1) for item in text.split(",") if item)
    return HotFileRules(**{key: type(getattr(HotFileRules(), key))(value) for key, value in given.items()})


def scrape(fabric, caches: list[str], unanswered: dict | None = None) -> list[str]:
    """The caches' exporters' /metrics texts (those that answered); a cache that did not is counted in
    `unanswered` (cache -> [reads it missed, the last error's last line])."""
    out = []
    for node in caches:
        done = sh("ip", "netns", "exec", fabric.node(node).ns, sys.executable, "-c", SCRAPE, check=False)
        if done.returncode == 0:
            out.append(done.stdout)
        elif unanswered is not None:
            missed = unanswered.setdefault(node, [0, ""])
            missed[0] += 1
            missed[1] = ((done.stderr or "").strip().splitlines() or [""])[-1][:200]
    return out


def one_run(fabric, streams, reads, caches: list[str], readers: list[str], file_bytes: int, scale: float,
            cached: dict, scrape_every: float | None, log) -> dict:
    """Fill what this set-up's readers need and is not cached yet, run every reader's list once, measure.

    cached: what the fabric's caches hold ("pairs": cache -> files) and what filling them took from the
    origin ("origin_bytes"), carried from set-up to set-up of a workload."""
    need = warm_pairs(reads)
    new = {c: files - cached["pairs"].get(c, set()) for c, files in need.items()}
    wan0 = fabric.counters()["wan"][0]
    warm_caches(fabric, new)
    filled = fabric.counters()["wan"][0] - wan0
    for c, files in new.items():
        cached["pairs"].setdefault(c, set()).update(files)
    by_node: dict[str, list] = {}
    for s, stream_reads in zip(streams, reads):
        by_node.setdefault(s.node, []).append(([f"root://{fabric.node(c).ip}:{PORT}/{p}" for c, p in stream_reads],
                                               s.wire_mbit))
    wire0, wan_run0, cpu0 = fabric.wire_counters(), fabric.counters()["wan"][0], cpu_times()
    for node, node_streams in sorted(by_node.items()):
        fabric.start_readers(node, node_streams, once=True)
    t0 = fabric.release_readers()
    scrapes, served, unanswered, next_scrape = [], [], {}, t0 + (scrape_every or 0)
    while any(p.poll() is None for p in fabric.readers):
        time.sleep(POLL_SECONDS)
        if scrape_every and time.time() >= next_scrape:
            scrapes.append((time.time() - t0, scrape(fabric, caches, unanswered)))
            sent = fabric.wire_counters()
            served.append((time.time() - t0, {c: sent[f"host:{c}"][0] for c in caches}))
            next_scrape += scrape_every
    wire1, wan_run1, cpu1 = fabric.wire_counters(), fabric.counters()["wan"][0], cpu_times()
    cached["origin_bytes"] += filled + (wan_run1 - wan_run0)
    ended, failures = [], 0
    for node in by_node:
        report = fabric.reader_report(node)
        ended += report["ended"]
        failures += report["failures"]
    fabric.stop_readers()
    if failures or None in ended:
        raise RuntimeError(f"{failures} reads failed, {ended.count(None)} readers did not finish")
    seconds = [e - t0 for e in ended]
    busy = (cpu1[0] - cpu0[0]) / max(1e-9, cpu1[1] - cpu0[1])
    unique = len({p for stream_reads in reads for _, p in stream_reads}) * file_bytes
    fig = figures(sum(wire1[f"host:{n}"][1] - wire0[f"host:{n}"][1] for n in readers),
                  {c: wire1[f"host:{c}"][0] - wire0[f"host:{c}"][0] for c in caches},
                  cached["origin_bytes"], unique, seconds, scale)
    log(f"    delivered {fig.delivered_gbps:.2f} Gbps, slowest ÷ median {fig.slowest_over_median:.2f}, "
        f"served {fig.served_gbps}, origin ÷ unique (cumulative) {fig.origin_over_unique:.2f}, CPU busy {busy:.0%}")
    return {**asdict(fig), "seconds": [round(s, 2) for s in seconds], "filled_mib": round(filled / 2**20, 1),
            "cpu_busy": round(busy, 3), "headroom_cores": round((1 - busy) * (os.cpu_count() or 1), 2),
            "valid": busy <= CPU_LIMIT, "scrapes": scrapes, "served_bytes": served,
            "exporters_unanswered": unanswered}


def measure_workload(case, exponent: float | None, repeat: int, args, log) -> dict:
    """The set-ups of one workload (a popularity and a repeat's seeds) on a fabric of their own."""
    topology, pools, fleets, routing = case
    chosen = placements(topology, pools, fleets, routing)["a: switchyard"]
    files = [f"/f{i:04d}.root" for i in range(args.files)]
    scale = args.scale
    the = layout(topology, pools, fleets, chosen.placement, dict(chosen.hash_weights), scale, files)
    if any(not s.ring for s in the.streams) or len(chosen.hash_weights) != 1:
        raise RuntimeError("the bench's case must have every reader on one pool's ring")
    (pool_name, ring), = chosen.hash_weights.items()
    ring = dict(ring)
    pool = next(p for p in pools if p.name == pool_name)
    caches, readers = sorted(the.caches), sorted(the.workers)
    shares = popularity(files, exponent, repeat)
    names = [f"{s.fleet}-{s.node}-{i}" for i, s in enumerate(the.streams)]   # each reader's identity, as a pod's
    drawn = [draw_reads(shares, args.reads, f"{repeat}/{name}") for name in names]
    switch_of = {h.name: h.switch for h in topology.hosts}
    out = {"exponent": exponent, "repeat": repeat, "ring": ring, "readers": len(names),
           "caps_gbps": {c: min(pool.body.planned_serve_gbps, switch_host(topology, c).nic_gbps) for c in caches},
           "runs": {}}
    with fabric_for(TAG, topology, the, scale) as fabric:
        addresses = {c: f"{fabric.node(c).ip}:{PORT}" for c in caches}
        start_servers(fabric, the, pools, args.file_kib << 10,
                      beside_cache=lambda node, p, data, meta: start_exporter(fabric, node, p, switch_of[node],
                                                                              data, meta))
        fabric.shape_links()
        cached = {"pairs": {}, "origin_bytes": 0}

        def setup(name: str, weights: dict, hot_text: str | None, scrape_every: float | None,
                  routed: list | None = None) -> dict:
            log(f"  {name}")
            reads = [route(d, weights, addresses, n, hot_text, f"{ORIGIN_IP}:{PORT}") for d, n in zip(drawn, names)]
            if routed is not None:
                routed.extend(reads)
            return one_run(fabric, the.streams, reads, caches, readers, args.file_kib << 10, scale, cached,
                           scrape_every, log)

        static_reads: list = []
        static = setup("static ring", ring, None, None if exponent is None else args.scrape_seconds, static_reads)
        out["runs"]["static"] = static
        if exponent is not None:
            answered = [(t, texts) for t, texts in static["scrapes"] if texts]
            # the last read while every reader still read (else the first): the load at its full
            taken = [(t, texts) for t, texts in answered if t <= min(static["seconds"])] or answered[:1]
            if not taken and args.hot_source == "exporter":
                raise RuntimeError("no exporter answered during the static run")
            at, texts = taken[-1] if taken else (float("nan"), [])
            by_workload = workload_rates(static_reads, args.file_kib << 10, max(static["seconds"]), scale)
            rules = hot_rules(args.hot_rules)
            served = window_served_gbps(static, pool_name, scale)["exporter"] or None
            out["hot_served_gbps"] = served
            lists = {"exporter": decide_hot(texts, pool_name, pool.body, ring, topology.hosts, scale, at, rules,
                                            served) if texts else ([], None),
                     "workload": hot_from_rates(by_workload, pool_name, pool.body, ring, topology.hosts, rules)}
            hot, hot_text = lists[args.hot_source]
            out["hot_source"], out["hot_read_at_seconds"] = args.hot_source, round(at, 1)
            out["hot_files"] = hot
            out["hot_files_other"] = {k: v[0] for k, v in lists.items() if k != args.hot_source}
            out["hot_rates_gbps"] = top_rates(texts, pool_name, scale, at, by_workload)
            log(f"  hot list from the {args.hot_source} (exporters read at {at:.0f} s): {hot}")
            log(f"  hottest paths, model Gbps: {dict(list(out['hot_rates_gbps'].items())[:5])}")
            out["runs"]["hot"] = hot_run = setup("hot-file replicas", ring, hot_text, args.scrape_seconds)
            if "loadfed" in args.setups:
                out.update(load_fed(ring, hot_run, hot_text, out["caps_gbps"], pool_name, args, log,
                                    lambda name, weights: setup(name, weights, hot_text, args.scrape_seconds)))
                out["runs"]["loadfed"] = out.pop("loadfed_run")
        for r in out["runs"].values():
            r.pop("scrapes", None)
            r.pop("served_bytes", None)
    left = namespaces(PREFIX + TAG + "-")
    if left:
        raise RuntimeError(f"teardown left {left}")
    return out


def load_fed(ring: dict, hot_run: dict, hot_text: str, caps_gbps: dict, pool: str, args, log, setup) -> dict:
    """Set-up 3: switchyard.desired.ringload's rule run round by round (hotspots_workload.load_fed_rounds), the
    hot run its first round; the readers routed again by each step's weights and measured again."""
    scale, rounds_run = args.scale, []

    def measure(weights: dict):
        run = hot_run if not rounds_run else setup(f"replicas, load-fed round {len(rounds_run) + 1}", weights)
        rounds_run.append(run)
        return while_all_read(run), run

    caps_real = {c: g * scale / 1000 for c, g in caps_gbps.items()}
    rounds, settled = load_fed_rounds(ring, caps_real, measure, bench_load_rules(args.scrape_seconds),
                                      args.loadfed_rounds)
    final = {c: w * rounds[-1].factors.get(c, 1.0) for c, w in ring.items()}
    last = rounds[-1].run if settled else setup(f"replicas, load-fed weights after {len(rounds)} rounds (not settled)",
                                                final)
    log(f"  load-fed: {'settled' if settled else 'not settled'} after {len(rounds)} rounds, factors {rounds[-1].factors}")
    return {"loadfed_ring": final, "loadfed_settled": settled, "loadfed_run": last,
            "loadfed_rounds": [{"factors_read_by": {c: round(r.weights[c] / ring[c], 6) for c in ring},
                                "factors_after": r.factors, "served_gbps": r.run["served_gbps"],
                                "window_served_gbps": window_served_gbps(r.run, pool, scale),
                                "exporters_unanswered": r.run.get("exporters_unanswered", {}),
                                "delivered_gbps": r.run["delivered_gbps"], "valid": r.run["valid"]}
                               for r in rounds]}


def top_rates(texts: list[str], pool: str, scale: float, seconds: float, by_workload: dict, shown: int = 12) -> dict:
    """The hottest paths by the exporters, model Gbps summed over the caches: as read, as steady (what the hot
    list is decided on) and what the static run's readers asked of them on average (the bench's own count)."""
    raw: dict[str, float] = {}
    for by_path in file_rates(texts, pool).values():
        for path, gbps in by_path.items():
            raw[path] = raw.get(path, 0.0) + gbps * 1000 / scale
    seen = steady_rates({"all": raw}, seconds)["all"]
    asked = {}
    for by_path in by_workload.values():
        for path, gbps in by_path.items():
            asked[path] = asked.get(path, 0.0) + gbps
    return {p: {"raw": round(raw[p], 3), "steady": round(seen[p], 3), "workload": round(asked.get(p, 0.0), 3)}
            for p in sorted(raw, key=lambda p: -raw[p])[:shown]}


def switch_host(topology, name: str):
    return next(h for h in topology.hosts if h.name == name)


# ---------------------------------------------------------------- report

SETUPS = (("static", "static ring"), ("hot", "hot-file replicas"), ("loadfed", "replicas, load-fed weights"))


def summarise(results: list[dict]) -> dict:
    """Per (exponent, set-up): each repeat's figures against its repeat's uniform run."""
    uniform = {r["repeat"]: r["runs"]["static"] for r in results if r["exponent"] is None}
    rows: dict = {}
    for r in results:
        base = uniform.get(r["repeat"])
        for key, run in r["runs"].items():
            caps = r["caps_gbps"]
            rows.setdefault((r["exponent"], key), []).append({
                "repeat": r["repeat"],
                "vs_uniform": run["delivered_gbps"] / base["delivered_gbps"] if base else None,
                "slowest_over_median": run["slowest_over_median"],
                "busiest_over_cap": max(run["served_gbps"][c] / caps[c] for c in caps),
                "served": {c: f"{run['served_gbps'][c]:.1f}/{caps[c]:g}" for c in caps},
                "origin_over_unique": run["origin_over_unique"],
                "origin_payload_over_unique": run["origin_over_unique"] * PAYLOAD,
                "origin_over_static": run["origin_over_unique"] / r["runs"]["static"]["origin_over_unique"],
                "cpu_busy": run["cpu_busy"],
                "headroom_cores": run["headroom_cores"], "valid": run["valid"],
                "delivered_gbps": run["delivered_gbps"]})
    return rows


def _span(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    mean = statistics.fmean(values)
    return f"{mean:.2f}" if len(values) == 1 else f"{mean:.2f} ({min(values):.2f}–{max(values):.2f})"


def report(results: list[dict], args, meta: dict) -> str:
    rows = summarise(results)
    lines = ["# Hot spots: skewed popularity, static ring against hot-file replicas", "",
             *about("aggregate delivered Gbps ÷ the uniform-popularity run's, slowest reader ÷ median reader, each "
                    "cache's served Gbps against its cap and origin bytes ÷ unique bytes, for Zipf popularity on "
                    "an emulated fabric with real xrootd caches, per set-up (static ring, hot-file replicas)",
                    "`make bench-hotspots` (`bench/hotspots_bench.py`, needs root)",
                    f"{meta.get('finished', 'not recorded')}, commit {meta.get('head', 'not recorded')}"),
             f"Case {args.case} at {args.scale:g} Mbit/s per model Gbps: {results[0]['readers'] if results else 0} "
             f"readers, each reading {args.reads} files of {args.file_kib} KiB drawn from {args.files} files, once, "
             f"paced at its workers' readGbps. Repeats: {args.repeats}. Gbps are model Gbps (bytes ÷ the scale), "
             "counted by the shapers (frames). Delivered: bytes into the readers' nodes ÷ the time the last reader "
             "took. Served: a cache's bytes out ÷ that time, against its cap (serveGbps less headroom, capped by its "
             "NIC). Origin ÷ unique: what the origin sent to fill the caches for this workload, counting the "
             "set-ups before it on the same fabric (the replicas' fills are the hot set-up's extra), ÷ the distinct "
             "files read (the origin's interface bytes: a static ring, one copy of each file, reads a little above 1; "
             "origin ÷ static ring's is what the replicas added). Origin payload ÷ unique: the same × 1448/1514, the "
             "data a full 1500-MTU frame carries (an upper bound: shorter frames carry less), the bytes the "
             "acceptance counts; the static ring's 1.05 on the interface is that framing, each file sent once."
             f" A run with more than {CPU_LIMIT:.0%} of all cores busy is invalid (marked).",
             "",
             "The hot list (--hot-source; the other source's list is shown beside it): from the exporter, the "
             "caches' exporters (switchyard exporter beside each cache, fed by its xrootd's f-stream) are read "
             "while every reader of the static run still reads and their decaying rates (τ 60 s) divided by "
             "1 − e^(−t/τ), so the list is the one the operator decides once the load has lasted; from the "
             "workload, each cache's files at what the static run's readers asked of them over the run. Either "
             "way desired/hotfiles.py decides the list with desired/xcachepool.py's host budgets, each host's "
             "serve (from the exporter) its served-bytes counter between the first and the last read while every "
             "reader still read, as the operator's ring-weight rule keeps it, and the readers apply it with "
             "switchyard.routing's Router. Every reader process starts reading at one moment (the fabric's start "
             "line), and completion times count from it.",
             "",
             "Set-up 3 (replicas with load-fed weights): switchyard.desired.ringload's rule (the product's bands, "
             "steps and reads; settled 2.5 reads after a step, as each round reads by one ring from its start) "
             "run round by round: the hot run is the first round, and after a round whose reads step a factor "
             "the readers are routed by the new weights and read their lists again, until a round steps nothing "
             f"or {args.loadfed_rounds} rounds. Its row is the last round (or, when the factors had not "
             "settled, a run at the last factors). The rule reads each cache host's link bytes while every "
             "reader still reads; the rounds are listed below with the exporters' served bytes beside.",
             "",
             "| popularity | set-up | delivered ÷ uniform | slowest ÷ median | busiest cache ÷ cap "
             "| served Gbps / cap per cache (last repeat) | origin ÷ unique | origin payload ÷ unique "
             "| origin ÷ static ring's | CPU busy (max) | headroom cores (min) | valid |",
             "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for (exponent, key), reps in sorted(rows.items(), key=lambda kv: (kv[0][0] or 0, [s for s, _ in SETUPS].index(kv[0][1]))):
        label = "uniform" if exponent is None else f"Zipf {exponent:g}"
        lines.append(f"| {label} | {dict(SETUPS)[key]} | {_span(r['vs_uniform'] for r in reps)} "
                     f"| {_span(r['slowest_over_median'] for r in reps)} | {_span(r['busiest_over_cap'] for r in reps)} "
                     f"| {', '.join(f'{c} {v}' for c, v in reps[-1]['served'].items())} "
                     f"| {_span(r['origin_over_unique'] for r in reps)} "
                     f"| {_span(r['origin_payload_over_unique'] for r in reps)} "
                     f"| {_span(r['origin_over_static'] for r in reps)} "
                     f"| {max(r['cpu_busy'] for r in reps):.0%} "
                     f"| {min(r['headroom_cores'] for r in reps):.2f} "
                     f"| {sum(r['valid'] for r in reps)}/{len(reps)} |")
    def listed(hot: list) -> str:
        return ", ".join(f"{h['path']}×{h['replicas']}" for h in hot) or "none"

    lines += ["", "Hot lists decided (per workload; the hottest paths as model Gbps: the exporters' rate as read, "
              "as steady, and what the static run's readers asked of the file on average):", ""]
    for r in results:
        if r["exponent"] is not None:
            lines.append(f"- Zipf {r['exponent']:g}, repeat {r['repeat']}, from the {r.get('hot_source', '?')} "
                         f"(exporters read at {r.get('hot_read_at_seconds', '?')} s): {listed(r.get('hot_files', []))}; "
                         + "; ".join(f"the {k} would list {listed(v)}" for k, v in r.get("hot_files_other", {}).items())
                         + "; hottest: " + ", ".join(f"{p} {v['raw']:.1f}/{v['steady']:.1f}/{v.get('workload', float('nan')):.1f}"
                                                      for p, v in list(r.get("hot_rates_gbps", {}).items())[:5]))
    rounds = [r for r in results if r.get("loadfed_rounds")]
    if rounds:
        lines += ["", "Load-fed rounds (factors the round read by → after it; served model Gbps per cache while "
                  "every reader read, the fabric's link bytes / the exporter's served-bytes counter; delivered):", ""]
        for r in rounds:
            lines.append(f"- Zipf {r['exponent']:g}, repeat {r['repeat']}: "
                         f"{'settled' if r.get('loadfed_settled') else 'not settled'} after {len(r['loadfed_rounds'])} rounds")
            for i, step in enumerate(r["loadfed_rounds"], 1):
                window = step.get("window_served_gbps", {})
                fabric, exporter = window.get("fabric", {}), window.get("exporter", {})
                lowered = {c: f for c, f in step["factors_read_by"].items() if f != 1.0}
                lines.append(f"  - round {i}: {lowered or 'none'} → {step['factors_after'] or 'none'}; "
                             + ", ".join(f"{c} {fabric.get(c, float('nan')):.1f}/{exporter.get(c, float('nan')):.1f}"
                                         for c in step["served_gbps"])
                             + f"; delivered {step['delivered_gbps']:.2f}{'' if step['valid'] else ' (invalid: CPU)'}"
                             + "".join(f"; {c}'s exporter did not answer {n} reads ({why})"
                                       for c, (n, why) in sorted(step.get("exporters_unanswered", {}).items())))
    lines += ["", "Acceptance (issue 30, Zipf 1.1): delivered ≥ 0.95 of uniform, slowest ≤ 1.25 × median, "
              "origin ≤ 1.1 × unique (payload).", ""]
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: pathlib.Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = summarise(results)
    exponents = sorted({e for e, _ in rows if e is not None})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, (key, title, line) in zip(axes, (("vs_uniform", "delivered ÷ uniform run", 0.95),
                                              ("slowest_over_median", "slowest ÷ median reader", 1.25),
                                              ("origin_over_unique", "origin bytes ÷ unique bytes", 1.1))):
        for offset, (setup, label) in zip((-0.02, 0.0, 0.02), SETUPS):   # side by side at each exponent
            xs = [e for e in exponents if (e, setup) in rows]
            if xs:
                ax.errorbar([e + offset for e in xs], [statistics.fmean(r[key] for r in rows[e, setup]) for e in xs],
                            yerr=[[statistics.fmean(r[key] for r in rows[e, setup]) - min(r[key] for r in rows[e, setup])
                                   for e in xs],
                                  [max(r[key] for r in rows[e, setup]) - statistics.fmean(r[key] for r in rows[e, setup])
                                   for e in xs]], marker="o", capsize=3, label=label)
        ax.axhline(line, color="grey", linewidth=0.8, linestyle="--", label="issue 30's bound")
        ax.set_title(title)
        ax.set_xlabel("Zipf exponent")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def write(results: list[dict], args, meta: dict, out: pathlib.Path) -> None:
    (out / f"{args.name}.md").write_text(report(results, args, meta))
    if plot(results, out / f"{args.name}.png"):
        with open(out / f"{args.name}.md", "a") as md:
            md.write(f"\n![delivered, completion and origin bytes per set-up]({args.name}.png)\n")
    print(f"wrote {out / args.name}.md")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", default="fabric-hotspots", help="bench/topologies/<case>.yaml and -facility.yaml")
    parser.add_argument("--scale", type=float, default=2.0,
                        help="Mbit/s per model Gbps (2: the smoke runs' CPU stayed under the limit on 2 cores; at 4 "
                             "it did not, on a machine shared with other work)")
    parser.add_argument("--exponents", default="0.8,1.1,1.4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--files", type=int, default=256,
                        help="distinct files the popularity ranks (more: the uniform run's split over the ring "
                             "closer to its weights)")
    parser.add_argument("--reads", type=int, default=30,
                        help="files each reader reads (its fixed workload; ~80 s a run at the defaults)")
    parser.add_argument("--file-kib", type=int, default=1024)
    parser.add_argument("--setups", default="static,hot,loadfed", help="which set-ups (static always runs)")
    parser.add_argument("--hot-source", choices=("exporter", "workload"), default="exporter",
                        help="what the hot list is decided from: the caches' exporters' per-file rates (the "
                             "operator's input; default), or the bench's count of what the static run's readers "
                             "asked of each cache")
    parser.add_argument("--hot-rules", default="",
                        help="desired/hotfiles.py HotFileRules fields to change, e.g. spread_share=0.15,shrink_share=0.1")
    parser.add_argument("--loadfed-rounds", type=int, default=6,
                        help="set-up 3's bound on rounds (the hot run the first): the rule's 5 steps to its floor "
                             "and one that steps nothing")
    parser.add_argument("--scrape-seconds", type=float, default=5.0, help="how often the exporters are read")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--name", default="hotspots")
    parser.add_argument("--from-json", help="only write the report (md, png) again from a run's JSON")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if from_json(args, lambda results, a, meta: write(results, a, meta, out)):
        return 0
    if not fabric_run_ready(TAG):
        return 2
    case = load_case(args.case)
    started = time.monotonic()
    meta = {"load_start": os.getloadavg()[0], **code_version()}
    results: list[dict] = []

    def save() -> None:
        meta.update(load_end=os.getloadavg()[0], seconds=round(time.monotonic() - started, 1),
                    finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        (out / f"{args.name}.json").write_text(json.dumps({"args": vars(args), "meta": meta, "results": results},
                                                          indent=1))

    exponents = [float(e) for e in args.exponents.split(",") if e]
    try:
        for repeat in range(args.repeats):
            for exponent in [None, *exponents]:
                print(f"repeat {repeat}, {'uniform' if exponent is None else f'Zipf {exponent:g}'}: "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
                results.append(measure_workload(case, exponent, repeat, args, lambda m: print(m, flush=True)))
                save()
    finally:
        down(PREFIX + TAG + "-")
    save()
    write(results, args, meta, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
