"""`switchyard plan`: the placement a facility gets on a topology, before touching a cluster.

    switchyard plan -f facility.yaml --topology topo.yaml [-o table|json|yaml|svg|png] [--compare]
    switchyard plan -f facility.yaml --from-cluster [--kubeconfig FILE]

Prints, per switch, the cache hosts, the workers per fleet, the routing, the
predicted uplink load in and out and the utilisation (the LP optimum's), and
beside them what competing TCP flows get (the fair share: what the switch's
caches serve, its uplink in and out); then the totals, the LP bound and the
gap to it (and, when the search stopped at its limit, that the plan is not
proven optimal), and the fair-share aggregate; last, the target against the
prediction and what binds it. All in link Gbps. Each default or override that
changes a figure is a `warning:` line on stderr (a `warnings` list in JSON).
Exit status: 0 planned, 1 valid but impossible (the reason is printed), 2
unusable input (one line naming the file and the field).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import yaml

from ..api import AnalysisFacilitySpec
from ..api.uplinkscore import IN, OUT
from ..planner import FleetRequest, Plan, PoolRequest, Unsatisfiable, baselines, plan
from ..planner.explain import full_both_ways, full_uplinks, idle_cache_nodes, link_words, shortfall
from ..planner.fairshare import PAYLOAD, with_fair_share
from ..topology import InputError, Topology, TopologyError, load_topology, node_info, read_yaml, snapshot
from ..topology import load_facility as load_facility_file


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="print the placement and predicted uplink load of a facility, offline",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-f", "--filename", required=True, help="AnalysisFacility YAML")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--topology", help="topology file (e2e/topologies/*.yaml format)")
    source.add_argument("--from-cluster", action="store_true", help="read the nodes of the current cluster")
    p.add_argument("--kubeconfig", help="kubeconfig for --from-cluster (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml", "svg", "png"), default="table",
                   help="svg, png: a picture of the facility instead of the table (needs switchyard[plot])")
    p.add_argument("--routing", choices=("local", "hashed", "auto"), help="override spec.routing")
    p.add_argument("--files", help="a list of file paths, one a line: ring readers' bytes split as rendezvous hashing "
                                   "spreads these files, instead of by the ring weights' average")
    p.add_argument("--compare", action="store_true",
                   help="also judge the default-scheduler and a random placement by the same flow model")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_facility(args.filename)
        files = load_files(args.files) if args.files else []
        if args.from_cluster:
            topology, notes = load_cluster(spec, args.kubeconfig)
        else:
            topology, notes = load_topology_file(args.topology, spec)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    notes += facility_warnings(spec, topology)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    pools = [PoolRequest(p.name, p) for p in spec.cache_pools]
    fleets = [FleetRequest(f.name, f) for f in spec.fleets]
    try:
        result = with_fair_share(topology, pools, fleets, plan(topology, pools, fleets, args.routing or spec.routing), files)
        compared = [with_fair_share(topology, pools, fleets, b, files)
                    for b in (_baselines(topology, pools, fleets, result) if args.compare else [])]
    except Unsatisfiable as exc:
        print(f"error: {exc.reason}: {exc.message}", file=sys.stderr)
        return 1
    against_target = shortfall(spec.target_gbps, result, topology, pools, fleets)
    choices = idle_cache_nodes(result, topology, pools)
    if gap_percent(result) > 1.0 and (args.routing or spec.routing) != "auto":
        # Which part of the gap the routing mode costs: the same nodes planned with per-switch routing.
        choices.append(gap_line(args.routing or spec.routing, result, plan(topology, pools, fleets, "auto")))
    if args.output in ("svg", "png"):
        return draw_picture(result, topology, [f.name for f in fleets], against_target, args.output)
    if args.output == "table":
        text = (table(result, topology, [f.name for f in fleets], compared, len(files))
                + routing_note(args.routing or spec.routing, result, topology)
                + "".join(f"note: {line}\n" for line in choices) + against_target + "\n")
    else:
        doc = {**document(result, topology, compared, len(files)), "targetGbps": spec.target_gbps,
               "target": against_target, "warnings": notes, "notes": choices}
        text = json.dumps(doc, indent=2) + "\n" if args.output == "json" else yaml.safe_dump(doc, sort_keys=False)
    write_stdout(text)
    return 0


def draw_picture(result: Plan, topology: Topology, fleets: list[str], title: str, fmt: str) -> int:
    try:
        from .plandraw import draw
    except ImportError:  # matplotlib is an extra: the operator image does without it
        print("error: -o svg|png needs matplotlib: pip install 'switchyard[plot]'", file=sys.stderr)
        return 2
    write_stdout(draw(result, topology, fleets, title, fmt))
    return 0


def write_stdout(output: str | bytes) -> None:
    """Print `output`; a reader that stops early (`| head`) ends the output quietly, as it does for other tools."""
    try:
        if isinstance(output, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(output)
        else:
            sys.stdout.write(output)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit: point stdout at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# ---------------------------------------------------------------- inputs

def load_facility(path: str) -> AnalysisFacilitySpec:
    return load_facility_file(path)[1]


def load_files(path: str) -> list[str]:
    try:
        text = pathlib.Path(path).read_text()
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def load_topology_file(path: str, spec: AnalysisFacilitySpec) -> tuple[Topology, list[str]]:
    """The topology file's nodes on the facility's network, and a warning for each figure one of them sets and
    the other overrides. The facility owns the network (uplinks, WAN, labels): it is what the operator plans
    with at a site; the file owns the nodes (their NICs)."""
    try:
        topo = load_topology(read_yaml(path) or {}, path)
    except TopologyError as exc:
        raise InputError(str(exc)) from None
    network = spec.network
    if topo.switch_label != network.switch_label:
        raise InputError(f"{path}: switchLabel: the file labels its nodes with {topo.switch_label}, the facility "
                         f"reads spec.network.switchLabel {network.switch_label}: no node would be on a switch")
    notes = []
    declared = {s.name: s.uplink_gbps for s in topo.switches}
    for switch in network.switches:
        if switch.name in declared and declared[switch.name] != switch.uplink_gbps:
            notes.append(f"uplink of {switch.name}: the facility says {switch.uplink_gbps:g} Gbps, {path} says "
                         f"{declared[switch.name]:g} Gbps: the plan uses the facility's")
    if "wan_gbps" in topo.model_fields_set and topo.wan_gbps != network.wan_gbps:
        notes.append(f"WAN: the facility says {network.wan_gbps:g} Gbps, {path} says {topo.wan_gbps:g} Gbps: "
                     "the plan uses the facility's")
    for i, switch in enumerate(topo.switches):
        for j, group in enumerate(switch.nodes):
            if "nic_gbps" not in group.model_fields_set:
                notes.append(f"{path}: switches[{i}].nodes[{j}] ({switch.name}/{group.name}, {group.count} node(s)): "
                             f"no nicGbps: {group.nic_gbps:g} Gbps assumed")
    return snapshot(topo.node_infos(), network, spec.outside_readers), notes


def load_cluster(spec: AnalysisFacilitySpec, kubeconfig: str | None) -> tuple[Topology, list[str]]:
    """The current cluster's nodes, as the operator's node index would see them, and a warning for the nodes
    whose NIC speed is the facility's default."""
    from ..apply import Kube

    try:
        items = Kube.from_environment(kubeconfig).list("Node")
    except Exception as exc:  # no kubeconfig, unreachable API server, forbidden...
        raise InputError(f"--from-cluster: cannot list nodes: {exc}") from None
    network = spec.network
    nodes = [node_info(n, network.nic_gbps_annotation) for n in items]
    topology = snapshot(nodes, network, spec.outside_readers)
    placed = {h.name for h in topology.hosts}
    guessed = sorted(n.name for n in nodes if n.name in placed and n.nic(network.nic_gbps_annotation) is None)
    notes = [f"{len(guessed)} node(s) have no {network.nic_gbps_annotation} annotation: spec.network.defaultNicGbps "
             f"{network.default_nic_gbps:g} Gbps assumed ({', '.join(guessed[:5])}{', ...' if len(guessed) > 5 else ''})"
             ] if guessed else []
    return topology, notes


