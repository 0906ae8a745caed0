"""`switchyard exporter` beside a real cache: its metrics show the bytes, and Prometheus scrapes them."""

from __future__ import annotations

import math
import os
import socket
import time

import pytest
from prom import run_prometheus
from prometheus_client.parser import text_string_to_metric_families
from xrootd_fixtures import (
    cache_pool, free_port, require, start_cache, start_exporter, start_origin, wait_until, xrdcp,
)

from switchyard.observe.exporterspec import exporter_args
from switchyard.observe.fileload import TAU_SECONDS

pytestmark = pytest.mark.integration

MIB = 1 << 20
LABELS = {"pool": "fast", "host": "cache-host-1", "switch": "sw1"}


def _samples(text: str) -> dict[str, float]:
    """name{extra labels} → value, for samples carrying this test's pool labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if any(sample.labels.get(k) != v for k, v in LABELS.items()):
                continue
            extra = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k not in LABELS)
            out[f"{sample.name}{{{extra}}}"] = sample.value
    return out


@pytest.fixture
def served(xrd_base, xrootd_account):
    """An origin, a cache and its exporter; one file read cold then warm through the cache."""
    origin = start_origin(xrd_base, xrootd_account)
    data_dir = xrootd_account.make_dir(xrd_base / "data0")
    meta = xrootd_account.make_dir(xrd_base / "meta")
    pool = cache_pool(origin.daemon.port, [str(data_dir)], str(meta), pfc={"lowWatermark": 0.8, "highWatermark": 0.9})
    udp_port = free_port(socket.SOCK_DGRAM)
    args = exporter_args(pool, pool_name=LABELS["pool"], switch=LABELS["switch"], exporter_port=udp_port)
    exporter = start_exporter([*args, "--host", LABELS["host"]], xrd_base)  # before xrootd: UDP is not replayed
    cache = start_cache(xrd_base, xrootd_account, pool, exporter_port=udp_port)
    try:
        data = os.urandom(3 * MIB + 5)
        lfn = origin.put("served.bin", data)
        before = origin.bytes_sent_now()
        reads_began = time.time()
        for attempt in ("cold", "warm"):
            result = xrdcp(cache.url_for(lfn), xrd_base / f"{attempt}.bin")
            assert result.returncode == 0, result.stderr
        origin_sent = origin.bytes_sent_now() - before
        yield exporter, udp_port, len(data), origin_sent, reads_began, cache.url_for(lfn)
    finally:
        cache.daemon.stop()
        exporter.stop()
        origin.daemon.stop()
        origin.meter.close()


def test_exporter_metrics_show_the_bytes(served):
    exporter, udp_port, size, origin_sent, reads_began, _ = served

    def both_reads_reported() -> bool:
        samples = _samples(exporter.scrape())
        # Bytes, not two closes: a read that opens the file before XrdPfc has closed it after the
        # previous read shares its one close record.
        served = sum(samples.get(f"switchyard_xcache_{kind}_bytes_total{{}}", 0) for kind in ("hit", "miss", "bypass"))
        return served >= 2 * size and samples.get("switchyard_xcache_client_bytes_total{}", 0) >= 2 * size

    wait_until(both_reads_reported, timeout=30, interval=0.5, what="both reads in the exporter's metrics")
    samples = _samples(exporter.scrape())
    # The file was fetched once: the exporter's origin bytes are the file, and the
    # origin's own counter saw at least that much leave it.
    assert samples["switchyard_xcache_origin_bytes_total{}"] == size
    assert origin_sent >= size
    served_bytes = (samples["switchyard_xcache_hit_bytes_total{}"] + samples["switchyard_xcache_miss_bytes_total{}"]
                    + samples["switchyard_xcache_bypass_bytes_total{}"])
    # XrdPfc counts hits and misses per block it touches, prefetched blocks included,
    # so it may claim up to a prefetch window (4 x 256 KiB here) more per read.
    assert 2 * size <= served_bytes <= 2 * (size + 4 * 256 * 1024)
    # Bytes on the wire to clients: both copies, plus protocol overhead (a cold
    # read through XRootD 5.5 resends some in-flight pages), never a third copy.
    assert 2 * size <= samples["switchyard_xcache_client_bytes_total{}"] < 3 * size
    assert samples["switchyard_xcache_connections_total{}"] >= 2
    assert samples["switchyard_xcache_open_files{}"] == 0
    assert samples["switchyard_xcache_space_used_bytes{space=data}"] > 0
    assert samples["switchyard_xcache_space_watermark_ratio{mark=high,space=data}"] == 0.9
    assert samples["switchyard_xcache_monitoring_malformed_packets_total{}"] == 0

    # The file's read load: its path (the open record's lfn) with a decaying rate of the bytes read.
    # Every f-stream byte here is this file's, so the rate is at most those bytes over tau, and at least
    # that much decayed for the time since the reads began.
    wait_until(lambda: sum(v for k, v in _samples(exporter.scrape()).items()
                           if k.startswith("switchyard_xcache_served_bytes_total")) >= 2 * size,
               timeout=30, interval=0.5, what="both reads in the f-stream")
    samples = _samples(exporter.scrape())
    elapsed = time.time() - reads_began
    read_bytes = sum(v for k, v in samples.items() if k.startswith("switchyard_xcache_served_bytes_total"))
    hot = {k: v for k, v in samples.items() if k.startswith("switchyard_xcache_hot_file_read_bytes_per_second")}
    assert list(hot) == ["switchyard_xcache_hot_file_read_bytes_per_second{path=/served.bin}"], hot
    rate = hot["switchyard_xcache_hot_file_read_bytes_per_second{path=/served.bin}"]
    assert read_bytes / TAU_SECONDS * math.exp(-elapsed / TAU_SECONDS) <= rate <= read_bytes / TAU_SECONDS

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for junk in (b"\x00\x01garbage", b"<statistics><stats id='link'>", b'{"event":"file_close"}'):
            sender.sendto(junk, ("127.0.0.1", udp_port))
    wait_until(lambda: _samples(exporter.scrape())["switchyard_xcache_monitoring_malformed_packets_total{}"] == 3,
               timeout=10, interval=0.2, what="the malformed packets to be counted")
    assert exporter.process.poll() is None
    assert _samples(exporter.scrape())["switchyard_xcache_origin_bytes_total{}"] == size


def test_prometheus_scrapes_the_exporter(served, xrd_base):
    require("prometheus")
    exporter, _, size, _, _, _ = served
    with run_prometheus([f"127.0.0.1:{exporter.metrics_port}"], xrd_base) as prom:
        prom.wait_for(prom.targets_up, timeout=60, what="the exporter target to be up")
        selector = ",".join(f'{k}="{v}"' for k, v in LABELS.items())
        prom.wait_for(lambda: prom.value(f"switchyard_xcache_origin_bytes_total{{{selector}}}") == size,
                      timeout=60, what="origin bytes in Prometheus")
        hit_ratio = prom.value(
            f"sum(switchyard_xcache_hit_bytes_total{{{selector}}}) / "
            f"sum(switchyard_xcache_client_bytes_total{{{selector}}})")
        assert hit_ratio is not None and 0 < hit_ratio <= 1
        # The dashboard-style query per switch evaluates (once two scrapes exist) to one series for sw1.
        rate_per_switch = "sum by (switch) (rate(switchyard_xcache_client_bytes_total[30s]))"
        prom.wait_for(lambda: prom.query(rate_per_switch), timeout=30, what="two scrapes for rate()")
        assert [series["metric"]["switch"] for series in prom.query(rate_per_switch)] == [LABELS["switch"]]


@pytest.mark.parametrize("request_bytes", [512 * 1024, 4 * MIB])
def test_reads_of_the_python_client_are_counted(served, request_bytes):
    """The reads fsspec-xrootd and uproot make (the XRootD Python client's File.read), counted per file and
    per reader's switch as xrdcp's are: with XRootD's asynchronous reads on they counted 0 bytes. (The
    f-stream counts the bytes a request asks for: one asking past the file's end counts whole.)"""
    from XRootD import client
    from XRootD.client.flags import OpenFlags

    exporter, _, size, _, _, url = served

    def served_bytes() -> float:
        return sum(v for k, v in _samples(exporter.scrape()).items() if k.startswith("switchyard_xcache_served_bytes_total"))

    wait_until(lambda: served_bytes() >= 2 * size, timeout=30, interval=0.5, what="xrdcp's reads in the f-stream")
    before = served_bytes()
    for _ in range(3):
        handle = client.File()
        status, _ = handle.open(url, OpenFlags.READ)
        assert status.ok, status.message
        offset = 0
        while offset < size:   # ranges within the file, as fsspec's caches and uproot ask for them
            status, chunk = handle.read(offset, min(request_bytes, size - offset))
            assert status.ok and chunk, status.message
            offset += len(chunk)
        handle.close()
    wait_until(lambda: served_bytes() - before >= 3 * size, timeout=30, interval=0.5,
               what="the Python client's reads in the f-stream")
    time.sleep(1)   # nothing more than the bytes read arrives later
    assert served_bytes() - before == 3 * size
