"""Session fixtures: the local cluster, the operator as a subprocess, a namespace per test."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import localcluster  # noqa: E402

from switchyard.apply import Kube  # noqa: E402

from support import CLUSTER_NAME as NAME, TOPOLOGY  # noqa: E402
LOGS = localcluster.CACHE / "e2e-logs" / NAME


class Cluster:
    def __init__(self, name: str, kubeconfig: pathlib.Path):
        self.name = name
        self.kubeconfig = kubeconfig
        self.kube = Kube.from_environment(str(kubeconfig))

    def kubectl(self, *args: str, check: bool = True) -> str:
        return localcluster.kubectl(self.name, *args, check=check)


def cluster_lifetime(name: str):
    """Start (or reuse) local cluster `name` with the CRDs, yield it, delete it (unless SWITCHYARD_KEEP_CLUSTER)."""
    kubeconfig = localcluster.up(name, TOPOLOGY)
    localcluster.install_crds(name)
    yield Cluster(name, kubeconfig)
    if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):
        localcluster.down(name)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    yield from cluster_lifetime(NAME)


@pytest.fixture(scope="session")
def operator(cluster: Cluster):
    """The operator, run as users run it (`switchyard run`), against the local cluster."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / "operator.log"
    proc = start_operator(cluster.kubeconfig, log_path)
    yield proc
    stop_operator(proc)
    print(f"operator log: {log_path}")


def start_operator(kubeconfig: pathlib.Path, log_path: pathlib.Path, *args: str, **env: str) -> subprocess.Popen:
    """`switchyard run` with short timers, logging to `log_path`; `args` and `env` add to its command and environment."""
    environ = {**os.environ, "SWITCHYARD_TIMER_SECONDS": "2", "SWITCHYARD_RESYNC_SECONDS": "10",
               "SWITCHYARD_DISK_READ_SECONDS": "3", **env}
    with log_path.open("w") as log:
        return subprocess.Popen([sys.executable, "-m", "switchyard.cli", "run", "--kubeconfig", str(kubeconfig),
                                 "--metrics-port", "0", "--health-port", "0", *args],
                                stdout=log, stderr=subprocess.STDOUT, env=environ)


def stop_operator(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def namespace(cluster: Cluster):
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    cluster.kube.delete("Namespace", None, name)
