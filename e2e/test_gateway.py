"""dask-gateway with switchyard's backend, driven by the real client as an analyst does.

A real `dask-gateway-server` process runs `switchyard.gateway.backend.SwitchyardBackend`
against the local cluster; `dask_gateway.Gateway` asks it for clusters. Pods on kwok
nodes do not run, so the scheduler the backend generates is run here for real from its
Deployment's pod spec (its environment, its Secret's files where the kubelet would
mount them; only the listening ports change), as test_dask_worker.py runs a worker: it
speaks TLS through the gateway's proxy and heartbeats the gateway, which turns
`scale`/`adapt` into the WorkerFleet's replicas.
"""

from __future__ import annotations

import base64
import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest

# Imported here, not first by its pytest plugin's end-of-run summary: that import's
# assertion-rewriting ast.parse, run while distributed's and dask_gateway's threads are
# still about, hits CPython 3.11.7's "AST constructor recursion depth mismatch"
# SystemError (fixed in 3.11.8) and turns a passed run into exit status 1.
importlib.import_module("hypothesis")

from facilities import facility
from gateway_local import free_port, switchyard_config, wait_gateway
from support import wait_for
from switchyard.builders.workerfleet import COPY_CONTAINER
from test_dask_worker import expand, pod_environment

pytestmark = pytest.mark.e2e
BIN = pathlib.Path(sys.executable).parent
INSTANCE = "e2e-gw"
SELECT = {"gateway.dask.org/instance": INSTANCE}
IMAGE = "ghcr.io/dask/dask:2024.12.1-py3.12"


def gateway_config(path: pathlib.Path, namespace: str, port: int, idle_timeout: float = 0) -> None:
    templates = {"default": {"readGbps": 0.5}, "tolerant": {"readGbps": 1, "tolerations": []}}
    path.write_text(switchyard_config(port, namespace, INSTANCE, IMAGE, templates) + f"""\
c.SwitchyardBackend.max_worker_cores = 4
c.SwitchyardBackend.max_clusters_per_user = 1
c.SwitchyardBackend.cluster_heartbeat_period = 2
c.SwitchyardClusterConfig.adaptive_period = 1
c.SwitchyardClusterConfig.cluster_max_cores = 60
c.SwitchyardBackend.cluster_start_timeout = 20
c.SwitchyardClusterConfig.idle_timeout = {idle_timeout}
""")


