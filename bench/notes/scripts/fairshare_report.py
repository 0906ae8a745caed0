#!/usr/bin/env python3
"""The fair-share prediction beside the LP optimum (issue 14, part 3): what changed, per case.

Two parts, written to bench/notes/fairshare.md (and .json):

1. The fabric runs on record (RUNS: bench/results/fabric.json, the others in
   bench/notes/; real bytes through an emulated fabric): each case and
   placement re-planned here (the same inputs
   as the run, missRatio 0) and judged by the LP optimum (planner/flow.py), the
   bench's own per-node reference (as recorded) and the product's fair share
   (planner/fairshare.py; with the ring's expected split, and with the split of
   the run's file list); aggregate measured ÷ (prediction × full) and the
   per-uplink error. A run whose placement differs from today's plan is skipped.
   Beside them (aggregate only) the closed queueing network of sequential
   readers (bench/closed_network.py), with the ring's split and the files'.
2. The planner bench's cases (bench/planner_bench.py's suite): the plan and the
   baselines by the LP and by the fair share, and what computing the fair share
   costs beside planning (CPU-second ratio in the same run, with the load average).

    python3 bench/notes/scripts/fairshare_report.py [--full] [--out bench/notes]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))

from closed_network import of_placement  # noqa: E402
from fabric_bench import load_case, placements, summarise  # noqa: E402
from planner_bench import RANDOM_SEEDS, suite  # noqa: E402
from switchyard.planner import baselines, plan  # noqa: E402
from switchyard.planner.fairshare import predict  # noqa: E402

RUNS = ("fabric.json", "fabric.run2.json", "fabric.nebraska-serve90.json")
RESULTS = ROOT / "bench" / "results"    # the fabric bench's headline run
NOTES = ROOT / "bench" / "notes"        # the experiments' runs, and where these analyses write
LOADED = 0.05        # an uplink direction counts when predicted or measured above this share of its capacity


def _same_placement(recorded: dict, chosen) -> bool:
    caches = {s: list(n) for by in chosen.placement.caches.values() for s, n in by.items()}
    workers = {f: dict(by) for f, by in chosen.placement.workers.items()}
    return (recorded["caches"] == caches and recorded["workers"] == workers
            and abs(recorded["predicted_gbps"] - chosen.predicted_gbps) < 1e-3)


def run_path(run: str) -> pathlib.Path:
    """A recorded fabric run's JSON: the headline run's in bench/results, an experiment's in bench/notes."""
    return RESULTS / run if (RESULTS / run).exists() else NOTES / run


def recorded():
    """Every placement of the runs on record: (run, case, placement name, its record, topology, pools, fleets,
    today's plan of it or None when that differs from the run's placement, the run's file list)."""
    for run in RUNS:
        path = run_path(run)
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        files = [f"/f{i:04d}.root" for i in range(doc["args"]["files"])]
        for case, by in doc["results"].items():
            topology, pools, fleets, routing = load_case(case)
            chosen_by = placements(topology, pools, fleets, routing)
            for name, r in by.items():
                r.setdefault("summary", summarise(r))
                chosen = chosen_by.get(name)
                same = chosen is not None and _same_placement(r, chosen)
                yield run, case, name, r, topology, pools, fleets, chosen if same else None, files


def fabric_rows() -> list[dict]:
    rows = []
    for run, case, name, r, topology, pools, fleets, chosen, files in recorded():
        row = {"run": run, "case": case, "placement": name, "valid": r["summary"]["valid"]}
        if chosen is None:
            rows.append({**row, "skipped": "today's plan differs from the run's placement"})
            continue
        weights = dict(chosen.hash_weights) or None
        fair = predict(topology, pools, fleets, chosen.placement, weights)
        fair_files = predict(topology, pools, fleets, chosen.placement, weights, files)
        measured = r["summary"]["delivered_mean"]
        closed = {"closed": of_placement(topology, pools, fleets, chosen.placement, weights),
                  "closed_files": of_placement(topology, pools, fleets, chosen.placement, weights, files)}
        models = {"lp": (chosen.predicted_gbps, {s: u for s, u in r["predicted_uplinks"].items()}),
                  "bench": (r["fair_gbps"], r["fair_uplinks"]),
                  "fair": (fair.delivered_gbps, fair.uplinks), "fair_files": (fair_files.delivered_gbps, fair_files.uplinks)}
        errors = {k: [] for k in models}
        for sw, p in r["predicted_uplinks"].items():
            m = r["summary"]["uplinks"][sw]
            for d in ("out", "in"):
                if p[d] <= LOADED * p["capacity"] and m[d] <= LOADED * p["capacity"] \
                        and fair.uplinks[sw][d] <= LOADED * p["capacity"]:
                    continue
                for k, (_, up) in models.items():
                    errors[k].append(abs(m[d] / r["summary"]["full"] - up[sw][d]) / p["capacity"])
        rows.append({**row, "measured": measured, **closed,
                     **{f"{k}_ratio": measured / (g * r['summary']['full']) for k, g in closed.items()},
                     **{k: g for k, (g, _) in models.items()},
                     **{f"{k}_ratio": measured / (g * r['summary']['full']) if g else None for k, (g, _) in models.items()},
                     "directions": len(errors["lp"]), "errors": errors})
    return rows


