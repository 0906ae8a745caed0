"""A generated Dask worker pod, run for real: it joins a real scheduler under its
pod name and reads a file through a real xrootd cache named in its environment."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse

import pytest

from facilities import facility
from support import REPO, wait_for, wait_ready

sys.path.insert(0, str(REPO / "operator" / "tests" / "integration"))
from xrootd_fixtures import Account, cache_pool, free_port, require, start_cache, start_origin, workspace  # noqa: E402

pytestmark = pytest.mark.e2e
HOSTS = pathlib.Path("/etc/hosts")


@contextlib.contextmanager
def loopback_names(*names: str):
    """Point cluster Service names at loopback for this process tree, then restore /etc/hosts."""
    original = HOSTS.read_text()
    HOSTS.write_text(original.rstrip("\n") + "\n" + "".join(f"127.0.0.1 {n}  # switchyard e2e\n" for n in names))
    try:
        yield
    finally:
        HOSTS.write_text(original)


def pod_environment(pod: dict) -> dict[str, str]:
    """The container's environment as the kubelet would set it (fieldRefs resolved)."""
    env = {}
    for var in pod["spec"]["containers"][0].get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = pod["metadata"]["name"]
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[var["name"]] = "127.0.0.1"
    return env


def expand(arg: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}")


def assert_ring_names_cache_hosts_by_internal_ip(cluster, namespace: str, pod: dict) -> None:
    """The worker mounts its fleet's routing ConfigMap as a directory, and the ring there names each cache
    host `node@root://<its Node's InternalIP>:port=weight` (what any pod reaches without DNS)."""
    fleet = pod["metadata"]["labels"]["switchyard.dev/fleet"]
    config = cluster.kube.get("ConfigMap", namespace, f"{fleet}-routing")
    assert config is not None, f"no routing ConfigMap for fleet {fleet}"
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "routing"]
    assert volume["configMap"]["name"] == f"{fleet}-routing"
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "routing"]
    assert mount["mountPath"] == "/etc/switchyard/routing" and "subPath" not in mount
    entries = [line for line in config["data"]["ring"].splitlines() if line and not line.startswith("#")]
    assert entries, config["data"]
    for entry in entries:
        node, _, url = entry.partition("@")
        addresses = cluster.kube.get("Node", None, node)["status"]["addresses"]
        internal = next(a["address"] for a in addresses if a["type"] == "InternalIP")
        assert urllib.parse.urlsplit(url.rsplit("=", 1)[0]).hostname == internal, (entry, addresses)


def test_generated_worker_joins_its_scheduler_and_reads_through_the_cache(cluster, operator, namespace):
    require("xrootd", "xrdcp")
    from distributed import Client

    account = Account.for_daemons()
    base = workspace(account)
    origin = start_origin(base, account)
    data = os.urandom(3 * 2**20 + 777)
    lfn = origin.put("store/run1/events.root", data)
    pool = cache_pool(origin.daemon.port, [str(account.make_dir(base / "data0"))], str(account.make_dir(base / "meta")))
    cache = start_cache(base, account, pool)
    scheduler = worker = None
    try:
        obj = facility(workers=3)
        obj["metadata"]["namespace"] = namespace
        obj["spec"]["cachePools"][0]["port"] = pool.port
        cluster.kube.apply(obj)
        wait_ready(cluster, namespace)
        pods = [p for p in cluster.kube.list("Pod", namespace, {"app.kubernetes.io/component": "worker"})
                if p["status"].get("phase") == "Running"]
        pod = pods[0]
        env = pod_environment(pod)
        assert_ring_names_cache_hosts_by_internal_ip(cluster, namespace, pod)
        container = pod["spec"]["containers"][0]
        argv = [expand(a, env) for a in container["command"] + container["args"]]
        assert argv[:2] == ["dask", "worker"] and argv[2].startswith("tcp://")

        scheduler_port = free_port()
        dask = str(pathlib.Path(sys.executable).parent / "dask")
        scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(scheduler_port),
                                      "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(scheduler_port)
        argv = [dask, *argv[1:2], f"tcp://127.0.0.1:{scheduler_port}", *argv[3:]]  # only the address changes
        endpoint = urllib.parse.urlparse(env["SWITCHYARD_CACHE_ENDPOINT"])
        with loopback_names(endpoint.hostname):
            worker = subprocess.Popen(argv, env={"PATH": os.environ["PATH"], "HOME": str(base), **env},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with Client(f"tcp://127.0.0.1:{scheduler_port}", timeout=60) as client:
                def joined():
                    return [a for a, w in client.scheduler_info()["workers"].items()
                            if w.get("name") == pod["metadata"]["name"]]
                (address,) = wait_for(joined, timeout=60, what="the worker to register under its pod name")

                def read_through_cache(path: str) -> str:
                    # Runs inside the worker: only its own environment says where the cache is.
                    import hashlib, os, subprocess, tempfile
                    with tempfile.TemporaryDirectory() as tmp:
                        target = os.path.join(tmp, "f")
                        subprocess.run(["xrdcp", "--force", "--nopbar",
                                        os.environ["SWITCHYARD_CACHE_ENDPOINT"] + "/" + path, target], check=True)
                        with open(target, "rb") as f:
                            return hashlib.sha256(f.read()).hexdigest()

                digest = client.submit(read_through_cache, lfn, workers=[address], pure=False).result(timeout=120)
        assert digest == hashlib.sha256(data).hexdigest()
        assert env["SWITCHYARD_SWITCH"] == pod["metadata"]["labels"]["switchyard.dev/switch"]
    finally:
        for proc in (worker, scheduler):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)
        cache.daemon.stop()
        origin.daemon.stop()
        origin.meter.close()
        shutil.rmtree(base, ignore_errors=True)
