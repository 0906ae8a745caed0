"""Pool disk usage from exporter metrics: parsed from a real exporter's output."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, generate_latest

from switchyard.api import XCachePoolStatus
from switchyard.cacheprepare import report
from switchyard.observe.cachedisk import (HostDisk, UnmountedDisk, disk_status, full_hosts_message, parse_host_disk,
                                  unmounted_disks, unmounted_message)
from switchyard.observe.exporter import ExporterSettings, XCacheCollector


def exporter_text(tmp_path, high: float) -> str:
    """What `switchyard exporter` serves for a cache whose data disk is `tmp_path`."""
    (tmp_path / "meta").mkdir()
    registry = CollectorRegistry()
    registry.register(XCacheCollector(ExporterSettings(
        pool="p", host="h", switch="s", data_paths=(str(tmp_path),), meta_paths=(str(tmp_path / "meta"),),
        low_watermark=high / 2, high_watermark=high)))
    return generate_latest(registry).decode()


def test_parses_the_data_space_of_a_real_exporter(tmp_path):
    st = os.statvfs(tmp_path)
    report = parse_host_disk(exporter_text(tmp_path, 0.95), "node-a", "sw1", default_high_watermark=0.5)
    assert report is not None
    assert report.total_bytes == st.f_blocks * st.f_frsize
    assert 0 < report.used_bytes <= report.total_bytes
    # The water mark the host's exporter reports wins over the spec's default.
    assert report.high_watermark == 0.95
    assert (report.host, report.switch) == ("node-a", "sw1")


def test_a_tiny_high_watermark_marks_the_host_full(tmp_path):
    report = parse_host_disk(exporter_text(tmp_path, 1e-9), "node-a", "sw1", 0.95)
    assert report.past_high_watermark
    message = full_hosts_message([report])
    assert "node-a" in message and "high water mark" in message


def test_text_without_a_data_space_or_garbage_is_no_report():
    assert parse_host_disk("", "h", "s", 0.9) is None
    assert parse_host_disk("# HELP x y\nx 1\n", "h", "s", 0.9) is None
    assert parse_host_disk("not { prometheus text", "h", "s", 0.9) is None


def test_status_sums_hosts_and_names_the_unreachable():
    reports = [HostDisk("b", "sw2", 96, 100, 0.95), HostDisk("a", "sw1", 10, 100, 0.95)]
    status = disk_status(reports, ["c"], 0.95, "2026-11-22T00:00:00Z")
    assert status["usedBytes"] == 106 and status["totalBytes"] == 200 and status["usedPercent"] == 53.0
    assert status["highWatermarkPercent"] == 95.0
    assert status["hostsReporting"] == 2 and status["hostsUnreachable"] == ["c"]
    assert [h["host"] for h in status["hosts"]] == ["a", "b"]
    assert [h["pastHighWatermark"] for h in status["hosts"]] == [False, True]
    # The status the handler writes is one the CRD's schema accepts.
    XCachePoolStatus.model_validate({"disk": status})
    assert full_hosts_message(reports) == (
        "data space past the high water mark on b 96.0% > 95.0%; XRootD purges it back to the low water mark")


def test_no_hosts_no_division_by_zero():
    status = disk_status([], [], 0.9, "t")
    assert status["usedPercent"] == 0.0 and status["hosts"] == []
    assert full_hosts_message([]) == ""


# ------------------------------------------------------------------ disks not mounted (prepare's report)
def cache_pod(node: str, init: dict) -> dict:
    """A cache pod's status as the API server shows it, with its prepare init container's status."""
    return {"metadata": {"name": f"p-{node}"}, "spec": {"nodeName": node},
            "status": {"initContainerStatuses": [{"name": "prepare", **init}]}}


REFUSED = {"terminated": {"exitCode": 3, "reason": "Error", "message": report(["/srv/nvme0", "/srv/meta"])}}


def test_prepare_refusals_are_read_from_the_pod_status():
    pods = [
        cache_pod("node-b", {"state": REFUSED}),  # just failed
        # in back-off: waiting, the failure in lastState
        cache_pod("node-a", {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": REFUSED}),
        # failed before, passed since (a disk was mounted): nothing to report
        cache_pod("node-c", {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}, "lastState": REFUSED}),
        # failed for another reason: not a disk problem
        cache_pod("node-d", {"state": {"terminated": {"exitCode": 1, "message": "PrepareFailed: [Errno 13] ..."}}}),
        # not started yet
        {"metadata": {"name": "p-e"}, "spec": {}, "status": {}},
    ]
    assert unmounted_disks(pods) == (UnmountedDisk("node-a", "/srv/meta"), UnmountedDisk("node-a", "/srv/nvme0"),
                                     UnmountedDisk("node-b", "/srv/meta"), UnmountedDisk("node-b", "/srv/nvme0"))
    # Only the prepare container's message counts.
    other = cache_pod("node-f", {"state": REFUSED})
    other["status"]["initContainerStatuses"][0]["name"] = "something-else"
    assert unmounted_disks([other]) == ()
    message = unmounted_message(unmounted_disks(pods[:1]))
    assert "node-b:/srv/nvme0" in message and "node-b:/srv/meta" in message and unmounted_message(()) == ""


def test_the_handler_lists_the_pools_pods_only_while_hosts_are_missing(monkeypatch):
    from switchyard.handlers import xcachepool as handler

    calls = []

    class Kube:
        def list(self, kind, namespace, selector):
            calls.append((kind, namespace, selector))
            return [cache_pod("node-a", {"state": REFUSED})]

    monkeypatch.setattr(handler, "kube", Kube)
    ready = {"sw1": {"desired": 2, "current": 2, "ready": 2}}
    assert handler.read_unmounted("ns", "pool", ready) == () and calls == []
    assert handler.read_unmounted("ns", "pool", {}) == () and calls == []
    short = {**ready, "sw2": {"desired": 1, "current": 1, "ready": 0}}
    assert handler.read_unmounted("ns", "pool", short) == (UnmountedDisk("node-a", "/srv/meta"),
                                                            UnmountedDisk("node-a", "/srv/nvme0"))
    assert calls == [("Pod", "ns", {"switchyard.dev/pool": "pool"})]