def facility_warnings(spec: AnalysisFacilitySpec, topology: Topology) -> list[str]:
    """What the facility leaves to a default or to nothing, on these nodes: each changes the figures."""
    notes = []
    if topology.unknown_switch_nodes:
        names = ", ".join(topology.unknown_switch_nodes[:5])
        notes.append(f"{len(topology.unknown_switch_nodes)} node(s) sit on switches spec.network.switches does not "
                     f"declare, and are left out: {names}")
    for switch in topology.switches:
        if not switch.hosts and not topology.outside_on(switch.name):   # outside readers only: as declared
            notes.append(f"switch {switch.name}: no schedulable node carries {spec.network.switch_label}={switch.name}: "
                         "nothing is placed behind it")
    if not spec.cache_pools:
        notes.append("spec.cachePools is empty: no cache, every read crosses the WAN to the origin")
    for pool in spec.cache_pools:
        if not any(h.has_nvme(pool.nvme_label) for h in topology.hosts):
            notes.append(f"pool {pool.name}: no node on the facility's switches carries its nvmeLabel {pool.nvme_label}")
    if not spec.fleets and not spec.outside_readers:
        notes.append("spec.fleets is empty: no workers, nothing reads")
    return notes


def _baselines(topology: Topology, pools, fleets, result: Plan) -> list[Plan]:
    return [
        baselines.default_scheduler(topology, pools, fleets, bound=result.bound_gbps),
        baselines.random_placement(topology, pools, fleets, seed=0, bound=result.bound_gbps),
    ]


