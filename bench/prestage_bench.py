#!/usr/bin/env python3
"""Prestage beside analysis on the emulated fabric (issue 30's prestage acceptance): the analysis' WAN Gbps ÷ its
fair share of what the prestage's WAN share leaves, and 0 origin bytes for a pass over the prestaged files.

One placement, switchyard's plan of bench/topologies/fabric-prestage (two cache hosts on the ring, eight hashed
readers, a WAN far narrower than anything inside), built as an emulated fabric (e2e/fabric.py) with the real
origin behind the WAN link shaped to W = wanGbps x scale and the real caches from the config switchyard renders
(e2e/fabric_scenario.py). Per repeat, on a fabric of its own (the caches start empty):

1. `switchyard prestage`, the runner a CachePrestage's Job runs, starts as a process in the first cache host's
   namespace, with the Job's argv and environment as builders/prestage.py makes them (wanShare --share of
   wanGbps W, so --gbps share x W; the ring file the pool's ring at the fabric's addresses; the journal and the
   termination message in the run's directory instead of the pod's volumes) over the dataset's files;
2. at the same time the fleet's readers (fabric_scenario.layout: a stream per worker, paced at its readGbps, on
   the worker nodes) read files no cache holds, each stream a list of its own read once through the ring's
   home of each file: every byte they read crosses the WAN;
3. windows while both read (fabric_scenario.measure): the WAN's bytes (the origin's link out, the shapers'
   counters); a sampler beside them takes every second the same counters, the readers' links in, the runner's
   own read bytes (its /metrics) and what the caches hold of the dataset and of the analysis' files
   (cached_bytes: what each cache fetched of each set, which a cache's one connection to the origin mixes on
   the wire). A window's split of the WAN is what the caches fetched of each set within it (window_figures):
   the readers' links in lag the analysis' share, since XCache fetches an opened file to its end ahead of its
   reader (in df00291's run the readers received 184 MB while the caches fetched 632 MB of their files);
4. when the runner has ended, the links unshaped, a worker node reads every prestaged file through its ring
   home once: the origin's link out (interface bytes) over that pass is what it fetched.

The model: the runner is paced to its share (prestage/pace.py: share x W in total), so the rest of the WAN is
the analysis': its fair share is W x (1 - share), or its demand when that is less (the case's readers ask more).
What the pace holds: XCache prefetches every file a reader opens to the file's end (XrdPfc registers a file
for prefetch at its open; pfc.prefetch bounds only the blocks in flight), so the runner charges a file's whole
size to the pace before it opens it (prestage/runner.py; until df00291 it paced its reads, which set only when
the next file opened: 64 MiB files took the WAN at 1.56-2.01 of the budget). The per-second series shows what
that does on the WAN; --file-mib sets the file size.
A window with more than fabric_bench.CPU_LIMIT of all cores busy is invalid. The restart part of the acceptance
(a runner restarted mid-prestage fetches no finished file again) is operator/tests/integration/
test_prestage_xrootd.py's.

Writes bench/results/prestage.md and .json (--out, --name elsewhere). Needs root.

    python3 bench/prestage_bench.py [--repeats 3] [--windows 3] [--window 20] [--warmup 10] [--scale 2]

At the defaults a repeat takes ~2.5-3 min (fabric and origin ~10 s; the runner, started with the readers,
reads its 9 files of 64 MiB at its pace for ~2-2.5 min, the 2 s + warm-up + 3 windows of 20 s inside that; the
pass ~10 s): the full run (3 repeats) ~8-9 min on an idle 2-core machine. A smoke run:
--repeats 1 --windows 2 --window 20 --warmup 10 --out /tmp/prestage (~2 min).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import statistics
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))

from fabric import ORIGIN_IP, PORT, PREFIX, down, host_congestion, namespaces, run as sh  # noqa: E402
from fabric_bench import CPU_LIMIT, code_version, fabric_run_ready, from_json, load_case, placements  # noqa: E402
from fabric_reader import CREDIT, WIRE_PER_PAYLOAD  # noqa: E402
from fabric_scenario import Layout, fabric_for, layout, measure, pool_body, start_servers  # noqa: E402
from headline import about  # noqa: E402
from switchyard.api.prestage import CachePrestageSpec  # noqa: E402
from switchyard.builders.prestage import URLS_DIR, URLS_KEY, build_prestage  # noqa: E402
from switchyard.desired import validate  # noqa: E402
from switchyard.planner.flow import ring_weights  # noqa: E402
from switchyard.planner.hashing import home  # noqa: E402
from switchyard.prestage import METRICS_PORT, READ_BYTES, parse_report  # noqa: E402
from switchyard.routing import RING_FILE_ENV, ring_entry  # noqa: E402
from switchyard.xrootd.config import namespace_path  # noqa: E402

TAG = "p"
CASE = "fabric-prestage"
ACCEPTED = 0.9            # issue 30: the analysis keeps at least this much of its fair share
MARGIN = 1.25             # each list's bytes over what its pace reads in the measured time: no list runs out
PASS_OVERHEAD = 64 * 1024  # the pass's origin bytes below which none was file data (opens, stats: one block is 1 MiB)
HEADROOM_SECONDS = 2      # fabric_scenario.measure's CPU reading before the readers start
SAMPLE_SECONDS = 1.0      # the series beside the windows: what each window's average is made of


# ---------------------------------------------------------------- the set-up (pure)

def measured_seconds(warmup: float, windows: int, window: float) -> float:
    """How long the readers read in a repeat: measure()'s CPU reading, the warm-up, the windows (and the
    counters' reads between them, ~1 s each)."""
    return HEADROOM_SECONDS + warmup + windows * (window + 1.0)