def planner_rows(full: bool) -> list[dict]:
    rows = []
    for case in suite(quick=not full):
        load = round(os.getloadavg()[0], 2)
        t0 = time.process_time()
        result = plan(case.topology, case.pools, case.fleets)
        plan_cpu = time.process_time() - t0
        t0 = time.process_time()
        fair = predict(case.topology, case.pools, case.fleets, result.placement, dict(result.hash_weights) or None)
        fair_cpu = time.process_time() - t0
        default = baselines.default_scheduler(case.topology, case.pools, case.fleets, bound=result.bound_gbps)
        randoms = [baselines.random_placement(case.topology, case.pools, case.fleets, seed=s, bound=result.bound_gbps)
                   for s in RANDOM_SEEDS]

        def fair_of(p) -> float:
            return predict(case.topology, case.pools, case.fleets, p.placement, dict(p.hash_weights) or None).delivered_gbps

        shift = max((max(abs(fair.uplinks[u.switch]["in"] - u.in_gbps), abs(fair.uplinks[u.switch]["out"] - u.out_gbps))
                     / u.capacity_gbps for u in result.uplinks), default=0.0)
        rows.append({
            "case": case.name, "load": load, "nodes": len(case.topology.hosts), "switches": len(case.topology.switches),
            "lp": result.predicted_gbps, "bound": result.bound_gbps, "fair": fair.delivered_gbps,
            "default_lp": default.predicted_gbps, "default_fair": fair_of(default),
            "random_lp": statistics.fmean(r.predicted_gbps for r in randoms),
            "random_fair": statistics.fmean(fair_of(r) for r in randoms),
            "uplink_shift": shift, "saturated": len(fair.saturated),
            "plan_cpu": plan_cpu, "fair_cpu": fair_cpu,
        })
    return rows


