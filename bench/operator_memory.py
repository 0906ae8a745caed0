"""The operator's resident memory with and without a Kubernetes client library importable.

switchyard reaches the API server with urllib3 (switchyard.kubeconfig); kopf imports
the `kubernetes` library by itself whenever it is importable. On a local control
plane with `examples/facility.yaml` Ready on the mini topology, the operator
(`switchyard run`, default timers) is started in turn as the image now runs it (no
client library) and as the image ran it before (the `kubernetes` library installed;
kopf logs in through it), alternating, `--repeats` times each. VmRSS is sampled from
/proc every second for `--seconds` after a settle period; the report gives each run's
median and maximum and the ratio of the medians.

    python bench/operator_memory.py [--repeats 2] [--seconds 30]   # writes bench/results/operator-memory.md
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))
import localcluster  # noqa: E402
from fleet_bench import PY, RssSampler, start_process, stop_process  # noqa: E402
from headline import about  # noqa: E402

NAME = "sy-memory"
TOPOLOGY = ROOT / "e2e" / "topologies" / "mini.yaml"
RESULTS = ROOT / "bench" / "results"
MIB = 2**20


def variants() -> dict[str, list[str]]:
    production = localcluster.operator_command(PY)
    # The image before: `kubernetes` installed (kopf imports it and logs in through it), nothing else.
    before = [PY, "-c", "import sys; sys.modules.update(dict.fromkeys(('kubernetes_asyncio', 'pykube'))); "
              "from switchyard.cli import main; sys.exit(main())"]
    return {"no client library (the image now)": production, "kubernetes library importable (the image before)": before}


def log(msg: str) -> None:
    print(f"[operator-memory] {msg}", file=sys.stderr, flush=True)


def ready(name: str, namespace: str) -> bool:
    return "True" in localcluster.kubectl(NAME, "get", "analysisfacility", name, "-n", namespace, "-o",
                                          "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)


def measure(command: list[str], kubeconfig: pathlib.Path, logfile: pathlib.Path, settle: float, seconds: float) -> list[int]:
    proc = start_process([*command, "run", "--kubeconfig", str(kubeconfig), "--metrics-port", "0", "--health-port", "0"],
                         logfile)
    try:
        time.sleep(settle)
        if proc.poll() is not None:
            raise RuntimeError(f"the operator exited: {logfile.read_text()[-2000:]}")
        sampler = RssSampler(proc.pid)
        sampler.start()
        time.sleep(seconds)
        sampler.stop.set()
        sampler.join()
        return [rss for _, rss in sampler.samples]
    finally:
        stop_process(proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--settle", type=float, default=20)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--out", default=str(RESULTS / "operator-memory.md"))
    args = parser.parse_args(argv)

    workdir = localcluster.CACHE / "clusters" / NAME
    workdir.mkdir(parents=True, exist_ok=True)
    localcluster.down(NAME)
    kubeconfig = localcluster.up(NAME, TOPOLOGY)
    localcluster.install_crds(NAME)
    runs: dict[str, list[dict]] = {label: [] for label in variants()}
    try:
        localcluster.kubectl(NAME, "apply", "-f", str(ROOT / "examples" / "facility.yaml"))
        name, namespace = "demo", "default"
        # Warm-up (not counted): the first operator creates the children and makes the facility Ready.
        proc = start_process([*localcluster.operator_command(PY), "run", "--kubeconfig", str(kubeconfig),
                              "--metrics-port", "0", "--health-port", "0"], workdir / "warmup.log")
        try:
            deadline = time.monotonic() + 300
            while not ready(name, namespace):
                if time.monotonic() > deadline:
                    raise RuntimeError("the facility did not become Ready")
                time.sleep(2)
        finally:
            stop_process(proc)
        for repeat in range(args.repeats):
            for label, command in variants().items():
                samples = measure(command, kubeconfig, workdir / f"operator-{repeat}-{len(runs[label])}.log",
                                  args.settle, args.seconds)
                if not ready(name, namespace):
                    raise RuntimeError(f"the facility is not Ready after the run of {label!r}")
                runs[label].append({"median_mib": round(statistics.median(samples) / MIB, 1),
                                    "max_mib": round(max(samples) / MIB, 1), "samples": len(samples)})
                log(f"{label}: {runs[label][-1]}")
    finally:
        localcluster.down(NAME)

    load = os.getloadavg()
    labels = list(runs)
    medians = {label: statistics.median(r["median_mib"] for r in runs[label]) for label in labels}
    lines = [
        "# Operator memory: with and without a Kubernetes client library",
        "",
        *about("the operator's RSS with one facility Ready on the mini topology, with and without a Kubernetes client "
               "library importable", "`python bench/operator_memory.py`"),
        f"`python bench/operator_memory.py --repeats {args.repeats} --seconds {args.seconds:g}` on "
        f"{platform.node()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at the end "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}.",
        "",
        "One facility (`examples/facility.yaml`) Ready on the mini topology (12 simulated nodes); the operator "
        f"restarted for each run, VmRSS sampled every second for {args.seconds:g} s after {args.settle:g} s; "
        "the variants alternate.",
        "",
        "| operator | runs: median (max) MiB | median of runs |",
        "|---|---|---|",
    ]
    for label in labels:
        cells = ", ".join(f"{r['median_mib']} ({r['max_mib']})" for r in runs[label])
        lines.append(f"| {label} | {cells} | {medians[label]:.1f} MiB |")
    lines += ["", f"Ratio (now / before): **{medians[labels[0]] / medians[labels[1]]:.2f}**.", ""]
    out = pathlib.Path(args.out)
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps({"runs": runs, "load": load}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