# ---------------------------------------------------------------- outputs

def gap_percent(result: Plan) -> float:
    return round(100.0 * (1 - result.predicted_gbps / result.bound_gbps), 2) if result.bound_gbps else 0.0


def switch_rows(result: Plan, topology: Topology) -> list[dict]:
    placement = result.placement
    rows = []
    for sw in topology.switches:
        load = result.uplink(sw.name)
        rows.append({
            "name": sw.name,
            "uplinkGbps": sw.uplink_gbps,
            "nodes": len(sw.hosts),
            "caches": {p: list(by[sw.name]) for p, by in sorted(placement.caches.items()) if sw.name in by},
            "workers": {f: by[sw.name] for f, by in sorted(placement.workers.items()) if by.get(sw.name)},
            "ringWorkers": {f: by[sw.name] for f, by in sorted(placement.hashed.items()) if by.get(sw.name)},
            "routing": result.routing.get(sw.name, "local"),
            "inGbps": load.in_gbps,
            "outGbps": load.out_gbps,
            "utilisation": round(load.utilisation, 4),
        })
        if result.fair:
            rows[-1].update({"serveGbps": result.fair.switch_served.get(sw.name, 0.0),
                             "fairInGbps": result.fair.uplinks[sw.name][IN],
                             "fairOutGbps": result.fair.uplinks[sw.name][OUT]})
        if topology.outside:
            rows[-1].update(outside_row(result, topology.outside_on(sw.name), sw.name))
    return rows


def outside_row(result: Plan, groups, switch: str) -> dict:
    """A switch's readers outside Kubernetes (spec.outsideReaders), apart from its pods: how many per group,
    what they would read and (with the fair share) what they get."""
    row = {"outsideReaders": {g.name: g.count for g in groups},
           "outsideGbps": round(sum(g.demand_gbps for g in groups), 3)}
    if result.fair:
        row["outsideFairGbps"] = result.fair.outside.get(switch, 0.0)
    return row


