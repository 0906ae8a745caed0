#!/usr/bin/env python3
"""Replay the fabric bench's readers in time: where does the loss near a cache host's cap come from?

Every fluid model (planner/flow.py, planner/fairshare.py) and the closed
queueing network of independent readers (bench/closed_network.py) fall short
of the Nebraska-like runs' loss (measured 0.81-0.87 of the fair share).
This replays what the bench's readers do, in time, with nothing fitted:
each stream of the run's layout (e2e/fabric_scenario.layout: same nodes,
same shaped rates, same file list in the same order from the same starting
file) reads one whole file at a time from the host its URL names, then the
next; at every moment the rates are the max-min fair share of the TCP
connections: the XRootD client keeps one connection per (reader process,
cache host), which carries every stream of that node now reading from that
host (they share it alike) through the node's link, the host's serving cap
and the uplinks it crosses. Delivered Gbps are averaged over the run's
measured span (warm-up to the end of the last window), in steps of STEP
seconds (a stream that finishes a file within a step carries on with the
next one at the same rate).

Twice per placement: the streams' file order as the bench has it, and each
stream's own list shuffled (independent readers, what a closed queueing
network assumes). Runs whose placement and inputs are the same (fabric.json
and fabric.run2.json) are replayed once.

    python3 bench/notes/scripts/fabric_replay.py      # writes bench/notes/fairshare-replay.md
"""

from __future__ import annotations

import json
import pathlib
import random
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))

from fabric_scenario import layout  # noqa: E402
from fairshare_report import NOTES, recorded, run_path  # noqa: E402
from switchyard.planner.fairshare import Stream, _cross, predict, progressive_filling  # noqa: E402

STEP = 0.1     # seconds; a file takes ~3-7 s at these rates


def replay(topology, pools, fleets, placement, weights, files, scale: float, file_kib: int, start: float, end: float,
           shuffle: int | None = None, reader_order: str = "rotation", demand: str = "shaped"
           ) -> tuple[float, int, dict[str, float]]:
    """(mean delivered link Gbps over [start, end) seconds after the readers start, streams, mean load per
    uplink direction, "up_in:rack-5").

    reader_order, demand: as the run had them (its args; runs before the options: rotation, shaped)."""
    the = layout(topology, pools, fleets, placement, weights, scale, files, reader_order, demand)
    switch_of = {h.name: h.switch for h in topology.hosts}
    capacity = {f"{d}:{sw.name}": sw.uplink_gbps for sw in topology.switches for d in ("up_out", "up_in")}
    for node, _, out, inn in the.hosts:
        capacity[f"node_in:{node}"] = inn / scale
        capacity[f"serve:{node}"] = out / scale
    size = file_kib * 1024 * 8 / 1e6 / scale        # a file in model Gbit (its Mbit at `scale` Mbit/s per Gbps)
    sources = [[cache for cache, _ in s.urls] for s in the.streams]
    if shuffle is not None:
        rng = random.Random(shuffle)
        for order in sources:
            rng.shuffle(order)
    wants = [s.wire_mbit / scale if s.wire_mbit > 0 else float("inf") for s in the.streams]

    def source(i: int) -> str:
        return sources[i][position[i] % len(sources[i])]

    def uses(node: str, cache: str) -> dict[str, float]:
        use = {} if node in the.caches else {f"node_in:{node}": 1.0}   # readers on a cache host are paced instead
        if cache != node:                                             # not loopback
            use[f"serve:{cache}"] = 1.0
            _cross(use, switch_of[cache], switch_of[node], 1.0)
        return use

    position = [0] * len(sources)
    left = [size] * len(sources)
    delivered, t = 0.0, 0.0
    uplinks: dict[str, float] = {}              # Gbit carried per uplink direction
    while t < end - 1e-9:
        # One TCP connection per (reader process, cache host), as the XRootD client keeps: the links share
        # it alike with the others, and the streams on it share it alike.
        on: dict[tuple[str, str], list[int]] = {}
        for i, s in enumerate(the.streams):
            on.setdefault((s.node, source(i)), []).append(i)
        keys = sorted(on)
        used = [uses(*k) for k in keys]
        flows = progressive_filling(capacity, [Stream(sum(wants[i] for i in on[k]), u) for k, u in zip(keys, used)]).rates
        rates = [0.0] * len(sources)
        for k, rate in zip(keys, flows):
            for i in on[k]:
                rates[i] = rate / len(on[k])
        if t >= start - 1e-9:
            delivered += sum(rates) * STEP
            for use, rate in zip(used, flows):
                for link, a in use.items():
                    if link.startswith("up_"):
                        uplinks[link] = uplinks.get(link, 0.0) + rate * a * STEP
        for i, rate in enumerate(rates):
            spare = rate * STEP
            while spare >= left[i]:
                spare -= left[i]
                position[i] += 1
                left[i] = size
            left[i] -= spare
        t += STEP
    return delivered / (end - start), len(sources), {link: g / (end - start) for link, g in uplinks.items()}