def _r(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def markdown(fabric: list[dict], planner: list[dict], full: bool) -> str:
    lines = [
        "# The fair-share prediction beside the LP optimum",
        "",
        "Generated by `python3 bench/notes/scripts/fairshare_report.py" + (" --full" if full else "") + "` (issue 14, part 3). "
        "LP = the plan's predictedGbps (planner/flow.py: the most the routing allows). Fair share = "
        "planner/fairshare.py: every worker a flow, each file from one cache host, max-min progressive filling "
        "(status.plan.fairShareGbps). All in link Gbps; full = what a full link reads in a run's counts (1 for the "
        "shapers' byte counts, runs since e6f0d45; 0.956 for the interface counters before), so "
        "measured ÷ (prediction × full) is 1.0 when the prediction is right.",
        "",
        f"- machine: {os.cpu_count()} cores, shared with other work; load average (1 min) at the end "
        f"{os.getloadavg()[0]:.2f}",
        "",
        "## 1. Fabric runs on record: measured against each prediction",
        "",
        "Placements re-planned now with the run's inputs (missRatio 0, warm caches). *bench* = the bench's "
        "per-node reference as recorded (knows which node each reader is on: loopback reads, node links); "
        "*fair* = the product's fair share with the ring's expected split (what status.plan carries); "
        "*fair+files* = the same with the split of the run's file list (hashing.split). Uplink error = mean over "
        f"loaded directions (> {LOADED:.0%} of capacity) of |measured ÷ full − predicted| ÷ capacity. "
        "valid = every window under the CPU limit; the rest are indicative only. *closed* / *closed+files* = the "
        "closed queueing network of sequential readers (bench/closed_network.py: the fair share's reader groups, "
        "each reader capped by every link but the hosts, hosts as processor-sharing stations; aggregate only), "
        "with the ring's split / the files'.",
        "",
        "| run | case | placement | valid | measured | LP | bench | fair | fair+files | ÷ LP×full | ÷ bench×full | "
        "÷ fair×full | ÷ fair+files×full | closed | closed+files | ÷ closed×full | ÷ closed+files×full | "
        "directions | uplink error LP / bench / fair / fair+files |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in fabric:
        if "skipped" in r:
            lines.append(f"| {r['run']} | {r['case']} | {r['placement']} | {'yes' if r['valid'] else 'no'} | "
                         f"{r['skipped']} |||||||||||||||")
            continue
        e = {k: statistics.fmean(v) if v else 0.0 for k, v in r["errors"].items()}
        lines.append(f"| {r['run']} | {r['case']} | {r['placement']} | {'yes' if r['valid'] else 'no'} | {r['measured']:.1f} | "
                     f"{r['lp']:.1f} | {r['bench']:.1f} | {r['fair']:.1f} | {r['fair_files']:.1f} | {_r(r['lp_ratio'])} | "
                     f"{_r(r['bench_ratio'])} | {_r(r['fair_ratio'])} | {_r(r['fair_files_ratio'])} | "
                     f"{r['closed']:.1f} | {r['closed_files']:.1f} | {_r(r['closed_ratio'])} | {_r(r['closed_files_ratio'])} | "
                     f"{r['directions']} | "
                     f"{e['lp']:.1%} / {e['bench']:.1%} / {e['fair']:.1%} / {e['fair_files']:.1%} |")
    used = [r for r in fabric if "skipped" not in r]
    for label, subset in (("all runs", used), ("valid runs only", [r for r in used if r["valid"]])):
        if not subset:
            continue
        pooled = {k: [x for r in subset for x in r["errors"][k]] for k in ("lp", "bench", "fair", "fair_files")}
        ratios = {k: [r[f"{k}_ratio"] for r in subset if r[f"{k}_ratio"]]
                  for k in ("lp", "bench", "fair", "fair_files", "closed", "closed_files")}
        lines.append("")
        lines.append(f"- {label} ({len(subset)} placements, {len(pooled['lp'])} loaded uplink directions): "
                     f"measured ÷ (prediction × full) LP {min(ratios['lp']):.3f}–{max(ratios['lp']):.3f}, "
                     f"fair {min(ratios['fair']):.3f}–{max(ratios['fair']):.3f}, "
                     f"fair+files {min(ratios['fair_files']):.3f}–{max(ratios['fair_files']):.3f}, "
                     f"bench {min(ratios['bench']):.3f}–{max(ratios['bench']):.3f}, "
                     f"closed {min(ratios['closed']):.3f}–{max(ratios['closed']):.3f}, "
                     f"closed+files {min(ratios['closed_files']):.3f}–{max(ratios['closed_files']):.3f}; mean uplink error LP "
                     + " / ".join(f"{statistics.fmean(v):.1%}" if v else "–" for v in pooled.values())
                     + " (LP / bench / fair / fair+files).")
    lines += [
        "",
        "## 2. The planner bench's cases: plan and baselines by the LP and by the fair share",
        "",
        "plan/default and plan/random: the plan's Gbps over the baseline's, by each model. Uplink shift = the "
        "largest |fair − LP| of any uplink direction of the plan, as a share of its capacity. CPU: this run's "
        "plan and its fair share, one after the other (ratio fair ÷ plan), with the load average at the case's start.",
        "",
        "| case | nodes | switches | LP | fair | fair ÷ LP | default LP / fair | plan/default LP / fair | "
        "random LP / fair (mean) | plan/random LP / fair | uplink shift | full links (fair) | CPU plan / fair (s) | "
        "fair ÷ plan CPU | load |",
        "|---|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|---|---:|---:|",
    ]
    for r in planner:
        lines.append(
            f"| {r['case']} | {r['nodes']} | {r['switches']} | {r['lp']:g} | {r['fair']:g} | {r['fair'] / r['lp']:.3f} | "
            f"{r['default_lp']:g} / {r['default_fair']:g} | {r['lp'] / r['default_lp']:.2f} / {r['fair'] / r['default_fair']:.2f} | "
            f"{r['random_lp']:.1f} / {r['random_fair']:.1f} | {r['lp'] / r['random_lp']:.2f} / {r['fair'] / r['random_fair']:.2f} | "
            f"{r['uplink_shift']:.1%} | {r['saturated']} | {r['plan_cpu']:.3f} / {r['fair_cpu']:.3f} | "
            f"{r['fair_cpu'] / r['plan_cpu']:.2f} | {r['load']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="every planner-bench case (default: its quick suite)")
    parser.add_argument("--out", default=str(NOTES))
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    fabric = fabric_rows()
    planner = planner_rows(args.full)
    (out / "fairshare.md").write_text(markdown(fabric, planner, args.full))
    (out / "fairshare.json").write_text(json.dumps({"fabric": fabric, "planner": planner}, indent=1) + "\n")
    print(f"wrote {out / 'fairshare.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
