"""The README's five-minute tour, as a reader runs it: `make demo`, the tour's kubectl commands with the
KUBECONFIG the demo prints, then `make down`.

The demo runs on a cluster of its own name, and its operator on free ports, so that it stands beside
the suite's clusters (hack/demo.py reads SWITCHYARD_DEMO_CLUSTER and the ports). The commands are the
README's, word for word (operator/tests/unit/doc_commands.yaml names this file as their runner).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess

import pytest

import localcluster

pytestmark = pytest.mark.e2e

NAME = "sy-demo-tour"
TOUR = (
    "kubectl get analysisfacility,xcachepools,workerfleets -n default",
    "kubectl get analysisfacility demo -n default -o jsonpath='{.status.plan.target}'",
    "kubectl describe analysisfacility demo -n default",
)


def free_ports(count: int) -> list[int]:
    """Ports free now, all different (each held open until every one is chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def make(target: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-C", str(localcluster.REPO), target], capture_output=True, text=True,
                          env=env, timeout=1200, check=False)


def test_make_demo_then_the_tours_kubectl_commands_then_make_down():
    metrics_port, health_port = free_ports(2)
    env = {**os.environ, "SWITCHYARD_DEMO_CLUSTER": NAME, "SWITCHYARD_DEMO_METRICS_PORT": str(metrics_port),
           "SWITCHYARD_DEMO_HEALTH_PORT": str(health_port)}
    try:
        demo = make("demo", env)
        assert demo.returncode == 0, f"make demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
        assert "The demo is running" in demo.stdout and "Running pods per switch" in demo.stdout, demo.stdout
        kubeconfig = re.search(r"export KUBECONFIG=(\S+)", demo.stdout).group(1)
        tool_env = {**env, "KUBECONFIG": kubeconfig, "PATH": f"{localcluster.tools()}:{env['PATH']}"}
        out = {}
        for command in TOUR:
            result = subprocess.run(shlex.split(command), capture_output=True, text=True, env=tool_env, timeout=60)
            assert result.returncode == 0, f"{command}: {result.stderr}"
            out[command] = result.stdout
        listing, target, described = (out[c] for c in TOUR)
        assert re.search(r"analysisfacility\.switchyard\.dev/demo\s+True", listing), listing  # Ready
        assert "xcachepool.switchyard.dev/demo-" in listing and "workerfleet.switchyard.dev/demo-" in listing, listing
        assert target.startswith("target ") and " Gbps" in target, target  # the line `switchyard plan` ends with
        assert "rack-a" in described and "Predicted" in described, described  # the per-switch plan
    finally:
        down = make("down", env)
        assert down.returncode == 0, f"make down failed:\n{down.stdout[-2000:]}\n{down.stderr[-2000:]}"
    assert not localcluster.exists(NAME)