def files_for(mbit: float, seconds: float, file_bytes: int) -> int:
    """Files a reader paced at `mbit` (payload) cannot finish within `seconds` (and its pace's credit)."""
    return math.ceil(mbit * 1e6 / 8 * (seconds + CREDIT) * MARGIN / file_bytes)


def analysis_layout(the: Layout, ring: dict[str, float], seconds: float, file_bytes: int) -> Layout:
    """The layout's streams, each with files of its own (named a<stream>-<n>), read through the ring's home of
    each: enough for its pace over `seconds`, so no stream reads a file twice and every read is a miss."""
    streams = []
    for i, s in enumerate(the.streams):
        own = [f"/a{i:02d}-{n:04d}.root" for n in range(files_for(s.wire_mbit, seconds, file_bytes))]
        streams.append(dataclasses.replace(s, urls=[(home(f, ring), f) for f in own]))
    return dataclasses.replace(the, streams=streams, warm={c: set() for c in the.caches})


def dataset(budget_mbit: float, seconds: float, file_bytes: int, parallel: int, lead_bytes: int) -> list[str]:
    """The prestage's files: more than its pace reads over `seconds`, and what the caches' prefetch holds ahead of
    the runner's reads (`lead_bytes` per file read at once), so it still fetches when the last window ends."""
    lead = math.ceil(parallel * min(lead_bytes, file_bytes) * MARGIN / file_bytes)
    return [f"/p{n:04d}.root" for n in range(files_for(budget_mbit, seconds, file_bytes) + lead)]


def prefetch_bytes(pool) -> int:
    """What a cache of the pool reads ahead of a reader in a file (pfc.prefetch blocks of pfc.blocksize)."""
    return pool.body.pfc.prefetch_blocks * pool.body.pfc.block_size_kib * 1024


def runner_job(share: float, wan_gbps: float, pool: str, port: int, parallel: int) -> dict:
    """The Job the operator builds for a CachePrestage of `share` on a facility of WAN `wan_gbps` (real Gbps)."""
    spec, error = validate(CachePrestageSpec, {"poolRef": {"name": pool}, "urls": ["root://origin//set"],
                                               "wanShare": share, "parallel": parallel})
    if spec is None:
        raise ValueError(error)
    gbps = round(share * wan_gbps, 6)   # desired/prestage.py's pace
    return build_prestage("bench", "default", spec, pool=pool, pool_port=port, origin_mode="fixed",
                          ring_fleet="vine", image="switchyard-xcache", gbps=gbps, uid=1094)[-1]


