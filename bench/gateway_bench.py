#!/usr/bin/env python3
"""make bench-gateway: 500 workers through dask-gateway, switchyard's backend against the gateway's own.

One simulated cluster (kwokctl binary runtime: real kube-apiserver,
controller-manager, scheduler and etcd; kwok marks bound pods Running), the
control plane's client limits raised as in bench-fleet, and two real
`dask-gateway-server` processes on it:

  (sy)   c.DaskGateway.backend_class = switchyard.gateway.backend.SwitchyardBackend,
         with the switchyard operator running and an AnalysisFacility Ready: a
         gateway cluster is a WorkerFleet placed by the facility's plan;
  (kube) c.DaskGateway.backend_class = dask_gateway_server.backends.kubernetes.KubeBackend,
         with its controller run locally (`dask-gateway-server kube-controller`): a
         gateway cluster is a DaskCluster whose controller creates the pods.

Each run, as an analyst: `Gateway(...).submit()`, then (not timed) the scheduler
the backend asked for is run here for real from its pod spec (kwok nodes run
nothing; its Secret's files where the kubelet would mount them, only the ports
change), `Gateway.connect()` returns when the cluster is RUNNING, and the clock
runs from `cluster.scale(N)` to N worker pods Running as the API server reports
them. In between, for both backends alike: the gateway forwards the scale to the
scheduler's API, the scheduler heartbeats the new count to the gateway, the
backend writes it (the WorkerFleet's scale subresource / the DaskCluster's
spec.replicas), and the operator / controller makes the pods. Then shutdown and
wait until every worker pod is gone. The two backends alternate; the report is
bench/results/gateway.md (+ .json), every figure from the run.

Usage: python bench/gateway_bench.py [--workers 500] [--repeats 3] [--settings unthrottled,defaults]
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import fleet_bench  # noqa: E402  (its kwok config, process helpers; sets up the e2e import path)
import localcluster  # noqa: E402
from gateway_local import free_port, switchyard_config, wait_gateway  # noqa: E402
from support import wait_for  # noqa: E402
from headline import about  # noqa: E402

NAME = "sy-gwbench"
NS_SY, NS_KUBE = "gw-sy", "gw-kube"
SY_INSTANCE, KUBE_INSTANCE = "bench-sy", "bench-kube"
BIN = ROOT / ".venv" / "bin"
PY = str(BIN / "python")
RESULTS = ROOT / "bench" / "results"
SWITCHES, CACHE_NODES, WORKER_NODES = 10, 2, 10
IMAGE = "ghcr.io/dask/dask:2024.12.1-py3.12"
POLL = 0.5
# What each setting changes. "unthrottled": both backends' own start-rate limits
# lifted (switchyard's rampUp.maxStartsPerSecond to the schema's maximum and no
# jitter init container, the controller's API rate limit to the same order): the
# control plane's and the code's speed. "defaults": as each ships.
SETTINGS = {
    "unthrottled": {"ramp": {"rampUp": {"maxStartsPerSecond": 10000, "jitterSeconds": 0}},
                    "controller": "c.KubeController.k8s_api_rate_limit = 10000\n"
                                  "c.KubeController.k8s_api_rate_limit_burst = 20000\n"},
    "defaults": {"ramp": {}, "controller": ""},
}


def log(msg: str) -> None:
    print(f"[gateway-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    return localcluster.kubectl(NAME, *args, input=input, check=check)


def apply(docs: list[dict]) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))


def get_json(*args: str) -> dict:
    return json.loads(kubectl("get", *args, "-o", "json"))


def utc(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


# ---------------------------------------------------------------- the cluster

def topology(path: pathlib.Path) -> pathlib.Path:
    node = {"nicGbps": 25, "cpu": 64, "memoryGiB": 256}
    doc = {"switchLabel": "switchyard.dev/switch", "nvmeLabel": "switchyard.dev/nvme", "wanGbps": 400,
           "switches": [{"name": f"sw-{i:02d}", "uplinkGbps": 400, "nodes": [
               {"name": "cache", "count": CACHE_NODES, "nicGbps": 100, "cpu": 32, "memoryGiB": 128, "nvmeDisks": 4},
               {"name": "worker", "count": WORKER_NODES, **node}]} for i in range(SWITCHES)]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def facility() -> dict:
    return {
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility",
        "metadata": {"name": "af", "namespace": NS_SY},
        "spec": {"targetGbps": 200, "routing": "local",
                 "network": {"switchLabel": "switchyard.dev/switch", "nicGbpsAnnotation": "switchyard.dev/nic-gbps",
                             "wanGbps": 400,
                             "switches": [{"name": f"sw-{i:02d}", "uplinkGbps": 400} for i in range(SWITCHES)]},
                 "cachePools": [{"name": "xcache", "nvmeLabel": "switchyard.dev/nvme", "serveGbps": 45,
                                 "origin": {"mode": "fixed", "host": "origin.example.org", "port": 1094},
                                 "storage": {"dataPaths": ["/mnt/nvme0"], "metaPath": "/mnt/xcache-meta"}}]},
    }


def gateway_crds() -> list[dict]:
    """The CRDs KubeBackend and its controller use (gateway.dask.org DaskCluster, traefik.io routes).

    dask-gateway ships them in its Helm chart, which neither the PyPI package nor
    this machine (no chart repository reachable) has: these are the same kinds,
    versions and subresources, with an open schema.
    """
    def crd(group, kind, plural, status):
        version = {"name": "v1alpha1", "served": True, "storage": True,
                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
        if status:
            version["subresources"] = {"status": {}}
        return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {"group": group, "scope": "Namespaced", "versions": [version],
                         "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"}}}
    return [crd("gateway.dask.org", "DaskCluster", "daskclusters", True),
            crd("traefik.io", "IngressRoute", "ingressroutes", False),
            crd("traefik.io", "IngressRouteTCP", "ingressroutetcps", False)]


# ---------------------------------------------------------------- gateway configs

# The KubeBackend gateway reaches a cluster's scheduler at its Service's DNS name
# and fixed port (tls://dask-NAME.NS:8786, http://dask-NAME.NS:8788). The local
# cluster has no DNS nor kube-proxy, so this process resolves those names through
# a table the bench writes when it starts the scheduler: the stand-in for both.
RESOLVER = """
import json as _json, socket as _socket
_getaddrinfo = _socket.getaddrinfo
def _service_getaddrinfo(host, port, *args, **kwargs):
    try:
        with open({table!r}) as handle:
            target = _json.load(handle).get(f"{{host}}:{{port}}")
    except (OSError, ValueError):
        target = None
    if target:
        host, port = target.rsplit(":", 1)
    return _getaddrinfo(host, int(port) if target else port, *args, **kwargs)
