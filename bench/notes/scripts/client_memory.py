"""Import-time resident memory: switchyard's own API client beside lightkube (issue 28 item 8).

Fresh interpreters of the development venv, the kubernetes client libraries hidden as the
operator image has none (e2e/localcluster.operator_command), the variants alternating
`--runs` times; each prints its VmRSS (and ru_maxrss) once its imports are done. lightkube
1.0.1 and the packages it adds to the venv's (httpx2, httpcore2, h2, hpack, hyperframe,
wsproto, msgspec, truststore; pinned as resolved on 2026-11-26) are installed with pip into
LIGHTKUBE_DIR once and put on PYTHONPATH for the lightkube variants only.

    python3 bench/notes/scripts/client_memory.py [--runs 7]    # prints a Markdown table

The operator's RSS at scale with each client is measured by bench/fleet_bench.py in two
worktrees (docs/architecture.md, "Why a hand-written client").
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
PY = str(ROOT / ".venv" / "bin" / "python")
LIGHTKUBE_DIR = pathlib.Path.home() / ".cache" / "switchyard" / "lightkube-1.0.1"
PACKAGES = ["lightkube==1.0.1", "lightkube-models==1.37.0.8", "httpx2==2.16.2", "httpcore2==2.16.2", "h2==4.4.1",
            "hpack==4.2.0", "hyperframe==6.1.0", "wsproto==1.3.2", "msgspec==0.22.0", "truststore==0.10.5"]
HIDE = "import sys; sys.modules.update(dict.fromkeys(('kubernetes', 'kubernetes_asyncio', 'pykube')));"
REPORT = ("import re, resource; print(int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read())[1]),"
          " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
OPERATOR = "import kopf, switchyard.cli, switchyard.handlers, switchyard.leader, switchyard.apply;"
LIGHTKUBE = ("import lightkube, lightkube.generic_resource, lightkube.resources.core_v1, lightkube.resources.apps_v1,"
             " lightkube.resources.policy_v1, lightkube.resources.networking_v1, lightkube.resources.coordination_v1;")
KUBECONFIG = ROOT / "bench" / "notes" / "scripts" / "client_memory.kubeconfig"
SWITCHYARD_CLIENT = f"switchyard.apply.Kube.from_environment({str(KUBECONFIG)!r});"
LIGHTKUBE_CLIENT = f"lightkube.Client(lightkube.KubeConfig.from_file({str(KUBECONFIG)!r}));"
# (label, code, lightkube on the path)
VARIANTS = [
    ("python alone", "", False),
    ("switchyard.apply (with kubeconfig, urllib3 and switchyard.api)", "import switchyard.apply;", False),
    ("lightkube with the models of the kinds switchyard writes", LIGHTKUBE, True),
    ("the operator's modules, switchyard's client made", OPERATOR + SWITCHYARD_CLIENT, False),
    ("the operator's modules + lightkube, its client made", OPERATOR + LIGHTKUBE + LIGHTKUBE_CLIENT, True),
]


def install() -> None:
    if not (LIGHTKUBE_DIR / "lightkube").is_dir():
        subprocess.run([PY, "-m", "pip", "install", "-q", "--no-deps", "--target", str(LIGHTKUBE_DIR), *PACKAGES],
                       check=True)


def measure(code: str, lightkube: bool) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if lightkube:
        env["PYTHONPATH"] = str(LIGHTKUBE_DIR)
    out = subprocess.run([PY, "-c", HIDE + code + REPORT], env=env, capture_output=True, text=True, check=True,
                         cwd=ROOT / "operator").stdout.split()
    return int(out[0]) / 1024, int(out[1]) / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    install()
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in VARIANTS}
    for _ in range(args.runs):
        for label, code, lightkube in VARIANTS:
            runs[label].append(measure(code, lightkube))
    print(f"| imported ({args.runs} fresh processes each, alternating) | VmRSS median (min-max) MiB | ru_maxrss median MiB |")
    print("|---|---|---|")
    for label, values in runs.items():
        rss = [v[0] for v in values]
        print(f"| {label} | {statistics.median(rss):.1f} ({min(rss):.1f}-{max(rss):.1f}) | "
              f"{statistics.median(v[1] for v in values):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