class SchedulerRunner(threading.Thread):
    """Runs every scheduler Deployment the backend makes, as its pod would run (kwok nodes run nothing)."""

    def __init__(self, cluster, namespace: str, workdir: pathlib.Path, never_for: str):
        super().__init__(daemon=True)
        self.cluster, self.namespace, self.workdir, self.never_for = cluster, namespace, workdir, never_for
        self.skipped: set[str] = set()
        self.errors: list[str] = []
        self.procs: dict[str, subprocess.Popen] = {}
        self.argv: dict[str, list[str]] = {}
        self.logs: dict[str, pathlib.Path] = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for dep in self.cluster.kube.list("Deployment", self.namespace,
                                              {**SELECT, "app.kubernetes.io/component": "scheduler"}):
                known = dep["metadata"]["name"] in self.procs or dep["metadata"]["name"] in self.skipped
                if not known and not dep["metadata"].get("deletionTimestamp"):
                    try:
                        self.launch(dep)
                    except Exception as exc:  # reported by the test, not lost with the thread
                        self.errors.append(repr(exc))
                        self.skipped.add(dep["metadata"]["name"])
            time.sleep(0.5)

    def launch(self, dep: dict) -> None:
        name = dep["metadata"]["name"]
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]
        (volume,) = pod["volumes"]
        (mount,) = container["volumeMounts"]
        secret = self.cluster.kube.get("Secret", self.namespace, volume["secret"]["secretName"])
        if secret["metadata"]["annotations"]["gateway.dask.org/username"] == self.never_for:
            self.skipped.add(name)  # this user's scheduler pod never starts
            return
        files = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        creds = self.workdir / name
        creds.mkdir()
        for key, data in files.items():
            (creds / key).write_bytes(data)
        env = {}
        for var in container["env"]:
            if "value" in var:
                env[var["name"]] = var["value"].replace(mount["mountPath"], str(creds))
            else:
                ref = var["valueFrom"]["secretKeyRef"]
                assert ref["name"] == secret["metadata"]["name"]
                env[var["name"]] = files[ref["key"]].decode()
        argv = container["command"] + container["args"]
        assert argv[:2] == ["dask", "scheduler"]
        ports = {"--port": "0", "--dashboard-address": ":0", "--dg-api-address": "0.0.0.0:0"}  # only the ports change
        local = [str(BIN / "dask")] + [ports.get(argv[i - 1], a) if i else a for i, a in enumerate(argv)][1:]
        self.argv[name] = argv
        self.logs[name] = self.workdir / f"scheduler-{name}.log"
        log = self.logs[name].open("w")
        self.procs[name] = subprocess.Popen(local, env={"PATH": os.environ["PATH"], "HOME": str(self.workdir), **env},
                                            stdout=log, stderr=subprocess.STDOUT)

    def address(self, name: str) -> str | None:
        """Where the scheduler really listens (its pod's Service stands for it in the cluster)."""
        for line in self.logs[name].read_text().splitlines():
            if "Scheduler at:" in line:
                return line.split("Scheduler at:")[1].strip()
        return None

    def close(self):
        self.stop.set()
        self.join(timeout=5)
        for proc in self.procs.values():
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_worker(cluster, namespace: str, pod: dict, scheduler: str, workdir: pathlib.Path) -> subprocess.Popen:
    """A generated worker pod, run for real: its command and environment, each volume where the kubelet would
    mount it (its TLS Secret's files, its routing ConfigMap's, the routing client its `routing-copy` init container
    writes); only the paths and the scheduler's address change."""
    container = pod["spec"]["containers"][0]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    files = workdir / pod["metadata"]["name"]
    paths = {}
    for mount in container["volumeMounts"]:
        local = files / mount["name"]
        local.mkdir(parents=True)
        volume = volumes[mount["name"]]
        source = (cluster.kube.get("Secret", namespace, volume["secret"]["secretName"]) if "secret" in volume else
                  cluster.kube.get("ConfigMap", namespace, volume["configMap"]["name"]) if "configMap" in volume else {})
        for key, data in (source.get("data") or {}).items():
            (local / key).write_bytes(base64.b64decode(data) if "secret" in volume else data.encode())
        paths[mount["mountPath"]] = str(local)

    def moved(text: str) -> str:
        for path, local in paths.items():
            text = text.replace(path, local)
        return text
    for init in pod["spec"].get("initContainers", []):
        if init["name"] == COPY_CONTAINER:  # the operator image's `switchyard copy-routing DIR`
            subprocess.run([str(BIN / "switchyard"), *[moved(a) for a in init["args"]]], check=True)
    env = {k: moved(v) for k, v in pod_environment(pod).items()}
    argv = [expand(a, env) for a in container["command"] + container["args"]]
    assert argv[:2] == ["dask", "worker"] and argv[2].startswith("tls://")
    argv = [str(BIN / "dask"), "worker", scheduler, *argv[3:]]
    log = (workdir / f"worker-{pod['metadata']['name']}.log").open("w")
    return subprocess.Popen(argv, env={"PATH": os.environ["PATH"], "HOME": str(workdir), **env},
                            stdout=log, stderr=subprocess.STDOUT)


def owned_objects(cluster, namespace: str) -> dict[str, list[str]]:
    """Every object the gateway's clusters made (by label) and every worker pod and Deployment of their fleets."""
    out = {kind: sorted(o["metadata"]["name"] for o in cluster.kube.list(kind, namespace, SELECT))
           for kind in ("Secret", "WorkerFleet", "Deployment", "Service", "NetworkPolicy")}
    out["fleet pods"] = sorted(p["metadata"]["name"] for p in cluster.kube.list("Pod", namespace)
                               if p["metadata"].get("labels", {}).get("switchyard.dev/fleet", "").startswith("dg-"))
    out["fleet deployments"] = sorted(d["metadata"]["name"] for d in cluster.kube.list("Deployment", namespace)
                                      if d["metadata"]["name"].startswith("dg-"))
    return {k: v for k, v in out.items() if v}