def runner_argv(job: dict, switchyard: str, urls: str, ring: str, journal: str, termination: str) -> list[str]:
    """The Job's container as a process: its environment (`env K=V ...`) and command, the files its pod mounts
    given as the run's own (the URL list, the ring file, the journal's and the termination message's paths)."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    env[RING_FILE_ENV] = ring
    command = [switchyard if arg == "switchyard" else urls if arg == f"{URLS_DIR}/{URLS_KEY}" else arg
               for arg in container["command"]]
    return ["env", *(f"{k}={v}" for k, v in env.items()), *command, "--journal", journal,
            "--termination-log", termination]


def ring_text(ring: dict[str, float], addresses: dict[str, str]) -> str:
    """The routing ConfigMap's ring key at the fabric's addresses (one entry a line, as the fleets' is)."""
    return "".join(f"{ring_entry(name, f'{addresses[name]}:{PORT}', weight)}\n" for name, weight in sorted(ring.items()))


# ---------------------------------------------------------------- the series beside the windows

def cached_bytes(namespaces: list[str]) -> dict[str, int]:
    """What the caches hold of the dataset's files ("p") and of the analysis' ("a"): the blocks allocated to the
    data files their namespaces (oss.localroot: symlinks into the data space) name. XrdPfc writes a file block by
    block as its fetches arrive, so these grow with what each cache fetched of each set, whichever reader asked:
    the split of the WAN the shapers cannot make (a cache's one connection to the origin carries both)."""
    held = {"p": 0, "a": 0}
    for namespace in namespaces:
        try:
            entries = list(os.scandir(namespace))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".root") and entry.name[:1] in held:
                try:
                    held[entry.name[0]] += os.stat(entry.path).st_blocks * 512
                except OSError:
                    continue
    return held


class Sampler(threading.Thread):
    """Every SAMPLE_SECONDS until stopped: (seconds, the WAN's bytes out of the origin, the readers' bytes in, both
    as the shapers sent them, the runner's bytes read from its /metrics (-1 when it did not answer), and the bytes
    the caches hold of the dataset and of the analysis' files (cached_bytes))."""

    def __init__(self, fabric, workers: list[str], runner_ns: str, namespaces: list[str]) -> None:
        super().__init__(daemon=True)
        self.fabric, self.workers, self.runner_ns, self.namespaces = fabric, workers, runner_ns, namespaces
        self.series: list[tuple[float, int, int, int, int, int]] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def runner_read(self) -> int:
        done = sh("ip", "netns", "exec", self.runner_ns, "curl", "-s", "--max-time", "0.5",
                  f"http://127.0.0.1:{METRICS_PORT}/metrics", check=False)
        return next((int(float(line.split()[-1])) for line in done.stdout.splitlines()
                     if line.startswith(READ_BYTES + " ")), -1)

    def run(self) -> None:
        while not self.stop.wait(max(0.0, self.t0 + (len(self.series) + 1) * SAMPLE_SECONDS - time.monotonic())):
            wire = self.fabric.wire_counters()
            held = cached_bytes(self.namespaces)
            self.series.append((round(time.monotonic() - self.t0, 3), wire["wan"][0],
                                sum(wire[f"host:{n}"][1] for n in self.workers), self.runner_read(),
                                held["p"], held["a"]))


def series_rates(series: list, model: dict) -> list[dict]:
    """Each interval of the series as model Gbps ÷ the prestage's budget: the WAN less the readers' in (wire), the
    runner's own reads and what the caches wrote of the dataset (payload, counted as full frames carry it); and
    what they wrote of the analysis' files ÷ its fair share."""
    budget = model["wan_gbps"] * model["share"]
    fair = fair_share(model["wan_gbps"], model["share"], model["demand_gbps"])
    out = []
    for (t0, wan0, in0, read0, p0, a0), (t1, wan1, in1, read1, p1, a1) in zip(series, series[1:]):
        gbps = 8 / (t1 - t0) / 1e6 / model["scale"]
        prestage = ((wan1 - wan0) - (in1 - in0)) * gbps
        runner = (read1 - read0) * WIRE_PER_PAYLOAD * gbps if read0 >= 0 and read1 >= 0 else None
        out.append({"t": t1, "prestage_over_budget": round(prestage / budget, 3),
                    "runner_over_budget": None if runner is None else round(runner / budget, 3),
                    "dataset_cached_over_budget": round((p1 - p0) * WIRE_PER_PAYLOAD * gbps / budget, 3),
                    "analysis_cached_over_fair": round((a1 - a0) * WIRE_PER_PAYLOAD * gbps / fair, 3)})
    return out


def series_totals(series: list) -> dict:
    """Over the series: the WAN's bytes (wire), the readers' (wire), the runner's reads, and what the caches came
    to hold of the dataset and of the analysis' files (payload)."""
    if len(series) < 2:
        return {}
    (_, wan0, in0, read0, p0, a0), (t1, wan1, in1, read1, p1, a1) = series[0], series[-1]
    return {"seconds": round(t1 - series[0][0], 1), "wan": wan1 - wan0, "readers_in": in1 - in0,
            "runner_read": read1 - read0 if read0 >= 0 and read1 >= 0 else None,
            "dataset_cached": p1 - p0, "analysis_cached": a1 - a0}


