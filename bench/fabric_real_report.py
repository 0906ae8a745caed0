"""bench/results/fabric-real.md from the result of bench/fabric_real_bench.py: placements (a) and (b), repeats.

Every figure here is computed from the result; the text around them only names what they are.
"""

from __future__ import annotations

import json
import statistics

from headline import about

NAMES = {"a": "(a) switchyard's plan", "b": "(b) default scheduler"}


def measured_on(link: str, summary: dict) -> float:
    """Measured model Gbps on a fair-share link name (serve:/node_in:<node>, up_out:/up_in:<switch>)."""
    kind, name = link.split(":", 1)
    if kind == "serve":
        return summary["hosts"][name]["out"]
    if kind == "node_in":
        return summary["hosts"][name]["in"]
    return summary["uplinks"][name]["out" if kind == "up_out" else "in"]


def capacity_of(link: str, result: dict) -> float:
    """A link's model Gbps (a saturated link's fair-share load is its capacity)."""
    kind, name = link.split(":", 1)
    rates, scale = result["rates_mbit"], result["meta"]["scale_mbit_per_gbps"]
    return (rates["nic"][name] if kind in ("serve", "node_in") else rates["uplink"][name]) / scale


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratios(result: dict) -> dict:
    """Per run: measured ÷ fair share (aggregate, each saturated link), and the medians per placement."""
    streams = str(result["args"]["streams"])
    rows = []
    for run in result["runs"]:
        s, fair = run["summary"], run["fair_share"]
        closed = run["closed"][streams]
        rows.append({
            "kind": run["placement_kind"], "repeat": run["repeat"], "valid": s["valid"],
            "measured": s["delivered_mean_gbps"], "fair": fair["delivered_gbps"],
            "ratio": s["delivered_mean_gbps"] / fair["delivered_gbps"],
            "closed": closed["delivered_gbps"], "closed_exact": closed["exact_pooled_gbps"],
            "links": {link: measured_on(link, s) / capacity_of(link, result) for link in fair["saturated"]},
        })
    medians = {}
    for kind in ("a", "b"):
        valid = [r for r in rows if r["kind"] == kind and r["valid"]]
        links = sorted({link for r in valid for link in r["links"]})
        medians[kind] = {
            "runs": len(valid),
            "measured": _median([r["measured"] for r in valid]), "fair": _median([r["fair"] for r in valid]),
            "ratio": _median([r["ratio"] for r in valid]),
            "closed": _median([r["closed"] for r in valid]), "closed_exact": _median([r["closed_exact"] for r in valid]),
            "links": {link: _median([r["links"][link] for r in valid if link in r["links"]]) for link in links},
        }
    a, b = medians["a"], medians["b"]
    return {"rows": rows, "medians": medians,
            "a_over_b": {"measured": a["measured"] / b["measured"], "fair": a["fair"] / b["fair"],
                         "closed": a["closed"] / b["closed"], "closed_exact": a["closed_exact"] / b["closed_exact"]}}


