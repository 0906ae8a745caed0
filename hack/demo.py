"""`make demo` / `make down`: the local simulated facility, end to end.

up: build or reuse the tools, start the cluster on e2e/topologies/mini.yaml,
install the CRDs, run the operator in the background, apply
examples/facility.yaml, wait until it is Ready and print the placement.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "e2e"))
import localcluster  # noqa: E402

# A test runs the demo beside other clusters: its name and the operator's ports can be set (e2e/test_demo.py).
NAME = os.environ.get("SWITCHYARD_DEMO_CLUSTER", "switchyard-demo")
STATE = localcluster.CACHE / ("demo" if NAME == "switchyard-demo" else NAME)
PIDFILE = STATE / "operator.pid"
LOGFILE = STATE / "operator.log"
METRICS_PORT = int(os.environ.get("SWITCHYARD_DEMO_METRICS_PORT", "8080"))
HEALTH_PORT = int(os.environ.get("SWITCHYARD_DEMO_HEALTH_PORT", "8081"))


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def stop_operator() -> None:
    if PIDFILE.exists():
        try:
            os.killpg(int(PIDFILE.read_text()), signal.SIGTERM)
        except (ProcessLookupError, ValueError, PermissionError):
            pass
        PIDFILE.unlink()


def start_operator(kubeconfig: pathlib.Path) -> None:
    stop_operator()
    STATE.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SWITCHYARD_TIMER_SECONDS": "3"}
    with LOGFILE.open("w") as log:
        proc = subprocess.Popen(
            [*localcluster.operator_command(), "run", "--kubeconfig", str(kubeconfig),
             "--metrics-port", str(METRICS_PORT), "--health-port", str(HEALTH_PORT)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    PIDFILE.write_text(str(proc.pid))


def wait_ready(timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        out = localcluster.kubectl(NAME, "get", "analysisfacility", "demo", "-n", "default", "-o", "json", check=False)
        conds = json.loads(out).get("status", {}).get("conditions", []) if out else []
        ready = next((c for c in conds if c["type"] == "Ready"), None)
        if ready and ready["status"] == "True":
            return
        line = f"Ready={ready['status']} ({ready['reason']}) {ready.get('message', '')}" if ready else "waiting for the operator"
        if line != last:
            print(f"    {line}", flush=True)
            last = line
        time.sleep(2)
    raise TimeoutError(f"facility not Ready after {timeout:.0f}s; see {LOGFILE}")


def show_placement() -> None:
    print(localcluster.kubectl(NAME, "get", "analysisfacility,xcachepools,workerfleets", "-n", "default"))
    # The plan against the facility's target, and what binds it: status.plan.target, as `switchyard plan` says it.
    print(localcluster.kubectl(NAME, "get", "analysisfacility", "demo", "-n", "default",
                               "-o", "jsonpath={.status.plan.target}") + "\n")
    pods = json.loads(localcluster.kubectl(NAME, "get", "pods", "-n", "default", "-o", "json"))["items"]
    nodes = json.loads(localcluster.kubectl(NAME, "get", "nodes", "-o", "json"))["items"]
    switch_of = {n["metadata"]["name"]: n["metadata"]["labels"].get("switchyard.dev/switch", "?") for n in nodes}
    table: dict[str, dict[str, int]] = {}
    for pod in pods:
        if pod.get("status", {}).get("phase") != "Running":
            continue
        component = pod["metadata"].get("labels", {}).get("app.kubernetes.io/component", "other")
        switch = switch_of.get(pod["spec"].get("nodeName", ""), "?")
        table.setdefault(switch, {}).setdefault(component, 0)
        table[switch][component] += 1
    print("Running pods per switch (where the real scheduler bound them):")
    for switch in sorted(table):
        print(f"  {switch:10s} " + "  ".join(f"{c}={n}" for c, n in sorted(table[switch].items())))


def up() -> int:
    step("building or reusing the local cluster tools (the first build takes about 10 minutes)")
    localcluster.tools()
    step("starting the local cluster on e2e/topologies/mini.yaml")
    kubeconfig = localcluster.up(NAME, REPO / "e2e" / "topologies" / "mini.yaml")
    step("installing the CRDs")
    localcluster.install_crds(NAME)
    step("starting the operator")
    start_operator(kubeconfig)
    step("applying examples/facility.yaml")
    localcluster.kubectl(NAME, "apply", "-f", str(REPO / "examples" / "facility.yaml"))
    step("waiting for the facility to be Ready")
    wait_ready()
    show_placement()
    print(f"""
The demo is running and stays up until `make down`.
  kubectl:   export KUBECONFIG={kubeconfig}
             kubectl get analysisfacility demo; kubectl describe analysisfacility demo
  operator:  logs in {LOGFILE}
  metrics:   http://127.0.0.1:{METRICS_PORT}/metrics  (switchyard_plan_* gauges)
""")
    return 0


def down() -> int:
    stop_operator()
    localcluster.down(NAME)
    return 0


if __name__ == "__main__":
    try:
        sys.exit({"up": up, "down": down}[sys.argv[1]]())
    except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