def spread(values: list[float]) -> dict:
    """p10, median, p90 and max of a series (empty: {})."""
    if len(values) < 2:
        return {}
    deciles = statistics.quantiles(values, n=10, method="inclusive")   # within the values, however few
    return {"p10": round(deciles[0], 3), "p50": round(statistics.median(values), 3), "p90": round(deciles[-1], 3),
            "max": round(max(values), 3)}


# ---------------------------------------------------------------- the figures (pure)

def fair_share(wan_gbps: float, share: float, demand_gbps: float) -> float:
    """The analysis' fair share of the WAN: what the prestage's share leaves, or its demand when less."""
    return min(demand_gbps, wan_gbps * (1 - share))


def fetched_in(series: list, span: list[float] | None) -> dict | None:
    """What the caches fetched of the dataset ("p") and of the analysis' files ("a") over a window (payload bytes)
    and the seconds between the series' first and last samples inside its span; None without two of them."""
    if not span:
        return None
    inside = [s for s in series if span[0] <= s[0] <= span[1]]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    (t0, *_, p0, a0), (t1, *_, p1, a1) = inside[0], inside[-1]
    return {"seconds": round(t1 - t0, 3), "p": p1 - p0, "a": a1 - a0}


def window_figures(w: dict, model: dict, series: list | None = None) -> dict:
    """One window's model Gbps (wire Mbit/s ÷ scale). The WAN's split between the two sets is what the caches
    fetched of each (fetched_in, payload counted as full frames carry it): the origin sends a cache both on one
    connection, and XCache fetches an opened file to its end ahead of its reader, so the readers' links in (what
    they received) lag what the analysis took of the WAN. The analysis' share and the prestage's are those
    fetches; without the series (a run before they were kept per window) the readers' links in stand for the
    analysis, and the prestage is the WAN's rest."""
    scale = model["scale"]
    wan, received = w["wan_mbit"] / scale, w["analysis_mbit"] / scale
    fetched = fetched_in(series or [], w.get("span"))
    if fetched:
        per = WIRE_PER_PAYLOAD * 8 / fetched["seconds"] / 1e6 / scale
        analysis, prestage = fetched["a"] * per, fetched["p"] * per
    else:
        analysis, prestage = received, wan - received
    fair = fair_share(model["wan_gbps"], model["share"], model["demand_gbps"])
    budget = model["wan_gbps"] * model["share"]
    return {"wan_gbps": round(wan, 3), "analysis_gbps": round(analysis, 3), "prestage_gbps": round(prestage, 3),
            "received_gbps": round(received, 3), "by_fetches": bool(fetched),
            "fair_gbps": round(fair, 3), "analysis_over_fair": round(analysis / fair, 3),
            "prestage_over_budget": round(prestage / budget, 3), "wan_used": round(wan / model["wan_gbps"], 3),
            "cpu_busy": w["cpu_busy"], "valid": w["cpu_busy"] <= CPU_LIMIT}


def summarise(run: dict) -> dict:
    """A repeat's windows and its verdicts: the analysis ÷ fair share over the valid windows (met when every
    valid window keeps ACCEPTED), the prestage ÷ budget, and the pass's origin bytes."""
    windows = [window_figures(w, run["model"], run.get("series")) for w in run["windows"]]
    valid = [w for w in windows if w["valid"]]
    use = valid or windows
    ratios = [w["analysis_over_fair"] for w in use]
    progress = run.get("runner_report") or {}
    seconds = series_rates(run.get("series", []), run["model"])
    return {"windows": windows, "valid_windows": len(valid),
            "per_second_prestage": spread([s["prestage_over_budget"] for s in seconds]),
            "per_second_runner": spread([s["runner_over_budget"] for s in seconds
                                         if s["runner_over_budget"] is not None]),
            "per_second_dataset_cached": spread([s["dataset_cached_over_budget"] for s in seconds]),
            "per_second_analysis_cached": spread([s["analysis_cached_over_fair"] for s in seconds]),
            "totals": series_totals(run.get("series", [])),
            "analysis_over_fair": round(statistics.fmean(ratios), 3), "analysis_over_fair_min": min(ratios),
            "prestage_over_budget": round(statistics.fmean(w["prestage_over_budget"] for w in use), 3),
            "met": bool(valid) and min(w["analysis_over_fair"] for w in valid) >= ACCEPTED,
            "prestaged": progress.get("files_done") == run["dataset_files"] and not progress.get("files_failed"),
            "pass_zero": run["pass_origin_bytes"] < PASS_OVERHEAD and run["pass_ok"]}