_socket.getaddrinfo = _service_getaddrinfo
"""


def sy_config(port: int, setting: dict) -> str:
    template = {"readGbps": 0.05, **setting["ramp"]}
    return switchyard_config(port, NS_SY, SY_INSTANCE, IMAGE, {"default": template})


def kube_config(port: int, table: pathlib.Path, controller_port: int, setting: dict) -> str:
    return RESOLVER.format(table=str(table)) + f"""
c.DaskGateway.backend_class = "dask_gateway_server.backends.kubernetes.KubeBackend"
# KubeBackend runs no proxy of its own (traefik routes to the schedulers in a real
# deployment): the client talks to the gateway's API directly.
c.DaskGateway.address = "127.0.0.1:{port}"
c.KubeBackend.gateway_instance = {KUBE_INSTANCE!r}
c.KubeController.gateway_instance = {KUBE_INSTANCE!r}
c.KubeController.address = "127.0.0.1:{controller_port}"
c.KubeController.api_url = "http://127.0.0.1:{port}/api"
c.KubeClusterConfig.namespace = {NS_KUBE!r}
c.KubeClusterConfig.image = {IMAGE!r}
c.KubeClusterConfig.scheduler_cmd = ["dask", "scheduler"]
c.KubeClusterConfig.worker_cmd = ["dask", "worker"]
c.KubeClusterConfig.worker_cores = 1
c.KubeClusterConfig.worker_memory = "2 G"
""" + setting["controller"]


# ---------------------------------------------------------------- schedulers, run here

def run_scheduler(pod: dict, namespace: str, workdir: pathlib.Path, ports: dict[str, int]) -> subprocess.Popen:
    """A scheduler pod's container run as a local process: its command and environment, its
    Secret's files where the kubelet would mount them; `ports` replaces the listening ports."""
    container = pod["containers"][0]
    (mount,) = container["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = get_json("secret", volume["secret"]["secretName"], "-n", namespace)
    files = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    creds = workdir / volume["secret"]["secretName"]
    creds.mkdir(parents=True, exist_ok=True)
    for key, data in files.items():
        (creds / key).write_bytes(data)
    mount_path = mount["mountPath"].rstrip("/")
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"].replace(mount_path, str(creds))
        elif "secretKeyRef" in var.get("valueFrom", {}):
            env[var["name"]] = files[var["valueFrom"]["secretKeyRef"]["key"]].decode()
    argv = container.get("command", []) + container.get("args", [])
    assert argv[:2] == ["dask", "scheduler"], argv
    argv = [str(BIN / "dask")] + [ports.get(argv[i - 1], a) if i else a for i, a in enumerate(argv)][1:]
    log_file = (workdir / f"scheduler-{volume['secret']['secretName']}.log").open("w")
    return subprocess.Popen(argv, env={"PATH": os.environ["PATH"], "HOME": str(workdir), **env},
                            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)


class Backend:
    """What differs between the two: where the scheduler's pod spec is, which pods are the workers."""

    def __init__(self, kind: str, namespace: str, address: str, workdir: pathlib.Path, table: pathlib.Path | None):
        self.kind, self.namespace, self.address, self.workdir, self.table = kind, namespace, address, workdir, table

    def scheduler_pod(self, cluster: str) -> dict | None:
        if self.kind == "sy":
            items = get_json("deployments", "-n", self.namespace, "-l",
                             f"gateway.dask.org/cluster={cluster},app.kubernetes.io/component=scheduler")["items"]
            return items[0]["spec"]["template"]["spec"] if items else None
        name = cluster.split(".", 1)[1]
        out = kubectl("get", "pod", f"dask-scheduler-{name}", "-n", self.namespace, "-o", "json", check=False)
        return json.loads(out)["spec"] if out else None

    def start_scheduler(self, cluster: str) -> subprocess.Popen:
        pod = wait_for(lambda: self.scheduler_pod(cluster), 120, POLL, f"the scheduler pod spec of {cluster}")
        scheduler, dashboard, api = free_port(), free_port(), free_port()
        if self.kind == "kube":  # its gateway reaches the Service name at 8786/8788 (see RESOLVER)
            service = f"dask-{cluster.split('.', 1)[1]}.{self.namespace}"
            self.table.write_text(json.dumps({f"{service}:8786": f"127.0.0.1:{scheduler}",
                                              f"{service}:8787": f"127.0.0.1:{dashboard}",
                                              f"{service}:8788": f"127.0.0.1:{api}"}))
        return run_scheduler(pod, self.namespace, self.workdir, {
            "--port": str(scheduler), "--dashboard-address": f":{dashboard}",
            "--dg-api-address": f"{'0.0.0.0' if self.kind == 'sy' else ''}:{api}"})

    def worker_selector(self, cluster: str) -> str:
        if self.kind == "sy":
            (fleet,) = get_json("workerfleets", "-n", self.namespace, "-l", f"gateway.dask.org/cluster={cluster}")["items"]
            return f"switchyard.dev/fleet={fleet['metadata']['name']}"
        return f"gateway.dask.org/cluster={cluster.split('.', 1)[1]},app.kubernetes.io/component=dask-worker"


def count_pods(namespace: str, selector: str, running: bool) -> int:
    phase = ["--field-selector=status.phase=Running"] if running else []
    out = kubectl("get", "pods", "-n", namespace, "-l", selector, *phase, "--no-headers", "--chunk-size=0", check=False)
    return sum(1 for line in out.splitlines() if line.strip())


def pod_phases(namespace: str, selector: str, since: dt.datetime) -> dict[str, list[float]]:
    """Seconds after `since` at which each worker pod was created, scheduled and Ready (1 s resolution)."""
    phases: dict[str, list[float]] = {"created": [], "scheduled": [], "ready": []}
    for pod in get_json("pods", "-n", namespace, "-l", selector, "--chunk-size=0")["items"]:
        phases["created"].append((utc(pod["metadata"]["creationTimestamp"]) - since).total_seconds())
        conditions = {c["type"]: c["lastTransitionTime"] for c in pod["status"].get("conditions", [])}
        for key, ctype in (("scheduled", "PodScheduled"), ("ready", "Ready")):
            if ctype in conditions:
                phases[key].append((utc(conditions[ctype]) - since).total_seconds())
    return {k: sorted(max(0.0, x) for x in v) for k, v in phases.items()}


def quantiles(values: list[float]) -> dict[str, float]:
    return {"p50": values[len(values) // 2], "p90": values[int(len(values) * 0.9) - 1], "max": values[-1]}


def run_once(backend: Backend, workers: int, label: str, procs: list, timeout: float) -> dict:
    from dask_gateway import BasicAuth, Gateway

    gateway = Gateway(backend.address, auth=BasicAuth(f"bench-{label}", "x"))
    name = gateway.submit()
    scheduler = backend.start_scheduler(name)
    try:
        cluster = gateway.connect(name, shutdown_on_close=False)
        selector = backend.worker_selector(name)
        load0 = os.getloadavg()
        cpu0 = sum(p.cpu_seconds() for p in procs)
        wall0, t0 = dt.datetime.now(dt.timezone.utc), time.monotonic()
        cluster.scale(workers)
        scale_returned = time.monotonic() - t0
        timeline = []  # (seconds since the call, worker pods Running)

        def all_running():
            timeline.append((time.monotonic() - t0, count_pods(backend.namespace, selector, True)))
            return timeline[-1][1] >= workers
        wait_for(all_running, timeout, POLL, f"{workers} worker pods Running")
        seconds = time.monotonic() - t0
        load1 = os.getloadavg()
        cpu = sum(p.cpu_seconds() for p in procs) - cpu0
        phases = {k: quantiles(v) for k, v in pod_phases(backend.namespace, selector, wall0).items()}
        result = {"backend": backend.kind, "label": label, "workers": workers, "seconds": round(seconds, 2),
                  "scale_call_s": round(scale_returned, 2),
                  "pods_s": phases,
                  "half_running_s": round(next(t for t, n in timeline if n >= workers / 2), 1),
                  "backend_cpu_s": round(cpu, 1), "loadavg_start": [round(x, 2) for x in load0],
                  "loadavg_end": [round(x, 2) for x in load1]}
        log(f"{label}: {workers} Running in {seconds:.1f}s (load {load1[0]:.2f})")
        t = time.monotonic()
        cluster.shutdown()
        wait_for(lambda: count_pods(backend.namespace, selector, False) == 0, timeout, POLL, "the worker pods gone")
        result["cleanup_s"] = round(time.monotonic() - t, 1)
        return result
    finally:
        gateway.close()
        fleet_bench.stop_process(scheduler)


class Cpu:
    """CPU seconds of one process (user + system), read from /proc."""

    def __init__(self, proc: subprocess.Popen):
        self.sampler = fleet_bench.RssSampler(proc.pid)

    def cpu_seconds(self) -> float:
        return self.sampler.cpu_seconds()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", default="unthrottled,defaults",
                        help=f"comma-separated, from {sorted(SETTINGS)}; the first is the headline")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--out", default=str(RESULTS / "gateway.md"))
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    if args.report_only:
        write_report(json.loads(out.with_suffix(".json").read_text()), out)
        return 0
    settings = args.settings.split(",")
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        parser.error(f"unknown settings {sorted(unknown)}")

    workdir = localcluster.CACHE / "clusters" / NAME
    workdir.mkdir(parents=True, exist_ok=True)
    config = fleet_bench.kwok_config(workdir)
    localcluster.down(NAME)
    results: dict = {"workers": args.workers, "settings": settings, "runs": [], "versions": versions(),
                     "env": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                             "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                                      capture_output=True, text=True).stdout.strip(),
                             "uncommitted_operator_files": subprocess.run(
                                 ["git", "-C", str(ROOT), "status", "--porcelain", "--", "operator/switchyard"],
                                 capture_output=True, text=True).stdout.split("\n")[:-1],
                             "nodes": SWITCHES * (CACHE_NODES + WORKER_NODES), "switches": SWITCHES,
                             "kwok_config": config.read_text()}}
    long_lived: list[subprocess.Popen] = []
    try:
        kubeconfig = localcluster.up(NAME, topology(workdir / "topology.yaml"), config=config)
        localcluster.install_crds(NAME)
        apply(gateway_crds())
        kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/daskclusters.gateway.dask.org",
                "crd/ingressroutes.traefik.io", "crd/ingressroutetcps.traefik.io")
        for ns in (NS_SY, NS_KUBE):
            kubectl("create", "namespace", ns, check=False)
        env = {"KUBECONFIG": str(kubeconfig)}
        base = localcluster.port_base(NAME)
        operator = fleet_bench.start_process([*localcluster.operator_command(PY), "run", "--kubeconfig", str(kubeconfig),
                                              "--metrics-port", str(base + 8), "--health-port", "0"],
                                             workdir / "switchyard.log")
        long_lived.append(operator)
        apply([facility()])
        wait_for(lambda: "True" in kubectl("get", "analysisfacility", "af", "-n", NS_SY, "-o",
                                           "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False),
                 300, 1, "the facility Ready")
        log("facility Ready")
        for setting_name in settings:
            setting = SETTINGS[setting_name]
            sy_port, kube_port, controller_port = free_port(), free_port(), free_port()
            table = workdir / "services.json"
            table.write_text("{}")
            (workdir / "sy.py").write_text(sy_config(sy_port, setting))
            (workdir / "kube.py").write_text(kube_config(kube_port, table, controller_port, setting))
            procs = {
                "sy-gateway": fleet_bench.start_process([str(BIN / "dask-gateway-server"), "-f", str(workdir / "sy.py")],
                                                        workdir / f"gateway-sy-{setting_name}.log", env),
                "kube-gateway": fleet_bench.start_process([str(BIN / "dask-gateway-server"), "-f", str(workdir / "kube.py")],
                                                          workdir / f"gateway-kube-{setting_name}.log", env),
                "kube-controller": fleet_bench.start_process([str(BIN / "dask-gateway-server"), "kube-controller", "-f",
                                                              str(workdir / "kube.py")],
                                                             workdir / f"controller-{setting_name}.log", env),
            }
            try:
                wait_gateway(sy_port)
                wait_gateway(kube_port)
                backends = {
                    "sy": (Backend("sy", NS_SY, f"http://127.0.0.1:{sy_port}", workdir, None),
                           [Cpu(procs["sy-gateway"]), Cpu(operator)]),
                    "kube": (Backend("kube", NS_KUBE, f"http://127.0.0.1:{kube_port}", workdir, table),
                             [Cpu(procs["kube-gateway"]), Cpu(procs["kube-controller"])]),
                }
                for rep in range(1, args.repeats + 1):
                    order = ["sy", "kube"] if rep % 2 else ["kube", "sy"]
                    for kind in order:
                        backend, cpus = backends[kind]
                        label = f"{setting_name}-{kind}-{rep}"
                        r = run_once(backend, args.workers, label, cpus, args.timeout)
                        r.update(setting=setting_name, repeat=rep)
                        results["runs"].append(r)
                        save(results, out)
                        time.sleep(5)  # the facility re-plans without the fleet; the controller forgets the cluster
            finally:
                for proc in procs.values():
                    fleet_bench.stop_process(proc)
    finally:
        for proc in long_lived:
            fleet_bench.stop_process(proc)
        save(results, out)
        if not args.keep:
            localcluster.down(NAME)
    write_report(results, out)
    return 0


def versions() -> dict:
    import importlib.metadata as m
    return {p: m.version(p) for p in ("dask-gateway-server", "dask-gateway", "distributed", "kopf")}


def save(results: dict, out: pathlib.Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")


def write_report(results: dict, out: pathlib.Path) -> None:
    runs, env, n = results["runs"], results["env"], results["workers"]
    lines = [
        "# dask-gateway benchmark: switchyard's backend against dask-gateway's KubeBackend", "",
        *about(f"seconds from `cluster.scale(N)` to N worker pods Running ({n} workers) through real dask-gateway-server "
               "processes, switchyard's backend against dask-gateway's KubeBackend, on a simulated cluster",
               "`make bench-gateway` (`bench/gateway_bench.py`)",
               f"{env['date']}, commit {env.get('commit', '?')}"
               + (" with uncommitted operator changes" if env.get("uncommitted_operator_files") else "")),
        f"Measured {env['date']} (commit {env.get('commit', '?')}{' with uncommitted changes to ' + ', '.join(x[3:] for x in env['uncommitted_operator_files']) + ' in the shared work tree' if env.get('uncommitted_operator_files') else ''}) by `make bench-gateway` (`bench/gateway_bench.py`), every run in one session on one "
        f"simulated cluster of {env['nodes']} nodes over {env['switches']} switches (kwokctl binary runtime: real "
        "kube-apiserver, kube-controller-manager, kube-scheduler v1.31 and etcd; kwok marks the pods the real scheduler "
        f"binds Running), the machine's {env['cpus']} cores shared with other work. Versions: "
        + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) + ".", "",
        "## Results", "",
        "| setting | repeat | backend | seconds from `scale(N)` to N worker pods Running | half Running (s) "
        "| worker pods created, p50 / p90 / last (s) | scheduled, p50 / p90 / last (s) | Ready, p50 / p90 / last (s) "
        "| CPU seconds of the backend's processes | load average (1, 5, 15 min) at the end |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(f"| {r['setting']} | {r['repeat']} | {'switchyard' if r['backend'] == 'sy' else 'KubeBackend'} "
                     f"| {r['seconds']:.1f} | {r['half_running_s']:.1f} | "
                     + " | ".join(" / ".join(f"{r['pods_s'][k][q]:.0f}" for q in ("p50", "p90", "max"))
                                  for k in ("created", "scheduled", "ready"))
                     + f" | {r['backend_cpu_s']} | {', '.join(f'{x:.2f}' for x in r['loadavg_end'])} |")
    loads = [r["loadavg_end"][0] for r in runs]
    if loads:
        lines.append("")
        lines.append(f"The 1-minute load average at the end of the runs ranged from {min(loads):.1f} to "
                     f"{max(loads):.1f} on {env['cpus']} cores: the control plane, both backends and the other work "
                     "on the machine were CPU-bound throughout, so single runs move by many seconds; the ratio of "
                     "each adjacent pair is the figure to read.")
    lines.append("")
    for setting in results["settings"]:
        pairs = []
        for rep in sorted({r["repeat"] for r in runs if r["setting"] == setting}):
            by = {r["backend"]: r for r in runs if r["setting"] == setting and r["repeat"] == rep}
            if {"sy", "kube"} <= by.keys():
                ratio = by["sy"]["seconds"] / by["kube"]["seconds"]
                pairs.append(ratio)
                lines.append(f"- {setting}, repeat {rep}: switchyard / KubeBackend = {by['sy']['seconds']:.1f} s / "
                             f"{by['kube']['seconds']:.1f} s = **{ratio:.2f}** (load average at the end "
                             f"{by['sy']['loadavg_end'][0]:.2f} / {by['kube']['loadavg_end'][0]:.2f})")
        for r in runs:
            if r["setting"] == setting:
                pods = r["pods_s"]
                lines.append(f"  - {setting} {r['repeat']} {'switchyard' if r['backend'] == 'sy' else 'KubeBackend'}: "
                             f"worker pods created at {r['workers'] / max(1.0, pods['created']['max']):.1f} per "
                             f"second on average (all within {pods['created']['max']:.0f} s); median wait from "
                             f"created to scheduled ~{pods['scheduled']['p50'] - pods['created']['p50']:.0f} s, "
                             f"from scheduled to Ready ~{pods['ready']['p50'] - pods['scheduled']['p50']:.0f} s")
        if pairs:
            median = statistics.median(pairs)
            lines.append(f"- **{setting}: median of the {len(pairs)} per-repeat ratios {median:.2f}** "
                         f"({'meets' if median <= 1.0 else 'misses'} the target: switchyard no slower than the "
                         "gateway's own backend, ratio ≤ 1)")
        lines.append("")
    lines += [
        "## What is timed, and how the two are made comparable", "",
        f"- Both gateways are real `dask-gateway-server` processes on loopback, driven by the real `dask_gateway` "
        f"client: `Gateway.submit()`, `Gateway.connect()`, then the clock starts at `cluster.scale({n})` and stops "
        f"when the API server lists {n} of the cluster's worker pods with `status.phase=Running` (polled every "
        f"{POLL} s, so ±{POLL} s). Cluster creation, the scheduler's start and the shutdown are not timed.",
        "- The path inside the clock is the same for both up to the backend: the gateway forwards the scale to the "
        "scheduler's API (`/api/comm`), the scheduler's `dask_gateway.scheduler_preload` heartbeats the new count to "
        "the gateway at once, and the gateway calls the backend's `on_cluster_heartbeat`. Then **switchyard** patches "
        "the WorkerFleet's scale subresource; the operator re-plans the facility with it and writes one Deployment per "
        "planned switch, whose ReplicaSets create the pods. **KubeBackend** patches the DaskCluster's `spec.replicas`; "
        "its controller creates the worker pods itself, in batches that double (1, 2, 4, ...).",
        "- Kubelets do not run on kwok nodes, so neither backend's scheduler pod really runs. For both, the bench "
        "runs the scheduler here as its pod would run it: the container's command and environment from the pod "
        "spec (a Deployment's template for switchyard, the controller's Pod for KubeBackend), the cluster's Secret "
        "written to files where the kubelet would mount them; only the listening ports change. The switchyard "
        "scheduler reports its addresses in its heartbeats; KubeBackend instead addresses the scheduler by its "
        "Service name and fixed ports (`http://dask-NAME.NS:8788`), which needs cluster DNS and kube-proxy: the "
        "KubeBackend gateway's config file replaces `socket.getaddrinfo` in that process with a lookup in a table "
        "the bench writes when it starts the scheduler (Service name and port -> 127.0.0.1 and the real port), "
        "the only change to its path.",
        "- dask-gateway's CRDs live in its Helm chart, which neither the PyPI package nor this machine (no chart "
        "repository reachable) provides: the bench applies the same kinds (gateway.dask.org/v1alpha1 DaskCluster "
        "with its status subresource, traefik.io/v1alpha1 IngressRoute and IngressRouteTCP, which the controller "
        "creates for the proxy) with an open schema.",
        "- Same pod sizes (1 core, 2 GiB per worker), same cluster, same control-plane tuning, alternating order "
        "(odd repeats switchyard first), each run cleaned up (shutdown, every worker pod gone) and 5 s idle "
        "before the next. The switchyard operator, both gateways and the controller run throughout a setting.",
        "- Settings: **unthrottled** lifts each backend's own start-rate limit (switchyard's fleet template sets "
        "`rampUp.maxStartsPerSecond: 10000`, the schema's maximum, and `rampUp.jitterSeconds: 0`, so the workers "
        "have no jitter init container, which on a real node holds each worker up to 10 s by design and here "
        "only adds kwok stages; the controller gets "
        "`k8s_api_rate_limit = 10000`, burst 20000): what the code and the control plane allow. **defaults** runs "
        "both as shipped: switchyard's `rampUp.maxStartsPerSecond` of 20 starts per second per fleet and its "
        "10 s jitter init container (the operator's deliberate start-storm guards: 500 workers cannot be "
        "Running in less than ~25 s), the "
        "controller's 50 API calls per second (burst 100).",
        "- Where the time goes: for every worker pod, its `creationTimestamp` and the `lastTransitionTime` of its "
        "`PodScheduled` and `Ready` conditions (kwok sets Ready with Running), relative to the scale call; the "
        "API server stamps whole seconds. Created is the backend's part (switchyard: operator and ReplicaSet "
        "controller; KubeBackend: its controller), scheduled the kube-scheduler's, Ready kwok's.",
        "- In **defaults** switchyard's fleet starts at most `rampUp.maxStartsPerSecond` (20) workers per second "
        "(`operator/switchyard/rampup.py`), so its creation rate in the per-run lines is that limit as delivered "
        "on this machine; KubeBackend's controller is held only by its API rate limit (50 per second).",
        "- CPU seconds: user + system time, read from /proc, of the gateway process plus the switchyard operator "
        "(switchyard) or the gateway plus the controller (KubeBackend) during the timed window; the schedulers "
        "and the control plane are not counted.",
        "",
        "## Control plane", "",
        "The cluster is created with bench-fleet's kwokctl configuration (`fleet_bench.kwok_config`):", "",
        "```yaml", env["kwok_config"].rstrip(), "```", "",
    ]
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