def report(result: dict) -> str:
    meta, args = result["meta"], result["args"]
    plan = result.get("status", {}).get("plan", {}) or {}
    figures = ratios(result)
    lines = [
        "# Fabric bench on real kubelet nodes",
        "",
        *about("the fabric bench on real kubelet nodes: the operator's own XCache and Dask worker pods, shaped links, "
               "real bytes against the fair share, for switchyard's placement and the default scheduler's",
               "`make bench-fabric-real` (`bench/fabric_real_bench.py`; `make fabric-real-down` after a killed run)",
               f"{meta['started_utc']} UTC, commit {meta['commit']}"),
        f"`make bench-fabric-real` (bench/fabric_real_bench.py), {meta['started_utc']} UTC, commit {meta['commit']}, "
        f"{meta['machine']}; load average {meta['load_start']:.2f} at the start, {meta.get('load_end', 0):.2f} at the "
        f"end; {meta.get('seconds', 0):.0f} s in all. Arguments: {json.dumps({k: v for k, v in args.items() if k != 'out'})}.",
        "",
        "## What was real",
        "",
        "- Nodes: 4 real kubelet v1.31.4 + containerd nodes (e2e/realnodes.py), two per switch, each in its own network "
        "namespace behind its switch's bridge (one tainted simulated node on a switch outside the facility, "
        "which localcluster needs). One cluster bring-up for every run; only the pods change between placements.",
        "- Caches and readers, placement (a): the pods the operator created from the AnalysisFacility (`switchyard run` "
        "on the host against the cluster): the XCache StatefulSets' pods (real xrootd from the rendered ConfigMap, host "
        "network) and the WorkerFleet's Dask workers. The operator planned and created them, then was stopped (it would "
        "restore its workloads' replicas under (b)); an (a) repeat scales the operator's own workloads back to their "
        "planned replicas, so every run, (a) or (b), ran without the operator.",
        "- Placement (b), the default scheduler's: the operator's rendered workloads with switchyard's placement taken "
        "away (bench/default_scheduler_pods.py): one cache StatefulSet and one worker Deployment with the same pod "
        "templates (images, commands, volumes, resources, probes, the same xrootd ConfigMap) and the same counts, no "
        "switch affinity, no per-switch split, no SWITCHYARD_SWITCH; caches required only on a node with the NVMe label "
        "(their disks), workers anywhere they tolerate; kube-scheduler binds them. Routing as a site would without "
        "switchyard: hashed over all cache hosts with equal weights (the ring's hosts, each weight 1).",
        "- Reading: one Dask task pinned to each worker runs "
        f"{args['streams']} readers, each reading the files one after another in an order of its own with "
        f"the XRootD client's Python bindings (in the worker image; 8 MiB reads, bytes discarded; {args['files']} files "
        f"of {args['file_mib']} MiB), through the cache the worker's routing environment names for the file "
        "(switchyard.routing.Router.from_env: the file's home on the ring). Before each run every file is read once "
        "through its home cache.",
        "- Origin: a real xrootd in a namespace of its own behind a shaped WAN veth; the Dask scheduler a pod beside a "
        "cache (below).",
        "- Routes: each node reaches the pod subnets of its own switch's nodes over the bridge (realnodes.py "
        "routes them through the fabric, which made a cache's replies to a pod on the next node cross the uplink "
        "twice).",
        "- Bytes: what each direction's HTB shaper sent (`tc -s qdisc`: the node's eth0 out, its fabric-side veth in, "
        "the switch bridge into the switch, its IFB out of it, the WAN veths): whole frames with a header per TCP "
        "segment, what a shaped rate is charged with, so a full link reads its Gbps. Beside them the interface "
        "counters (`ip -s link`, what the previous reports used), which see a GSO burst as one frame with one header "
        "and read a full link a few per cent low.",
        "",
        "## What was not",
        "",
        "- Links are HTB-shaped veths and bridges on one machine (2 cores), at "
        f"{meta['scale_mbit_per_gbps']:g} Mbit/s per model Gbps; no latency emulation (no netem on this kernel).",
        "- Node names in the ring (`root://<node>:1094`) are resolved by the bench (the task is given node -> "
        "address): the real-node cluster's CoreDNS serves only cluster.local.",
        "- The two cache hosts share one host directory for their disk (one machine).",
        "- The Dask scheduler is a pod the bench runs beside a cache (the fleet names it in `schedulerAddress`): "
        "the fleet's own would take the second CPU of a worker node. The client submitting the tasks runs in a worker pod.",
        "- The topology is symmetric (one NVMe host and one worker host per switch): where the pods can go is "
        "almost fixed by the nodes, so (a) and (b) can differ in where the scheduler binds and in the routing weights only.",
        "",
        "## Placements, as the pods landed",
        "",
        "| run | placement | caches on | workers on | files' split over the cache hosts (per worker node) | warm-up |",
        "|---|---|---|---|---|---|",
    ]
    for i, run in enumerate(result["runs"], 1):
        p = run["placement"]
        lines.append(f"| {i} | {NAMES[run['placement_kind']]} | {', '.join(sorted(p['caches'].values()))} | "
                     f"{', '.join(sorted(p['workers'].values()))} | {json.dumps(run['split'])} | "
                     f"{run['warm']['reads']} files in {run['warm']['seconds']} s, {run['warm']['failed']} failed |")
    lines += [
        "",
        f"- The plan's status (placement (a)): LP prediction {plan.get('predictedGbps')} Gbps, the plan's own fair share "
        f"(ring weights) {plan.get('fairShareGbps')} Gbps, bound {plan.get('boundGbps')} Gbps, bottleneck "
        f"{plan.get('bottleneck')}.",
        "",
        "## Runs (model Gbps = Mbit/s measured / scale)",
        "",
        f"Each run: {args['windows']} windows of {args['window_seconds']:g} s after {args['warmup']:g} s of reading. "
        "Fair share: planner/fairshare.py fair_share for the placement that happened and the files' actual split. "
        f"Closed: bench/closed_network.py for {args['streams']} sequential readers per worker (bench/sequential_readers.py): "
        "the module's `delivered` (many-reader fixed point for two classes) / every reader in one pooled class solved "
        "exactly by convolution.",
        "",
        "| run | placement | repeat | windows (Gbps) | measured | fair share | measured ÷ fair | interface counters "
        "(÷ fair) | closed (fixed pt / exact) | measured ÷ closed | uplink drops (packets) | CPU busy max | softirq max "
        "| load max | valid |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, (run, row) in enumerate(zip(result["runs"], figures["rows"]), 1):
        s = run["summary"]
        lines.append(
            f"| {i} | {run['placement_kind']} | {run['repeat']} | {' / '.join(f'{d:.2f}' for d in s['delivered_gbps'])} | "
            f"{s['delivered_mean_gbps']:.2f} | {row['fair']:.2f} | **{row['ratio']:.3f}** | {_interface(run, row)} | "
            f"{row['closed']:.2f} / "
            f"{row['closed_exact']:.2f} | {row['measured'] / row['closed']:.3f} / {row['measured'] / row['closed_exact']:.3f} | "
            f"{sum(s.get('uplink_drops', {}).values())} | "
            f"{s['cpu_busy_max']:.0%} | {s['softirq_cores_max']:.2f} | {s['load_max']:.2f} | "
            f"{'valid' if s['valid'] else 'INVALID'} |")
    lines += ["", "Saturated links of the fair share, measured ÷ capacity (the fair share fills each to its capacity):", "",
              "| run | placement | " + " | ".join(_links(figures)) + " |", "|---|---|" + "---|" * len(_links(figures))]
    for i, row in enumerate(figures["rows"], 1):
        lines.append(f"| {i} | {row['kind']} | "
                     + " | ".join(f"{row['links'][k]:.3f}" if k in row["links"] else "-" for k in _links(figures)) + " |")
    lines += ["", _behind_full_hosts(result)]
    m, ab = figures["medians"], figures["a_over_b"]
    lines += [
        "",
        "## Medians over the valid runs",
        "",
        "| placement | runs | measured (Gbps) | fair share | measured ÷ fair | closed (fixed pt / exact) | saturated links, measured ÷ capacity |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in ("a", "b"):
        x = m[kind]
        lines.append(f"| {NAMES[kind]} | {x['runs']} | {x['measured']:.2f} | {x['fair']:.2f} | **{x['ratio']:.3f}** | "
                     f"{x['closed']:.2f} / {x['closed_exact']:.2f} | "
                     + ", ".join(f"{k} {v:.3f}" for k, v in x["links"].items()) + " |")
    pairs = [(ra["measured"], rb["measured"]) for ra, rb in zip(
        [r for r in figures["rows"] if r["kind"] == "a"], [r for r in figures["rows"] if r["kind"] == "b"])]
    lines += [
        "",
        f"- **Measured (a) ÷ (b)**: {ab['measured']:.3f} (medians); per repeat "
        + ", ".join(f"{a / b:.3f}" for a, b in pairs)
        + f". **Predicted (a) ÷ (b)**: fair share {ab['fair']:.3f}, closed network {ab['closed']:.3f} (fixed point) / "
        f"{ab['closed_exact']:.3f} (exact, pooled).",
        "",
        "## The sequential readers (closed network) beside the fair share",
        "",
        "Per placement, from the first run of each (the split does not change between repeats):",
        "",
        "| placement | readers per worker | worker caps without the hosts' serving (Gbps) | closed, fixed point | "
        "closed, exact pooled | fair share | fixed point ÷ fair | exact ÷ fair |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in ("a", "b"):
        run = next(r for r in result["runs"] if r["placement_kind"] == kind)
        fair = run["fair_share"]["delivered_gbps"]
        for k, c in run["closed"].items():
            lines.append(f"| {kind} | {k} | {c['worker_caps_gbps']} | {c['delivered_gbps']:.2f} | "
                         f"{c['exact_pooled_gbps']:.2f} | {fair:.2f} | {c['delivered_gbps'] / fair:.3f} | "
                         f"{c['exact_pooled_gbps'] / fair:.3f} |")
    lines += ["", "## Per run: uplinks and nodes (Gbps; measured / fair share)", "",
              "| run | placement | " + " | ".join(f"{sw} out | {sw} in" for sw in _switches(result)) + " | "
              + " | ".join(f"{n} out | {n} in" for n in _nodes(result)) + " | WAN out |",
              "|---|---|" + "---|" * (2 * len(_switches(result)) + 2 * len(_nodes(result)) + 1)]
    for i, run in enumerate(result["runs"], 1):
        s, fair = run["summary"], run["fair_share"]
        cells = [f"{s['uplinks'][sw][d]:.2f} / {fair['uplinks'].get(sw, {}).get(d, 0):.2f}"
                 for sw in _switches(result) for d in ("out", "in")]
        cells += [f"{s['hosts'][n]['out']:.2f}" + (f" / {fair['served'][n]:.2f}" if n in fair["served"] else "")
                  + f" | {s['hosts'][n]['in']:.2f}" for n in _nodes(result)]
        lines.append(f"| {i} | {run['placement_kind']} | " + " | ".join(cells) + f" | {s['wan_out_gbps']:.3f} |")
    paths = sorted({k for run in result["runs"] for k in run.get("occupancy", {})})
    lines += ["", "Paths (worker node <- cache host): the fraction of the windows' time with at least one reader on the "
              "path (mean readers on it). A sequential reader is on one host at a time; a path with none carries no "
              "byte, whatever its links could carry.", "",
              "| run | placement | " + " | ".join(paths) + " |", "|---|---|" + "---|" * len(paths)]
    workers = sorted({k.split("<-")[0] for k in paths})
    lines[-2] += " " + " | ".join(f"readers on {w}'s paths (of {args['streams']})" for w in workers) + " | errors |"
    lines[-1] += "---|" * (len(workers) + 1)
    for i, run in enumerate(result["runs"], 1):
        occ = run.get("occupancy", {})
        present = [sum(v["mean_readers"] for k, v in occ.items() if k.split("<-")[0] == w) for w in workers]
        recorded = all("errors" in r for r in run["reads"])   # runs before f0f5f31 did not record them
        errors = sum(len(r["errors"]) for r in run["reads"]) if recorded else "not recorded"
        lines.append(f"| {i} | {run['placement_kind']} | " + " | ".join(
            f"{occ[k]['busy']:.3f} ({occ[k]['mean_readers']:.2f})" if k in occ else "-" for k in paths) + " | "
            + " | ".join(f"{p:.2f}" for p in present) + f" | {errors} |")
    lines += ["", "Reads and the caches' exporters (bytes, after each run):", ""]
    for i, run in enumerate(result["runs"], 1):
        lines.append(f"- run {i} ({run['placement_kind']}): reads {json.dumps(run['reads'])}; exporters "
                     f"{json.dumps(run.get('exporter', {}))}")
    busy = max(r["summary"]["cpu_busy_max"] for r in result["runs"])
    soft = max(r["summary"]["softirq_cores_max"] for r in result["runs"])
    load = max(r["summary"]["load_max"] for r in result["runs"])
    invalid = [i for i, r in enumerate(result["runs"], 1) if not r["summary"]["valid"]]
    lines += [
        "",
        "## CPU validity",
        "",
        f"- Busiest window of all runs: {busy:.0%} of all cores (limit {meta['cpu_limit']:.0%}), softirq ≤ {soft:.2f} "
        f"cores, load ≤ {load:.2f}: "
        + (f"**runs {invalid} INVALID** (a window over the limit; left out of the medians)." if invalid
           else "**every run valid**."),
        "",
        "Full figures: the .json beside this file.",
    ]
    return "\n".join(lines) + "\n"


def _interface(run: dict, row: dict) -> str:
    s = run.get("summary_interface")
    return f"{s['delivered_mean_gbps']:.2f} ({s['delivered_mean_gbps'] / row['fair']:.3f})" if s else "-"


def _behind_full_hosts(result: dict) -> str:
    """What the product says of the full uplink directions: those behind full cache hosts (the plan's
    fullHostsBehind, planner/fairshare.py), where TCP gives the uplink less than the fluid fair share."""
    if any("full_hosts_behind" not in run["fair_share"] for run in result["runs"]):
        return "Full uplink directions behind full cache hosts (the plan's `fullHostsBehind`): not recorded by this run."
    flagged = {}
    for run in result["runs"]:
        for link, hosts in run["fair_share"]["full_hosts_behind"].items():
            flagged.setdefault(NAMES[run["placement_kind"]], {})[link] = hosts
    named = "; ".join(f"{kind}: " + ", ".join(f"{link} behind {', '.join(hosts)}" for link, hosts in sorted(links.items()))
                      for kind, links in sorted(flagged.items())) or "none"
    return ("Full uplink directions behind full cache hosts, as the product flags them (planner/fairshare.py "
            "`full_hosts_behind`, the plan's `fullHostsBehind`: two full links in tandem, where TCP gives the uplink "
            f"less than the fluid fair share; the emulated fabric read such directions 7.6-14.5% short): {named}.")


def _links(figures: dict) -> list[str]:
    return sorted({link for r in figures["rows"] for link in r["links"]})


def _switches(result: dict) -> list[str]:
    return sorted(result["runs"][0]["summary"]["uplinks"])


def _nodes(result: dict) -> list[str]:
    return sorted(result["runs"][0]["summary"]["hosts"])