def test_gateway_clusters_are_fleets_placed_by_the_facility(cluster, operator, namespace):
    from dask_gateway import BasicAuth, Gateway

    af = facility(workers=0)
    af["metadata"]["namespace"] = namespace
    af["spec"]["fleets"] = []
    cluster.kube.apply(af)

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="sy-gateway-"))
    port = free_port()
    gateway_config(workdir / "config.py", namespace, port)
    server_log = (workdir / "gateway.log").open("a")

    def start_gateway() -> subprocess.Popen:
        return subprocess.Popen([str(BIN / "dask-gateway-server"), "-f", str(workdir / "config.py")], cwd=workdir,
                                env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
                                stdout=server_log, stderr=subprocess.STDOUT)
    server = start_gateway()
    runner = SchedulerRunner(cluster, namespace, workdir, never_for="bob")
    runner.start()
    try:
        wait_gateway(port)
        alice = Gateway(f"http://127.0.0.1:{port}", auth=BasicAuth("alice", "x"))
        bob = Gateway(f"http://127.0.0.1:{port}", auth=BasicAuth("bob", "x"))
        # An option beyond the admin's bounds is the gateway's own error, and nothing is made.
        # (`submit` is new_cluster's first half: a failing new_cluster leaves a client whose
        # finaliser deadlocks dask_gateway's IO loop thread.)
        with pytest.raises(ValueError, match="worker_cores"):
            alice.submit(worker_cores=8)
        assert owned_objects(cluster, namespace) == {}

        # bob's scheduler never starts (his pod cannot run, say): the gateway gives up on it.
        bobs = bob.submit()
        gc = alice.new_cluster(worker_cores=1, worker_memory=1)
        try:
            alices = {**SELECT, "gateway.dask.org/cluster": gc.name}
            (fleet,) = cluster.kube.list("WorkerFleet", namespace, alices)
            (root,) = cluster.kube.list("Secret", namespace, alices)
            assert fleet["spec"]["facilityRef"] == {"name": "af"}
            assert fleet["spec"]["dask"]["schedulerAddress"].startswith("tls://")
            assert (fleet["spec"]["cores"], fleet["spec"]["memoryGiB"], fleet["spec"]["readGbps"]) == (1, 1, 0.5)
            assert fleet["metadata"]["ownerReferences"][0]["uid"] == root["metadata"]["uid"]
            name = fleet["metadata"]["name"]
            # The scheduler admits only the fleet's workers and the gateway (gone with the root Secret, below).
            (policy,) = cluster.kube.list("NetworkPolicy", namespace, alices)
            assert policy["metadata"]["ownerReferences"][0]["uid"] == root["metadata"]["uid"]
            assert [p["podSelector"]["matchLabels"] for p in policy["spec"]["ingress"][0]["from"]] == [
                {"switchyard.dev/fleet": name, "app.kubernetes.io/component": "worker"},
                {"app.kubernetes.io/component": "dask-gateway"}]
            # The facility takes the new fleet into its plan.
            wait_for(lambda: cluster.kube.get("WorkerFleet", namespace, name).get("status", {}).get("plan"),
                     what="the facility's plan for the gateway fleet")

            # The user's cluster limit: refused by the gateway, nothing more made.
            with pytest.raises(ValueError, match="limit of 1"):
                alice.submit()
            assert sorted(f["metadata"]["annotations"]["gateway.dask.org/username"]
                          for f in cluster.kube.list("WorkerFleet", namespace, SELECT)) == ["alice", "bob"]
            assert sorted(s["metadata"]["annotations"]["gateway.dask.org/username"]
                          for s in cluster.kube.list("Secret", namespace, SELECT)) == ["alice", "bob"]
            # ...but it is per user.
            assert [c.name for c in bob.list_clusters()] == [bobs]

            # scale(50): the fleet's replicas (its scale subresource), placed on the switches as planned.
            gc.scale(50)

            def placed(n):
                wf = cluster.kube.get("WorkerFleet", namespace, name)
                status = wf.get("status") or {}
                if wf["spec"]["replicas"] != n or status.get("replicas") != n:
                    return None
                pods = [p for p in cluster.kube.list("Pod", namespace, {"switchyard.dev/fleet": name})
                        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
                return (wf, pods) if len(pods) == n else None
            wf, pods = wait_for(lambda: placed(50), timeout=180, what="50 gateway workers placed")
            planned = {s["switch"]: s["desired"] for s in wf["status"]["switches"] if s["desired"]}
            running: dict[str, int] = {}
            for pod in pods:
                switch = pod["metadata"]["labels"]["switchyard.dev/switch"]
                running[switch] = running.get(switch, 0) + 1
            assert running == planned and sum(planned.values()) == 50
            assert len(planned) > 1, planned  # spread over switches by the plan
            wait_for(lambda: cluster.kube.get("AnalysisFacility", namespace, "af")["status"].get("workers") == 50,
                     what="the facility's plan counting the 50 gateway workers")
            assert cluster.kubectl("get", "workerfleet", name, "-n", namespace,
                                   "-o", "jsonpath={.status.replicas}") == "50"

            # A generated worker pod, run for real, joins the cluster's TLS scheduler and computes.
            (dep,) = cluster.kube.list("Deployment", namespace, {**alices, "app.kubernetes.io/component": "scheduler"})
            address = wait_for(lambda: runner.address(dep["metadata"]["name"]), timeout=30, what="the scheduler's address")
            worker = run_worker(cluster, namespace, pods[0], address, workdir)
            try:
                with gc.get_client() as client:
                    def joined():
                        return [w for w in client.scheduler_info()["workers"].values()
                                if w.get("name") == pods[0]["metadata"]["name"]]
                    wait_for(joined, timeout=90, what="the generated worker joining over TLS under its pod name")
                    assert client.submit(sum, [1, 2, 39], pure=False).result(timeout=60) == 42
                    assert client.run(lambda: __import__("os").environ["SWITCHYARD_SWITCH"]) == {
                        a: pods[0]["metadata"]["labels"]["switchyard.dev/switch"] for a in client.scheduler_info()["workers"]}
            finally:
                worker.terminate()
                worker.wait(timeout=30)

            # bob's cluster, never heartbeaten, is stopped as failed and its objects deleted.
            wait_for(lambda: [c.name for c in bob.list_clusters(status="FAILED")] == [bobs], timeout=60,
                     what="bob's cluster stopped as failed after the start timeout")
            wait_for(lambda: [s["metadata"]["name"] for s in cluster.kube.list("Secret", namespace, SELECT)] == [root["metadata"]["name"]],
                     timeout=60, what="only alice's root Secret left")

            # A restarted gateway knows the cluster again from its root Secret; the scheduler's
            # next heartbeat makes it RUNNING, so the user's calls reach it as before.
            server.terminate()
            server.wait(timeout=30)
            server = start_gateway()
            wait_gateway(port)
            wait_for(lambda: [c.status.name for c in alice.list_clusters()] == ["RUNNING"], timeout=60,
                     what="the restarted gateway listing the running cluster")

            # adapt(): the scheduler's adaptive loop (nothing to do: the minimum) sets the replicas.
            gc.adapt(minimum=2, maximum=50)
            wait_for(lambda: placed(2), timeout=120, what="adapt scaling the idle fleet down to its minimum, 2")
        finally:
            gc.shutdown()
        wait_for(lambda: owned_objects(cluster, namespace) == {}, timeout=120,
                 what="every object of the gateway cluster gone after shutdown")
        assert alice.list_clusters() == []

        # The idle timeout (the chart's gateway.idleTimeoutSeconds): a cluster nobody uses is
        # shut down by its own scheduler, through the gateway, and everything it made goes.
        server.terminate()
        server.wait(timeout=30)
        gateway_config(workdir / "config.py", namespace, port, idle_timeout=10)
        server = start_gateway()
        wait_gateway(port)
        carol = Gateway(f"http://127.0.0.1:{port}", auth=BasicAuth("carol", "x"))
        idle = carol.submit()
        wait_for(lambda: [(c.name, c.status.name) for c in carol.list_clusters()] == [(idle, "RUNNING")], timeout=60,
                 interval=0.5, what="carol's cluster running")
        assert owned_objects(cluster, namespace)
        made = time.monotonic()
        wait_for(lambda: [c.name for c in carol.list_clusters(status="STOPPED")] == [idle], timeout=60,
                 what="carol's idle cluster stopped by its idle timeout")
        assert time.monotonic() - made > 5  # idle for ~10 s, not stopped at once
        wait_for(lambda: owned_objects(cluster, namespace) == {}, timeout=120,
                 what="every object of the idle cluster gone")
        assert runner.errors == []
        alice.close()
        bob.close()
        carol.close()
    finally:
        runner.close()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        server_log.close()
        logs = pathlib.Path(os.environ.get("SWITCHYARD_E2E_LOGS", tempfile.gettempdir())) / "sy-gateway-logs"
        shutil.rmtree(logs, ignore_errors=True)
        shutil.copytree(workdir, logs, ignore=shutil.ignore_patterns("dg-*"))
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"gateway logs: {logs}")
