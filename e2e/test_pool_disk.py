"""A pool's status reports its hosts' disk usage, and Degraded past the high water mark.

kwok runs no containers, so each cache pod's exporter sidecar is started here
as the pod would start it (its args from the StatefulSet the operator wrote),
listening on the pod's address (the node's loopback InternalIP), with the
host's data disks rewritten to local directories. One host's disks are a
small tmpfs filled past the high water mark. The operator reads the exporters
over HTTP exactly as it does in a cluster.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from facilities import facility
from support import wait_for, wait_ready

POOL = "af-xcache"
TMPFS_BYTES = 8 << 20


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sidecar_command(pod: dict, disks: str) -> list[str]:
    """The exporter container's command line, with disks moved under `disks` and the pod's own address."""
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "exporter")
    args, out = list(container["args"]), []
    assert args[0] == "exporter"
    for flag, value in zip(args[1::2], args[2::2]):
        if flag in ("--data-path", "--meta-path"):
            value = os.path.join(disks, value.strip("/").replace("/", "_"))
            os.makedirs(value, exist_ok=True)
        elif flag == "--udp":
            value = f"127.0.0.1:{free_udp_port()}"  # xrootd is not running; keep pods apart
        out += [flag, value]
    return [sys.executable, "-m", "switchyard.cli", "exporter", *out,
            "--host", pod["spec"]["nodeName"], "--metrics-address", pod["status"]["podIP"]]


@pytest.fixture
def tmpfs(tmp_path):
    """A small filesystem of its own, to fill past a water mark."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("mounting a tmpfs needs root (CI runs as root)")
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "full-host"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_pool_reports_disk_usage_and_degrades_past_the_high_water_mark(cluster, operator, namespace, tmp_path, tmpfs):
    af = facility(workers=2)
    af["metadata"]["namespace"] = namespace
    cluster.kube.apply(af)
    wait_ready(cluster, namespace)
    pods = cluster.kube.list("Pod", namespace, {"switchyard.dev/pool": POOL})
    assert len(pods) == 6
    assert all(p["status"]["podIP"].startswith("127.1.") for p in pods), "host-network pods carry their node's address"

    full_pod = sorted(pods, key=lambda p: p["spec"]["nodeName"])[0]
    full_host = full_pod["spec"]["nodeName"]
    exporters = []
    try:
        for pod in pods:
            disks = str(tmpfs if pod is full_pod else tmp_path / pod["spec"]["nodeName"])
            exporters.append(subprocess.Popen(sidecar_command(pod, disks), stderr=subprocess.DEVNULL))

        def disk():
            status = cluster.kube.get("XCachePool", namespace, POOL)["status"]
            return status if status.get("disk", {}).get("hostsReporting") == 6 else None

        status = wait_for(disk, 90, what="disk usage from all six exporters")
        hosts = {h["host"]: h for h in status["disk"]["hosts"]}
        assert set(hosts) == {p["spec"]["nodeName"] for p in pods}
        assert hosts[full_host]["totalBytes"] == TMPFS_BYTES
        assert status["disk"]["hostsUnreachable"] == []
        assert status["disk"]["highWatermarkPercent"] == 95.0
        assert status["disk"]["usedBytes"] == sum(h["usedBytes"] for h in hosts.values())

        # Fill one host's data space past 95 %.
        (tmpfs / "xrootd_data_file").write_bytes(b"\0" * int(TMPFS_BYTES * 0.97))

        def degraded():
            pool = cluster.kube.get("XCachePool", namespace, POOL)
            conditions = {c["type"]: c for c in pool["status"]["conditions"]}
            return pool if conditions["Degraded"]["status"] == "True" else None

        pool = wait_for(degraded, 60, what="Degraded past the high water mark")
        conditions = {c["type"]: c for c in pool["status"]["conditions"]}
        assert conditions["Degraded"]["reason"] == "SpacePastHighWatermark"
        assert full_host in conditions["Degraded"]["message"]
        assert conditions["Ready"]["status"] == "True", "a purging cache still serves"
        assert [h["host"] for h in pool["status"]["disk"]["hosts"] if h["pastHighWatermark"]] == [full_host]
        # kopf posts events from a queue of its own, after the reconcile that wrote the status: wait for it.
        wait_for(lambda: any(e.get("reason") == "SpacePastHighWatermark" and e.get("type") == "Warning"
                             and full_host in e.get("message", "") for e in cluster.kube.list("Event", namespace)),
                 30, what="a SpacePastHighWatermark Warning event naming the full host")

        # XRootD purges; the condition clears.
        (tmpfs / "xrootd_data_file").unlink()
        wait_for(lambda: degraded() is None, 60, what="Degraded to clear after the purge")
        wait_for(lambda: any(e.get("reason") == "Recovered" for e in cluster.kube.list("Event", namespace)),
                 30, what="a Recovered event")

        # An exporter that stops answering is named, not mistaken for a healthy host.
        exporters[0].terminate()
        exporters[0].wait(10)
        gone = pods[0]["spec"]["nodeName"]
        wait_for(lambda: cluster.kube.get("XCachePool", namespace, POOL)["status"]["disk"]["hostsUnreachable"] == [gone],
                 60, what="the stopped exporter's host listed as unreachable")
    finally:
        for proc in exporters:
            proc.terminate()
        for proc in exporters:
            proc.wait(10)
