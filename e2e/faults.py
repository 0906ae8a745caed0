"""Fault injection for the e2e fault suite: operator processes, an API server outage, snapshots.

Everything here acts on real processes and a real control plane: the operator
runs as users run it (`switchyard run`), the kube-apiserver is the process
kwokctl started (found through its pid file), and snapshots are read back from
the API server.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import time

import localcluster

KWOK_HOME = pathlib.Path.home() / ".kwok" / "clusters"
MANAGED = {"app.kubernetes.io/managed-by": "switchyard"}
OWNER_UID_LABEL = "switchyard.dev/owner-uid"
CRD_KINDS = ("XCachePool", "WorkerFleet", "S3Staging")
WORKLOAD_KINDS = ("StatefulSet", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "Secret")
ALL_KINDS = CRD_KINDS + WORKLOAD_KINDS
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ operator
class Operator:
    """One `switchyard run` subprocess, watching one namespace, that a test may kill and restart."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str, log_path: pathlib.Path,
                 timer_seconds: float = 2, resync_seconds: float = 10):
        self.kubeconfig, self.namespace, self.log_path = kubeconfig, namespace, log_path
        self.env = {**os.environ, "SWITCHYARD_TIMER_SECONDS": str(timer_seconds),
                    "SWITCHYARD_RESYNC_SECONDS": str(resync_seconds)}
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.kills = 0
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("")

    def start(self) -> "Operator":
        with self.log_path.open("a") as log:
            log.write(f"=== switchyard run, start {self.starts + 1}\n")
            log.flush()
            self.proc = subprocess.Popen(
                [*localcluster.operator_command(), "run", "--kubeconfig", str(self.kubeconfig),
                 "-n", self.namespace, "--metrics-port", "0", "--health-port", "0"],
                stdout=log, stderr=subprocess.STDOUT, env=self.env)
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers, no chance to finish a write."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.kills += 1

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def cpu_seconds(self) -> float:
        """User + system CPU time the running operator process has used."""
        fields = pathlib.Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_lines(self) -> int:
        return self.log_text().count("\n")


# ------------------------------------------------------------------ API server
class ApiServerOutage:
    """Stop the cluster's kube-apiserver process and start it again with the same command line.

    kwokctl's binary runtime records each component's pid under
    ~/.kwok/clusters/NAME/pids/; /proc gives the exact command line and working
    directory, so the restarted process is the same server on the same port
    with the same etcd data. kube-controller-manager and kube-scheduler exit
    when they cannot renew their leader lease (as on a real control plane,
    where the kubelet restarts them); `start` restarts whichever exited, the
    way that supervisor would.
    """

    COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")

    def __init__(self, cluster_name: str):
        self.name = cluster_name
        self.home = KWOK_HOME / cluster_name
        self.commands: dict[str, tuple[list[str], str]] = {}
        self.children: dict[str, subprocess.Popen] = {}
        self.restarted: list[str] = []

    def _pid(self, component: str) -> int:
        return int((self.home / "pids" / f"{component}.pid").read_text().strip())

    def stop(self) -> None:
        for component in self.COMPONENTS:
            pid = self._pid(component)
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
            self.commands[component] = (argv, os.readlink(f"/proc/{pid}/cwd"))
        pid = self._pid("kube-apiserver")
        # SIGTERM closes the listener at once; the process then drains for up to a
        # minute, so it is killed after a few seconds to make the restart possible.
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while pathlib.Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def _spawn(self, component: str) -> None:
        argv, cwd = self.commands[component]
        with (self.home / "logs" / f"{component}.log").open("a") as log:
            proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        (self.home / "pids" / f"{component}.pid").write_text(str(proc.pid))
        self.children[component] = proc
        self.restarted.append(component)

    def _running(self, component: str) -> bool:
        proc = self.children.get(component)
        if proc is not None:
            return proc.poll() is None  # also reaps it
        pid = self._pid(component)
        return pathlib.Path(f"/proc/{pid}").exists() and not _is_zombie(pid)

    def start(self, timeout: float = 120, settle: float = 20) -> None:
        assert self.commands, "stop() first"
        self._spawn("kube-apiserver")
        deadline = time.monotonic() + timeout
        while not _api_ready(self.name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"kube-apiserver of {self.name} not ready {timeout:.0f}s after restart")
            time.sleep(0.5)
        # A component that lost its lease may still be exiting (holding its port), and
        # a restarted one may fail to bind: keep restarting for a while, as a kubelet would.
        until = time.monotonic() + settle
        while time.monotonic() < until:
            self.supervise()
            time.sleep(1)

    def supervise(self) -> None:
        """Restart any other control-plane component that has exited."""
        for component in self.COMPONENTS[1:]:
            if not self._running(component):
                self._spawn(component)