def document(result: Plan, topology: Topology, compared: list[Plan] = (), files: int = 0) -> dict:
    doc = {
        "planner": result.planner,
        "predictedGbps": result.predicted_gbps,
        "demandGbps": result.demand_gbps,
        "boundGbps": result.bound_gbps,
        "gapPercent": gap_percent(result),
        "optimal": result.optimal,
        "bottleneck": result.bottleneck,
        "peakUtilisation": round(result.peak, 4),
        "switches": switch_rows(result, topology),
        "hashWeights": {p: {h: abs(v) if v == 0 else v for h, v in w.items()} for p, w in sorted(result.hash_weights.items())},
        "unplaced": dict(result.unplaced),
    }
    if result.fair:
        doc["fairShareGbps"] = result.fair.delivered_gbps
        doc["fairShare"] = {"gbps": result.fair.delivered_gbps, "saturated": list(result.fair.saturated),
                            "servedByHost": dict(result.fair.served),
                            "ringSplit": {p: dict(s) for p, s in result.fair.ring_split.items()}, "files": files,
                            "fullHostsBehind": {link: list(h) for link, h in result.fair.full_hosts_behind.items()},
                            "fullBothWays": list(full_both_ways(result.fair))}
    if compared:
        doc["baselines"] = [{"planner": b.planner, "predictedGbps": b.predicted_gbps,
                             **({"fairShareGbps": b.fair.delivered_gbps} if b.fair else {}),
                             "peakUtilisation": round(b.peak, 4),
                             "bottleneck": b.bottleneck} for b in compared]
    return doc


def tandem_line(link: str, hosts: tuple[str, ...]) -> str:
    """A full uplink direction whose flows also come from full cache hosts: TCP leaves it below the fair share."""
    named = ", ".join(hosts[:3]) + (f" (+{len(hosts) - 3})" if len(hosts) > 3 else "")
    return (f"caution: the {link_words(link)} is full and its flows also come from {len(hosts)} cache host(s) at "
            f"their cap ({named}): TCP gives flows that queue at both less of the host, so expect less than the fair "
            "share there (fewer workers behind that uplink, or more cache hosts, avoid it)")


def both_ways_line(switch: str) -> str:
    """An uplink full in both directions: each direction's ACKs queue behind the other's data."""
    return (f"caution: the {switch} uplink is full in both directions: each direction's ACKs wait behind the other's "
            "data, and cache nodes that send with TCP BBR carried 0.75-0.86 of such an uplink on real pods (CUBIC "
            "0.94-0.99); check net.ipv4.tcp_congestion_control on the cache nodes")


def ring_split_line(pool: str, split: dict, weights: dict, files: int) -> str:
    """How far the split of the given files is from the ring's weights, at the host it is farthest."""
    total = sum(weights.values()) or 1.0
    host = max(split, key=lambda h: (abs(split[h] - weights.get(h, 0.0) / total), h))
    return (f"ring of pool {pool}: the split of {files} files is up to {abs(split[host] - weights.get(host, 0.0) / total):.4f} "
            f"off its weights ({host}: {split[host]:.4f} of the files, weight {weights.get(host, 0.0) / total:.4f})")


def gap_line(requested: str, result: Plan, auto: Plan) -> str:
    """The gap to the bound split between the routing mode and the search, from a plan with routing auto."""
    routing = max(0.0, auto.predicted_gbps - result.predicted_gbps)
    return (f"the gap of {gap_percent(result):g}%: with routing auto the same nodes plan {auto.predicted_gbps:.1f} Gbps, "
            f"so routing {requested} costs about {routing:.1f} Gbps and the search leaves at most "
            f"{max(0.0, result.bound_gbps - max(auto.predicted_gbps, result.predicted_gbps)):.1f} Gbps below the bound")


def routing_note(requested: str, result: Plan, topology: Topology) -> str:
    """Under routing local, the switches without a cache whose workers the plan sends through the ring: what
    those workers are told (SWITCHYARD_ROUTING=hashed), beside the mode the facility asked for."""
    ringed = [s.name for s in topology.switches if result.routing.get(s.name) == "hashed"
              and result.placement.worker_count(s.name)]      # not a switch of outside readers alone
    if requested != "local" or not ringed:
        return ""
    return (f"routing local: {', '.join(ringed[:5])}{' (+%d)' % (len(ringed) - 5) if len(ringed) > 5 else ''} "
            "hold no cache of the pool, so their workers read through the ring (told hashed), one home per file\n")


