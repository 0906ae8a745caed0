"""Disk usage of a pool's cache hosts, from their exporters' /metrics (pure).

Each cache pod's exporter sidecar measures the data space the way
pfc.diskusage does and publishes it with the water marks
(switchyard_xcache_space_*). The XCachePool handler fetches that text; this
module turns it into the pool's `status.disk` and names the hosts past their
high water mark, which XRootD is then purging (and filling no further until
it has). It also reads, from the cache pods' status, the data and meta paths
their prepare step refused because no disk is mounted there.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from ..cacheprepare import parse_report
from .exporterspec import PREFIX
from .initreports import last_runs

PREPARE_CONTAINER = "prepare"  # the cache pod's init container that runs cacheprepare.py


@dataclass(frozen=True)
class HostDisk:
    """The data space of one cache host, as its exporter reported it."""

    host: str
    switch: str
    used_bytes: int
    total_bytes: int
    high_watermark: float

    @property
    def used_fraction(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def past_high_watermark(self) -> bool:
        return self.total_bytes > 0 and self.used_fraction > self.high_watermark


def parse_host_disk(text: str, host: str, switch: str, default_high_watermark: float) -> HostDisk | None:
    """The data space in an exporter's metrics text; None if it reports none.

    The exporter's own water mark wins over the spec's: it is what the
    host's xrootd was started with, even mid-rollout of a changed spec.
    """
    used = total = None
    high = default_high_watermark
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return None
    for family in families:
        for sample in family.samples:
            labels = sample.labels
            if labels.get("space") != "data":
                continue
            if sample.name == PREFIX + "space_used_bytes":
                used = int(sample.value)
            elif sample.name == PREFIX + "space_total_bytes":
                total = int(sample.value)
            elif sample.name == PREFIX + "space_watermark_ratio" and labels.get("mark") == "high":
                high = float(sample.value)
    if used is None or total is None:
        return None
    return HostDisk(host, switch, used, total, high)


def _percent(fraction: float) -> float:
    return round(100 * fraction, 1)


def disk_status(reports: list[HostDisk], unreachable: list[str], high_watermark: float, observed_at: str) -> dict:
    """`status.disk` of a pool: totals, every reporting host, who did not answer."""
    used = sum(r.used_bytes for r in reports)
    total = sum(r.total_bytes for r in reports)
    return {
        "usedBytes": used,
        "totalBytes": total,
        "usedPercent": _percent(used / total) if total else 0.0,
        "highWatermarkPercent": _percent(high_watermark),
        "hostsReporting": len(reports),
        "hostsUnreachable": sorted(unreachable),
        "hosts": [
            {"host": r.host, "switch": r.switch, "usedBytes": r.used_bytes, "totalBytes": r.total_bytes,
             "usedPercent": _percent(r.used_fraction), "pastHighWatermark": r.past_high_watermark}
            for r in sorted(reports, key=lambda r: (r.switch, r.host))
        ],
        "observedAt": observed_at,
    }


def full_hosts_message(reports: list[HostDisk]) -> str:
    """Names the hosts past their high water mark; empty when there are none."""
    full = [r for r in sorted(reports, key=lambda r: r.host) if r.past_high_watermark]
    if not full:
        return ""
    hosts = ", ".join(f"{r.host} {_percent(r.used_fraction)}% > {_percent(r.high_watermark)}%" for r in full)
    return f"data space past the high water mark on {hosts}; XRootD purges it back to the low water mark"


@dataclass(frozen=True)
class UnmountedDisk:
    """A data or meta path that is no disk of its own on a cache host (its prepare step refused it)."""

    host: str
    path: str


def unmounted_disks(pods: list[dict]) -> tuple[UnmountedDisk, ...]:
    """The paths each cache pod's `prepare` init container last refused as not mounted (cacheprepare.py).

    A pod whose prepare step has since succeeded reports none; one that is retrying reports what its last
    run found (the kubelet keeps it in lastState while the next run waits out its back-off).
    """
    out = set()
    for pod, finished in last_runs(pods, PREPARE_CONTAINER):
        if finished.get("exitCode") == 0:
            continue
        host = (pod.get("spec") or {}).get("nodeName") or pod.get("metadata", {}).get("name", "")
        out.update(UnmountedDisk(host, path) for path in parse_report(finished.get("message") or ""))
    return tuple(sorted(out, key=lambda d: (d.host, d.path)))


def unmounted_message(disks: tuple[UnmountedDisk, ...]) -> str:
    """Names each host and path that is not a mounted disk; empty when there are none."""
    if not disks:
        return ""
    named = ", ".join(f"{d.host}:{d.path}" for d in disks)
    return (f"not a mounted disk (a directory on the node's root filesystem), so not used: {named}; "
            "those hosts do not serve until a disk is mounted there (or storage.allowRootDisk is set)")