# ---------------------------------------------------------------- a repeat on the fabric

def measure_repeat(case, args, log) -> dict:
    topology, pools, fleets, routing = case
    chosen = placements(topology, pools, fleets, routing)["a: switchyard"]
    the = layout(topology, pools, fleets, chosen.placement, dict(chosen.hash_weights), args.scale, [])
    (pool, ring), = ring_weights(topology, pools, chosen.placement, dict(chosen.hash_weights)).items()
    if any(not s.ring for s in the.streams):
        raise RuntimeError("the bench's case must have every reader on the pool's ring")
    seconds = measured_seconds(args.warmup, args.windows, args.window)
    file_bytes = args.file_mib << 20
    the = analysis_layout(the, ring, seconds, file_bytes)
    wan_mbit = topology.wan_gbps * args.scale
    budget_mbit = args.share * wan_mbit
    (pool_request,) = [p for p in pools if p.name == pool]
    files = dataset(budget_mbit, seconds, file_bytes, args.parallel, prefetch_bytes(pool_request))
    demand = sum(s.demand_gbps for s in the.streams)
    model = {"wan_gbps": topology.wan_gbps, "share": args.share, "demand_gbps": demand, "scale": args.scale}
    caches, workers = sorted(the.caches), sorted(the.workers)
    log(f"  plan: caches {caches}, ring {ring}, {len(the.streams)} readers on {workers} asking {demand:g} Gbps; "
        f"WAN {topology.wan_gbps:g} Gbps ({wan_mbit:g} Mbit/s), prestage budget {args.share:g} of it; dataset "
        f"{len(files)} files, analysis {sum(len(s.urls) for s in the.streams)} files of {args.file_mib} MiB")
    with fabric_for(TAG, topology, the, args.scale) as fabric:
        # The origin holds every file the layout names: the dataset's too, named as if warmed (none is).
        start_servers(fabric, dataclasses.replace(the, warm={**the.warm, caches[0]: set(files)}), pools, file_bytes)
        addresses = {c: fabric.node(c).ip for c in caches}
        work = fabric.workdir
        (work / "prestage-urls").write_text("".join(f"root://{ORIGIN_IP}:{PORT}/{f}\n" for f in files))
        (work / "prestage-ring").write_text(ring_text(ring, addresses))
        job = runner_job(args.share, wan_mbit / 1000, pool, PORT, args.parallel)
        argv = runner_argv(job, str(pathlib.Path(sys.executable).with_name("switchyard")), str(work / "prestage-urls"),
                           str(work / "prestage-ring"), str(work / "prestage-journal"),
                           str(work / "prestage-termination"))
        runner_ns = fabric.node(caches[0]).ns
        started = time.monotonic()
        runner = fabric.spawn(runner_ns, argv, work / "prestage-runner.log")
        cache_namespaces = [namespace_path(pool_body(pool_request, *fabric.cache_dirs(c))) for c in caches]
        sampler = Sampler(fabric, workers, runner_ns, cache_namespaces)
        sampler.start()
        try:
            m = measure(fabric, the, args.warmup, args.window, args.windows, log)
        finally:
            sampler.stop.set()
            sampler.join(timeout=10)
        # Reads that failed (a timeout, an error) while the readers ran: a stream whose read failed waits 1 s and
        # takes its next file (fabric_reader.py), so failures would show as readers receiving less.
        failures = {n: reader_failures(fabric, n) for n in workers}
        left = max(60.0, len(files) * file_bytes * 8 / (budget_mbit * 1e6) * 1.5)
        runner.wait(timeout=left)
        took = time.monotonic() - started
        progress = parse_report((work / "prestage-termination").read_text()) \
            if (work / "prestage-termination").exists() else None
        log(f"  runner exited {runner.returncode} after {took:.0f} s: {progress}")
        fabric.unshape_links()
        homes = {f: home(f, ring) for f in files}
        wan0 = fabric.counters()["wan"][0]
        pass_ok = True
        try:
            fabric.read_once(workers[0], [f"root://{addresses[homes[f]]}:{PORT}/{f}" for f in files])
        except Exception as error:   # the verdict says the pass failed; the log says why
            pass_ok = False
            log(f"  the pass failed: {error}")
        pass_bytes = fabric.counters()["wan"][0] - wan0
        log(f"  pass over the {len(files)} prestaged files from {workers[0]}: origin sent {pass_bytes} bytes")
        runner_log = (work / "prestage-runner.log").read_text(errors="replace")[-2000:]
    if namespaces(PREFIX + TAG + "-"):
        raise RuntimeError(f"teardown left {namespaces(PREFIX + TAG + '-')}")
    windows = [{"seconds": round(w.seconds, 2), "cpu_busy": round(w.cpu_busy, 3), "load1": round(w.load, 2),
                "fabric_cores": round(w.fabric_cores, 3), "softirq_cores": round(w.softirq_cores, 3),
                "wan_mbit": round(w.wire_mbit("wan")[0], 3),
                "analysis_mbit": round(sum(w.wire_mbit(f"host:{n}")[1] for n in workers), 3),
                "caches_in_mbit": {c: round(w.wire_mbit(f"host:{c}")[1], 3) for c in caches},
                "span": [round(w.ended - w.seconds - sampler.t0, 3), round(w.ended - sampler.t0, 3)]}
               for w in m.windows]
    read_bytes = progress.bytes_done if progress else 0
    return {"model": model, "caches": caches, "workers": workers, "ring": ring, "readers": len(the.streams),
            "dataset_files": len(files), "file_bytes": file_bytes, "runner_command": argv[next(i for i, a in enumerate(argv) if a.endswith("switchyard")):],
            "runner_exit": runner.returncode, "runner_seconds": round(took, 1),
            "runner_report": dataclasses.asdict(progress) if progress else None,
            "runner_mean_over_budget": round(read_bytes * 8 / took / (budget_mbit * 1e6), 3),
            "runner_log_tail": runner_log.splitlines()[-3:],
            "idle_cores_before": round(m.idle_cores_before, 2), "windows": windows,
            "pass_origin_bytes": pass_bytes, "pass_ok": pass_ok, "series": sampler.series,
            "reader_failures": failures}


