"""The local cluster and the operator process, as the e2e fixtures and suites with clusters of their own use them.

(A module of its own, not conftest.py: `from conftest import ...` would find whichever
conftest pytest imported first when the unit, integration and e2e suites run together.)
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import uuid

import localcluster
from support import TOPOLOGY
from switchyard.apply import Kube


class Cluster:
    def __init__(self, name: str, kubeconfig: pathlib.Path):
        self.name = name
        self.kubeconfig = kubeconfig
        self.kube = Kube.from_environment(str(kubeconfig))

    def kubectl(self, *args: str, check: bool = True) -> str:
        return localcluster.kubectl(self.name, *args, check=check)


def cluster_lifetime(name: str, topology: pathlib.Path = TOPOLOGY):
    """Start (or reuse) local cluster `name` with the CRDs, yield it, delete it (unless SWITCHYARD_KEEP_CLUSTER)."""
    kubeconfig = localcluster.up(name, topology)
    localcluster.install_crds(name)
    yield Cluster(name, kubeconfig)
    if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):
        localcluster.down(name)


def start_operator(kubeconfig: pathlib.Path, log_path: pathlib.Path, *args: str, **env: str) -> subprocess.Popen:
    """`switchyard run` with short timers, logging to `log_path`; `args` and `env` add to its command and environment."""
    environ = {**os.environ, "SWITCHYARD_TIMER_SECONDS": "2", "SWITCHYARD_RESYNC_SECONDS": "10",
               "SWITCHYARD_DISK_READ_SECONDS": "3", **env}
    with log_path.open("w") as log:
        return subprocess.Popen([*localcluster.operator_command(), "run", "--kubeconfig", str(kubeconfig),
                                 "--metrics-port", "0", "--health-port", "0", *args],
                                stdout=log, stderr=subprocess.STDOUT, env=environ)


def stop_operator(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def temporary_namespace(kube: Kube, prefix: str):
    """Create a namespace named `prefix-<random>`, yield its name, delete it."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete("Namespace", None, name)
