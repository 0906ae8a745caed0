"""Session fixtures: the local cluster, the operator as a subprocess, a namespace per test."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import localcluster  # noqa: E402

from harness import Cluster, cluster_lifetime, start_operator, stop_operator, temporary_namespace  # noqa: E402
from support import CLUSTER_NAME as NAME  # noqa: E402
LOGS = localcluster.CACHE / "e2e-logs" / NAME


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


@pytest.fixture
def namespace(cluster: Cluster):
    yield from temporary_namespace(cluster.kube, "e2e")