def reader_failures(fabric, node: str) -> int | None:
    """The failed reads a node's readers reported as they were stopped (None: no report)."""
    try:
        return fabric.reader_report(node)["failures"]
    except (OSError, ValueError, KeyError):
        return None


# ---------------------------------------------------------------- report

def report(results: list[dict], args, meta: dict) -> str:
    lines = ["# Prestage beside analysis: the analysis' share of the WAN the prestage leaves", "",
             *about("the analysis' WAN Gbps ÷ its fair share of what a prestage at wanShare "
                    f"{args.share:g} leaves, the prestage's WAN Gbps ÷ its budget, and the origin bytes of an "
                    "analysis pass over the prestaged files, on an emulated fabric with a real origin behind a shaped "
                    "WAN, real xrootd caches and switchyard's own prestage runner",
                    "`make bench-prestage` (`bench/prestage_bench.py`, needs root)",
                    f"{meta.get('finished', 'not recorded')}, commit {meta.get('head', 'not recorded')}"),
             f"Case bench/topologies/{args.case}{{,-facility}}.yaml at {args.scale:g} Mbit/s per model Gbps; Gbps are "
             "model Gbps (the shapers' bytes, whole frames, ÷ the scale). The runner is `switchyard prestage` with the "
             f"argv and environment of the CachePrestage's Job (builders/prestage.py; wanShare {args.share:g}, so "
             f"--gbps {args.share:g} × W; --parallel {args.parallel}), in the first cache host's namespace, over the "
             f"dataset's files; the fleet's readers (a stream per worker, paced at its readGbps) read {args.file_mib} "
             "MiB files no cache holds, each stream its own, through the ring: each read a miss. Per window: the WAN "
             "is the origin's link out; the analysis' share of it and the prestage's are what the caches fetched of "
             "each set over the window (the blocks their data files gained, counted as full frames carry them: the "
             "origin sends a cache both sets on one connection, which the shapers cannot split). The readers' links in "
             "(what they received) are shown beside: XCache fetches an opened file to its end ahead of its reader, so "
             "they lag what the analysis took of the WAN.",
             "",
             "The model: the runner is paced to its share (prestage/pace.py: wanShare × wanGbps in total), so the rest "
             "of the WAN is the analysis': its fair share is W × (1 − wanShare), or its demand when that is less (here "
             "the readers ask more). The pace counts the payload the runner reads; on the wire a full frame carries "
             "1448 bytes in 1514, so a runner at its pace sends about 1.046 × its budget, and the WAN's rest is about "
             "0.954 of the analysis' fair share (see the ÷ budget column). XCache prefetches every file it opens to the "
             "file's end (pfc.prefetch bounds only the blocks in flight), so the runner charges a file's size to the "
             "pace before it opens it, and the caches fetch it at what the WAN gives them while the next file waits: "
             "the per-second lines below compare the prestage's WAN with the runner's own reads and with "
             "what the caches wrote of each set (their data files' allocated blocks: what each fetched of it). "
             f"A window with more than {CPU_LIMIT:.0%} of all cores busy is invalid (marked). Acceptance (issue 30): "
             f"every valid window ≥ {ACCEPTED:g}; afterwards the pass reads 0 bytes from the origin (below "
             f"{PASS_OVERHEAD // 1024} KiB, opens and stats: a pfc block is 1 MiB). The restart without refetching is "
             "operator/tests/integration/test_prestage_xrootd.py's.",
             "",
             f"- machine: {os.cpu_count()} cores; TCP {meta.get('congestion', '?')}; {args.repeats} repeats × "
             f"{args.windows} windows × {args.window:g} s after {args.warmup:g} s warm-up; run took "
             f"{meta.get('seconds', float('nan')):.0f} s, load {meta.get('load_start', float('nan')):.2f} at the "
             f"start, {meta.get('load_end', float('nan')):.2f} at the end",
             ""]
    if results:
        r0 = results[0]
        lines += [f"- plan: caches {r0['caches']} (ring {r0['ring']}), {r0['readers']} readers on {r0['workers']} "
                  f"asking {r0['model']['demand_gbps']:g} Gbps; WAN W = {r0['model']['wan_gbps']:g} Gbps; prestage "
                  f"budget {r0['model']['wan_gbps'] * r0['model']['share']:g} Gbps; analysis fair share "
                  f"{fair_share(r0['model']['wan_gbps'], r0['model']['share'], r0['model']['demand_gbps']):g} Gbps; "
                  f"dataset {r0['dataset_files']} files × {r0['file_bytes'] >> 20} MiB",
                  f"- runner (the Job's command, the pod's paths replaced): `{' '.join(r0['runner_command'])}`",
                  ""]
    lines += ["| repeat | window | WAN Gbps (÷ W) | prestage Gbps (fetched) | prestage ÷ budget | analysis Gbps "
              "(fetched) | readers received Gbps | fair share | analysis ÷ fair | CPU busy | valid |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for i, r in enumerate(results):
        for j, w in enumerate(r["summary"]["windows"], 1):
            how = "" if w.get("by_fetches", True) else " (WAN − received)"
            lines.append(f"| {i} | {j} | {w['wan_gbps']:.2f} ({w['wan_used']:.3f}) | {w['prestage_gbps']:.2f}{how} "
                         f"| {w['prestage_over_budget']:.3f} | {w['analysis_gbps']:.2f}{' (received)' if how else ''} "
                         f"| {w.get('received_gbps', w['analysis_gbps']):.2f} | {w['fair_gbps']:.2f} "
                         f"| {w['analysis_over_fair']:.3f}{'' if w['analysis_over_fair'] >= ACCEPTED else ' (< 0.9)'} "
                         f"| {w['cpu_busy']:.0%} | {'yes' if w['valid'] else 'INVALID'} |")
    lines += ["", "Per repeat:", ""]
    for i, r in enumerate(results):
        s, rep = r["summary"], r.get("runner_report") or {}
        lines.append(
            f"- repeat {i}: analysis ÷ fair {s['analysis_over_fair']:.3f} (min {s['analysis_over_fair_min']:.3f}) over "
            f"{s['valid_windows']}/{len(s['windows'])} valid windows: {'met' if s['met'] else 'NOT met'}; prestage ÷ "
            f"budget {s['prestage_over_budget']:.3f} in the windows, the runner's own read rate over its "
            f"{r['runner_seconds']:.0f} s ÷ budget {r['runner_mean_over_budget']:.3f} (payload); runner exit "
            f"{r['runner_exit']}, {rep.get('files_done', '?')}/{r['dataset_files']} files done, "
            f"{rep.get('files_failed', '?')} failed; the pass: {r['pass_origin_bytes']} origin bytes "
            f"({'0 file bytes' if s['pass_zero'] else 'NOT 0'}); failed analysis reads: "
            f"{r.get('reader_failures', 'not recorded')}")
        if s["per_second_prestage"]:
            p, q = s["per_second_prestage"], s["per_second_runner"]
            lines.append(f"  - second by second (from the runner's start to the last window's end): the prestage's WAN "
                         f"÷ budget p10 {p['p10']:.2f}, median {p['p50']:.2f}, p90 {p['p90']:.2f}, max {p['max']:.2f}; "
                         "the runner's own reads (its /metrics, payload counted as full frames) ÷ budget "
                         + (f"p10 {q['p10']:.2f}, median {q['p50']:.2f}, p90 {q['p90']:.2f}, max {q['max']:.2f}"
                            if q else "not read")
                         + _spread_text("; what the caches wrote of the dataset ÷ budget",
                                        s.get("per_second_dataset_cached"))
                         + _spread_text("; of the analysis' files ÷ its fair share",
                                        s.get("per_second_analysis_cached")))
        if s.get("totals"):
            t, mb = s["totals"], 1e6
            lines.append(f"  - over those {t['seconds']:.0f} s: the WAN carried {t['wan'] / mb:.0f} MB (frames), the "
                         f"readers received {t['readers_in'] / mb:.0f} MB (frames), the runner read "
                         + ("?" if t["runner_read"] is None else f"{t['runner_read'] / mb:.0f}")
                         + f" MB; the caches came to hold {t['dataset_cached'] / mb:.0f} MB of the dataset and "
                         f"{t['analysis_cached'] / mb:.0f} MB of the analysis' files")
    valid = [w["analysis_over_fair"] for r in results for w in r["summary"]["windows"] if w["valid"]]
    if valid:
        lines += ["", f"Over every valid window: analysis ÷ fair share {statistics.fmean(valid):.3f} "
                  f"({min(valid):.3f}–{max(valid):.3f}); acceptance ≥ {ACCEPTED:g} in every valid window: "
                  f"{'met' if min(valid) >= ACCEPTED else 'NOT met'}."]
    return "\n".join(lines) + "\n"


def _spread_text(label: str, spread_of: dict | None) -> str:
    if not spread_of:
        return ""
    return (f"{label} p10 {spread_of['p10']:.2f}, median {spread_of['p50']:.2f}, p90 {spread_of['p90']:.2f}, "
            f"max {spread_of['max']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", default=CASE, help="bench/topologies/<case>.yaml and -facility.yaml")
    parser.add_argument("--scale", type=float, default=2.0, help="Mbit/s per model Gbps (the WAN: 40 x 2 Mbit/s)")
    parser.add_argument("--share", type=float, default=0.5, help="the CachePrestage's wanShare")
    parser.add_argument("--parallel", type=int, default=4, help="the CachePrestage's parallel (files read at once)")
    parser.add_argument("--repeats", type=int, default=3, help="runs, each on a fabric of its own")
    parser.add_argument("--windows", type=int, default=3, help="measured windows per run")
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--file-mib", type=int, default=64,
                        help="each file's size, as HEP files are, above the pool's prefetch (10 MiB); XrdPfc fetches "
                             "an opened file to its end at any size (prestage/runner.py)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--name", default="prestage")
    parser.add_argument("--from-json", help="only write the report again from a run's JSON")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if from_json(args, lambda results, a, meta: (out / f"{a.name}.md").write_text(report(results, a, meta))):
        return 0
    if not fabric_run_ready(TAG):
        return 2
    case = load_case(args.case)
    started = time.monotonic()
    meta = {"load_start": os.getloadavg()[0], "congestion": host_congestion(), **code_version()}
    results: list[dict] = []
    try:
        for repeat in range(args.repeats):
            print(f"repeat {repeat}: load {os.getloadavg()[0]:.2f}", flush=True)
            r = measure_repeat(case, args, lambda m: print(m, flush=True))
            r["summary"] = summarise(r)
            print(f"  analysis ÷ fair {r['summary']['analysis_over_fair']} (min "
                  f"{r['summary']['analysis_over_fair_min']}), prestage ÷ budget "
                  f"{r['summary']['prestage_over_budget']}, pass {r['pass_origin_bytes']} origin bytes", flush=True)
            results.append(r)
    finally:
        down(PREFIX + TAG + "-")
    meta.update(load_end=os.getloadavg()[0], seconds=round(time.monotonic() - started, 1),
                finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    (out / f"{args.name}.json").write_text(json.dumps({"args": vars(args), "meta": meta, "results": results},
                                                      indent=1))
    (out / f"{args.name}.md").write_text(report(results, args, meta))
    print(f"wrote {out / args.name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