def table(result: Plan, topology: Topology, fleets: list[str], compared: list[Plan] = (), files: int = 0) -> str:
    rows = switch_rows(result, topology)
    fair = ["serveGbps", "fairInGbps", "fairOutGbps"] if result.fair else []
    # readers outside Kubernetes, apart from the pods: only when the facility declares some
    outside = (["outsideGbps"] + (["outsideFairGbps"] if result.fair else [])) if topology.outside else []
    header = (["SWITCH", "UPLINK", "CACHES"] + [f"W:{f}" for f in fleets] + ["RING"]
              + (["OUTSIDE", "OUTSIDE-GBPS"] + (["OUTSIDE-FAIR"] if result.fair else []) if outside else [])
              + ["ROUTING", "IN", "OUT", "UTIL"] + (["SERVE", "FAIR-IN", "FAIR-OUT"] if fair else []))
    body = []
    for r in rows:
        body.append([r["name"], f"{r['uplinkGbps']:g}", str(sum(len(n) for n in r["caches"].values()))]
                    + [str(r["workers"].get(f, 0)) for f in fleets] + [str(sum(r["ringWorkers"].values()))]
                    + ([str(sum(r["outsideReaders"].values()))] + [f"{r[k]:.1f}" for k in outside] if outside else [])
                    + [r["routing"], f"{r['inGbps']:.1f}", f"{r['outGbps']:.1f}",
                       f"{100 * r['utilisation']:.1f}%"] + [f"{r[k]:.1f}" for k in fair])
    peak = round(result.peak, 4)    # as each row's utilisation
    body.append(["TOTAL", f"{sum(r['uplinkGbps'] for r in rows):g}", str(sum(len(n) for r in rows for n in r["caches"].values()))]
                + [str(sum(r["workers"].get(f, 0) for r in rows)) for f in fleets]
                + [str(sum(sum(r["ringWorkers"].values()) for r in rows))]
                + ([str(sum(sum(r["outsideReaders"].values()) for r in rows))]
                   + [f"{sum(r[k] for r in rows):.1f}" for k in outside] if outside else [])
                + ["", f"{sum(r['inGbps'] for r in rows):.1f}",
                   f"{sum(r['outGbps'] for r in rows):.1f}", f"{100 * peak:.1f}% peak"]
                + [f"{sum(r[k] for r in rows):.1f}" for k in fair])
    widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header] + body]
    lines.append("")
    bottleneck = "; ".join(full_uplinks(result)) if result.bottleneck.startswith("uplink") else result.bottleneck
    lines.append(f"predicted {result.predicted_gbps:.1f} Gbps of {result.demand_gbps:.1f} Gbps demanded (LP optimum); "
                 f"bound {result.bound_gbps:.1f} Gbps (gap {gap_percent(result):g}%"
                 f"{'' if result.optimal else ', not proven optimal'}); bottleneck: {bottleneck}; "
                 f"planner: {result.planner}")
    if result.fair:
        saturated = [link_words(link) for link in result.fair.saturated]
        full = "; ".join(saturated[:4]) + (f" (+{len(saturated) - 4})" if len(saturated) > 4 else "")
        lines.append(f"fair share {result.fair.delivered_gbps:.1f} Gbps: what competing TCP flows get with this placement "
                     f"(per-host serving; the LP optimum above is the best the routing allows); full: {full or 'nothing'}")
        lines.append(f"all figures are link Gbps: a full link delivers ~{PAYLOAD:.3f} of it as TCP payload at 1500 MTU")
        lines += [tandem_line(link, hosts) for link, hosts in result.fair.full_hosts_behind.items()]
        lines += [both_ways_line(switch) for switch in full_both_ways(result.fair)]
        if files:
            lines += [ring_split_line(pool, split, result.hash_weights.get(pool) or split, files)
                      for pool, split in result.fair.ring_split.items() if split]
    for fleet, count in result.unplaced.items():
        lines.append(f"unplaced: fleet {fleet}: {count} worker(s) fit on no node")
    for b in compared:
        ratio = result.predicted_gbps / b.predicted_gbps if b.predicted_gbps else float("inf")
        fair = f", fair share {b.fair.delivered_gbps:g} Gbps" if b.fair else ""
        lines.append(f"baseline {b.planner}: {b.predicted_gbps:g} Gbps{fair} (this plan: {ratio:.2f}x), "
                     f"peak utilisation {100 * b.peak:.1f}%, "
                     f"bottleneck: {b.bottleneck}")
    return "\n".join(lines) + "\n"
