"""A local cluster (kwokctl: a real kube-apiserver and etcd, kwok nodes from a topology file) with switchyard's
CRDs, and the operator (`switchyard run`) reconciling a namespace of it: for the integration tests that need
reconciles on a real API server."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "e2e"))
MINI = REPO / "e2e" / "topologies" / "mini.yaml"
TOOLS = ["kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]


def local_cluster(name: str, topology: pathlib.Path = MINI) -> Iterator[pathlib.Path]:
    """For a module fixture: the kubeconfig of cluster `name`, started (or reused) with `topology`'s nodes and the
    CRDs installed, removed afterwards unless SWITCHYARD_KEEP_CLUSTER is set. Without the tools the test is
    skipped (failed under CI)."""
    import localcluster

    if not all((localcluster.CACHE / "bin" / n).exists() for n in TOOLS):
        message = "local cluster tools missing: run `bash hack/build-tools.sh`"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    kubeconfig = localcluster.up(name, topology)
    localcluster.install_crds(name)
    yield kubeconfig
    if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):
        localcluster.down(name)


@contextmanager
def running_operator(kubeconfig: pathlib.Path, namespace: str, metrics_port: int, log_path: pathlib.Path,
                     env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """`switchyard run` watching `namespace`, with `env` beside the environment; its output goes to `log_path`
    (kept for a look after a failure). Stopped on exit."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        operator = subprocess.Popen(
            [sys.executable, "-m", "switchyard.cli", "run", "--kubeconfig", str(kubeconfig),
             "--metrics-port", str(metrics_port), "--health-port", "0", "--namespace", namespace],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True)
    try:
        yield operator
    finally:
        operator.terminate()
        try:
            operator.wait(timeout=20)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait(timeout=10)


def still_running(operator: subprocess.Popen, log_path: pathlib.Path) -> None:
    """Raises (with the log's tail) if the operator has exited: a wait for its work would only time out."""
    if operator.poll() is not None:
        raise AssertionError(f"operator exited: {log_path.read_text()[-3000:]}")
