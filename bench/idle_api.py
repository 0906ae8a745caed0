"""API requests an idle operator makes: one Ready facility, nothing changing, for a minute.

On a local control plane (kwokctl binary runtime) with an audit log, the
operator (`switchyard run`, default timers: 5 s ticks, 60 s resync) runs
`examples/facility.yaml` on the mini topology until it is Ready, waits for it
to settle, then the requests it sends (user agents `switchyard` and `kopf`)
are counted from the kube-apiserver's audit log over `--seconds`, by verb and
resource. Counts, not times: a loaded machine changes them little.

    python bench/idle_api.py [--seconds 60] [--label after]   # writes bench/results/idle-api.md
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import pathlib
import sys
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))
import localcluster  # noqa: E402
from fleet_bench import PY, audit_events, kwok_config, start_process, stop_process  # noqa: E402
from headline import about  # noqa: E402

NAME = "switchyard-idle"
TOPOLOGY = ROOT / "e2e" / "topologies" / "mini.yaml"
RESULTS = ROOT / "bench" / "results"
AGENTS = ("switchyard", "kopf")


def log(msg: str) -> None:
    print(f"[idle-api] {msg}", file=sys.stderr, flush=True)


def audit_log() -> pathlib.Path:
    base = pathlib.Path.home() / ".kwok" / "clusters" / NAME
    found = sorted(base.rglob("audit*.log"))
    if not found:
        raise RuntimeError(f"no audit log under {base}")
    return found[0]


def operator_requests(path: pathlib.Path, since: dt.datetime, until: dt.datetime) -> collections.Counter:
    """(verb, resource) of every request the operator sent inside [since, until]."""
    counts: collections.Counter = collections.Counter()
    for event in audit_events(path, since, until).values():
        if (event.get("userAgent") or "").split("/")[0].split(" ")[0].lower() in AGENTS:
            ref = event.get("objectRef") or {}
            counts[(event.get("verb", "?"), ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else ""))] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--settle", type=float, default=20, help="seconds after Ready before counting")
    parser.add_argument("--label", default="now", help="the row's name in the report (e.g. before, after)")
    parser.add_argument("--out", default=str(RESULTS / "idle-api.md"))
    args = parser.parse_args(argv)

    workdir = localcluster.CACHE / "clusters" / NAME
    config = kwok_config(workdir)
    localcluster.down(NAME)
    kubeconfig = localcluster.up(NAME, TOPOLOGY, config=config)
    localcluster.install_crds(NAME)
    proc = start_process([*localcluster.operator_command(PY), "run", "--kubeconfig", str(kubeconfig),
                          "--metrics-port", "0", "--health-port", "0"], workdir / "operator.log")
    try:
        localcluster.kubectl(NAME, "apply", "-f", str(ROOT / "examples" / "facility.yaml"))
        doc = yaml.safe_load((ROOT / "examples" / "facility.yaml").read_text())
        name, namespace = doc["metadata"]["name"], doc["metadata"].get("namespace", "default")
        start = time.monotonic()
        while "True" not in localcluster.kubectl(NAME, "get", "analysisfacility", name, "-n", namespace, "-o",
                                                 "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False):
            if time.monotonic() - start > 300 or proc.poll() is not None:
                raise TimeoutError(f"facility not Ready (see {workdir / 'operator.log'})")
            time.sleep(1)
        time.sleep(args.settle)
        since = dt.datetime.now(dt.timezone.utc)
        time.sleep(args.seconds)
        until = dt.datetime.now(dt.timezone.utc)
        time.sleep(3)  # let the audit backend flush
        counts = operator_requests(audit_log(), since, until)
    finally:
        stop_process(proc)
        localcluster.down(NAME)
    per_minute = {f"{verb} {resource}": round(n * 60 / args.seconds, 1) for (verb, resource), n in sorted(counts.items())}
    total = round(sum(counts.values()) * 60 / args.seconds, 1)
    log(f"{args.label}: {total} requests per idle minute")
    out = pathlib.Path(args.out)
    data_path = out.with_suffix(".json")
    data = json.loads(data_path.read_text()) if data_path.exists() else {}
    data[args.label] = {"total_per_minute": total, "by_request": per_minute, "seconds": args.seconds,
                        "measured_at": until.strftime("%Y-%m-%dT%H:%M:%SZ")}
    data_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    lines = ["# API requests of an idle operator", "",
             *about("the API requests an idle operator sends per minute, one facility Ready, from the kube-apiserver's "
                    "audit log; one row per labelled run",
                    "`python bench/idle_api.py --label LABEL` (adds or replaces that row)",
                    f"{max(row['measured_at'] for row in data.values())} (the newest row; the label names its code)"),
             "Generated by `python bench/idle_api.py --label LABEL` (see its docstring): requests the operator sent "
             "(user agents `switchyard`, `kopf`) per minute while `examples/facility.yaml` stood Ready on the mini "
             "topology, counted from the kube-apiserver's audit log. Default timers (5 s ticks, 60 s resync).", "",
             "| run | requests per idle minute | by request (per minute) | measured at |", "|---|---:|---|---|"]
    for label, row in data.items():
        detail = ", ".join(f"{k}: {v:g}" for k, v in row["by_request"].items()) or "none"
        lines.append(f"| {label} | {row['total_per_minute']:g} | {detail} | {row['measured_at']} |")
    out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