def main() -> int:
    lines = ["# Replaying the fabric bench's sequential readers in time", "",
             "Generated by `python3 bench/notes/scripts/fabric_replay.py`; see its docstring. *replay* = the bench's streams with "
             "their own file order; *shuffled* = each stream's file list shuffled (independent readers); *fair* = "
             "planner/fairshare.py with the run's file split (the fluid model). measured ÷ (model × full) is 1.0 when "
             "the model is right (full: what a full link reads in the run's counts, 1 for the shapers' byte counts "
             "of the runs since e6f0d45, 0.956 for the interface counters before). Demand is laid out as the run "
             "held it (paced by the readers since e493285, shaped at the node before). Nothing is fitted. "
             "CPU = this replay's, both variants.", "",
             "| run | case | placement | valid | streams | measured | fair+files | ÷ ×full | replay | ÷ ×full | "
             "shuffled | ÷ ×full | CPU (s) |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    runs: dict[str, dict] = {}
    done: dict[tuple, tuple] = {}
    filled = ["", "Uplink directions the fair share (with the files' split) fills: measured (÷ full), fair share, and "
              "the replay in the bench's order (mean load over the same span), Gbps.", "",
              "| run | case | placement | uplink | capacity | measured | fair+files | replay |",
              "|---|---|---|---|---:|---:|---:|---:|"]
    for run, case, name, r, topology, pools, fleets, chosen, files in recorded():
        if chosen is None:
            lines.append(f"| {run} | {case} | {name} | skipped: today's plan differs from the run's placement |")
            continue
        doc = runs.setdefault(run, json.loads(run_path(run).read_text()))
        a = doc["args"]
        scale = a.get("scales", {}).get(case, a["scale"])
        span = (a["warmup"], a["warmup"] + a["window"] * a["repeats"])
        weights = dict(chosen.hash_weights) or None
        key = (case, name, scale, a["file_kib"], span, len(files), a.get("reader_order", "rotation"),
               a.get("demand", "shaped"))
        t0 = time.process_time()
        if key not in done:
            ordered, streams, ordered_uplinks = replay(topology, pools, fleets, chosen.placement, weights, files, scale, a["file_kib"], *span,
                                      reader_order=a.get("reader_order", "rotation"), demand=a.get("demand", "shaped"))
            shuffled, _, _ = replay(topology, pools, fleets, chosen.placement, weights, files, scale, a["file_kib"], *span,
                                 shuffle=1, demand=a.get("demand", "shaped"))
            done[key] = (ordered, shuffled, streams, ordered_uplinks)
        ordered, shuffled, streams, ordered_uplinks = done[key]
        predicted = predict(topology, pools, fleets, chosen.placement, weights, files)
        fair = predicted.delivered_gbps
        for sw, u in sorted(predicted.uplinks.items()):
            for d in ("out", "in"):
                capacity = next(s.uplink_gbps for s in topology.switches if s.name == sw)
                if u[d] >= capacity * (1 - 1e-6):
                    filled.append(f"| {run} | {case} | {name} | {sw} {d} | {capacity:g} | "
                                  f"{r['summary']['uplinks'][sw][d] / r['summary']['full']:.1f} | {u[d]:.1f} | "
                                  f"{ordered_uplinks.get(f'up_{d}:{sw}', 0.0):.1f} |")
        m = r["summary"]["delivered_mean"]
        lines.append(f"| {run} | {case} | {name} | {'yes' if r['summary']['valid'] else 'no'} | {streams} | {m:.1f} | "
                     f"{fair:.1f} | {m / fair / r['summary']['full']:.3f} | {ordered:.1f} | {m / ordered / r['summary']['full']:.3f} | "
                     f"{shuffled:.1f} | {m / shuffled / r['summary']['full']:.3f} | {time.process_time() - t0:.0f} |")
        print(lines[-1], flush=True)
    (NOTES / "fairshare-replay.md").write_text("\n".join(lines + filled) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