def _is_zombie(pid: int) -> bool:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _api_ready(name: str) -> bool:
    try:
        result = subprocess.run([str(localcluster.tools() / "kubectl"), "--kubeconfig",
                                 str(localcluster.kubeconfig_path(name)), "get", "--raw", "/readyz"],
                                capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


# ------------------------------------------------------------------ snapshots
def managed_objects(kube, namespace: str, kinds=ALL_KINDS) -> list[dict]:
    return [o for kind in kinds for o in kube.list(kind, namespace, MANAGED)]


def leftovers(kube, namespace: str) -> dict[str, list[str]]:
    """Every switchyard kind, every managed workload kind, and pods still in the namespace."""
    found = {}
    for kind in ("AnalysisFacility",) + CRD_KINDS:
        names = [o["metadata"]["name"] for o in kube.list(kind, namespace)]
        if names:
            found[kind] = names
    for kind in WORKLOAD_KINDS:
        names = [o["metadata"]["name"] for o in kube.list(kind, namespace, MANAGED)]
        if names:
            found[kind] = names
    pods = [p["metadata"]["name"] for p in kube.list("Pod", namespace)]
    if pods:
        found["Pod"] = pods
    return found


def normalised_children(kube, namespace: str, facility_uid: str) -> dict[str, str]:
    """(kind/name) -> spec (or data) of every managed child, with namespace and UIDs made neutral.

    Two runs in different namespaces compare equal when they built the same objects.
    """
    uids = {facility_uid: "FACILITY-UID"}
    objs = managed_objects(kube, namespace)
    for o in objs:
        uids.setdefault(o["metadata"]["uid"], f"UID-OF-{o['kind']}/{o['metadata']['name']}")
    out = {}
    for o in objs:
        payload = {"spec": o.get("spec"), "data": o.get("data"),
                   "labels": o["metadata"].get("labels"),
                   "owners": [(r["kind"], r["name"], r["uid"]) for r in o["metadata"].get("ownerReferences", [])]}
        if o["kind"] == "Service":  # the cluster IP is allocated by the API server
            payload["spec"] = {k: v for k, v in (o.get("spec") or {}).items() if k not in ("clusterIP", "clusterIPs")}
        if o["kind"] == "Secret":
            payload["data"] = sorted((o.get("data") or {}))  # generated keys differ from run to run
        text = json.dumps(payload, sort_keys=True).replace(namespace, "NAMESPACE")
        for uid, alias in uids.items():
            text = text.replace(uid, alias)
        out[f"{o['kind']}/{o['metadata']['name']}"] = text
    return out


def replicas_per_switch(kube, namespace: str) -> dict[str, int]:
    out = {}
    for d in kube.list("Deployment", namespace, MANAGED):
        labels = d["metadata"]["labels"]
        key = f"{labels.get('switchyard.dev/fleet')}@{labels.get('switchyard.dev/switch')}"
        out[key] = out.get(key, 0) + d["spec"]["replicas"]
    return out


def ownership_problems(kube, namespace: str) -> list[str]:
    """Duplicates (two workloads for one fleet/pool and switch) and orphans (owner gone or wrong)."""
    problems = []
    live = {}
    for kind in ("AnalysisFacility",) + CRD_KINDS:
        for o in kube.list(kind, namespace):
            live[o["metadata"]["uid"]] = f"{kind}/{o['metadata']['name']}"
    seen = {}
    for o in managed_objects(kube, namespace):
        name = f"{o['kind']}/{o['metadata']['name']}"
        refs = o["metadata"].get("ownerReferences", [])
        label_uid = o["metadata"].get("labels", {}).get(OWNER_UID_LABEL)
        if len(refs) != 1 or refs[0]["uid"] not in live:
            problems.append(f"orphan {name}: owners {[r.get('uid') for r in refs]}")
        elif label_uid != refs[0]["uid"]:
            problems.append(f"{name}: owner-uid label {label_uid} != owner {refs[0]['uid']}")
        labels = o["metadata"].get("labels", {})
        if o["kind"] in ("Deployment", "StatefulSet"):
            key = (o["kind"], labels.get("switchyard.dev/fleet") or labels.get("switchyard.dev/pool"),
                   labels.get("switchyard.dev/switch"), labels.get("app.kubernetes.io/component"))
            if key in seen:
                problems.append(f"duplicate {name} and {seen[key]} for {key}")
            seen[key] = name
    pod_owners = {o["metadata"]["uid"] for kind in ("Deployment", "StatefulSet") for o in kube.list(kind, namespace)}
    rs_owner = {rs["metadata"]["uid"]: (rs["metadata"].get("ownerReferences") or [{}])[0].get("uid")
                for rs in kube.request("GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets").get("items", [])}
    for pod in kube.list("Pod", namespace):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        ref = (pod["metadata"].get("ownerReferences") or [{}])[0].get("uid")
        if ref not in pod_owners and rs_owner.get(ref) not in pod_owners:
            problems.append(f"orphan Pod/{pod['metadata']['name']}")
    return problems


# ------------------------------------------------------------------ the report
REPORT_ENV = "SWITCHYARD_RELIABILITY_REPORT"
REPORT_PATH = localcluster.REPO / "bench" / "results" / "reliability.json"


def record(section: str, entry: dict) -> None:
    """Add a measured entry to bench/results/reliability.json (only when the report is asked for)."""
    target = os.environ.get(REPORT_ENV)
    if not target:
        return
    path = pathlib.Path(target) if target not in ("1", "true", "yes") else REPORT_PATH
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault(section, []).append({**entry, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
