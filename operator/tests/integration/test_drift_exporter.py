"""The operator's drift reader against a real exporter beside a real cache: its /metrics become observed Gbps.

A real origin and a real xrootd cache (the config switchyard renders, reporting
every second) serve real reads by the real client; the exporter runs as the pod
runs it (`switchyard exporter` with the builder's arguments). The operator's
own reader (handlers/exporters.metrics_text over HTTP) polls it while the reads
run, and drift.record / observed_gbps turn the counters into Gbps per switch,
which must match the bytes the client received over the same span.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from xrootd_fixtures import cache_pool, free_port, start_cache, start_exporter, start_origin, wait_until, xrdcp

from switchyard.observe.drift import (
    SERVE, DriftRules, SwitchDrift, assess, host_gbps, observations, observed_gbps, parse_readings, record,
)
from switchyard.observe.exporterspec import exporter_args
from switchyard.handlers.exporters import metrics_text

pytestmark = pytest.mark.integration

MIB = 1 << 20
POOL, HOST, SWITCH = "af-xcache", "cache-node-1", "sw1"
KEEP_SECONDS = 300


@pytest.fixture
def cache_with_exporter(xrd_base, xrootd_account):
    origin = start_origin(xrd_base, xrootd_account)
    data_dir = xrootd_account.make_dir(xrd_base / "data0")
    meta = xrootd_account.make_dir(xrd_base / "meta")
    pool = cache_pool(origin.daemon.port, [str(data_dir)], str(meta))
    udp_port = free_port(socket.SOCK_DGRAM)
    args = exporter_args(pool, pool_name=POOL, switch=SWITCH, exporter_port=udp_port)
    exporter = start_exporter([*args, "--host", HOST], xrd_base)
    cache = start_cache(xrd_base, xrootd_account, pool, exporter_port=udp_port)
    try:
        yield origin, cache, exporter
    finally:
        cache.daemon.stop()
        exporter.stop()
        origin.daemon.stop()
        origin.meter.close()


class Poller:
    """The operator's side: reads the exporter every 0.5 s into a drift history, as the facility does."""

    def __init__(self, port: int):
        self.port, self.history, self.reads = port, {}, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            text = metrics_text("127.0.0.1", self.port)
            if text is not None:
                self.history = record(self.history, parse_readings(text), time.monotonic(),
                                      keep_seconds=KEEP_SECONDS)
                self.reads += 1
            self.stop.wait(0.5)

    def points(self):
        return self.history.get((POOL, HOST), (SWITCH, ()))[1]


def test_observed_gbps_from_a_real_exporter_matches_the_bytes_the_client_received(cache_with_exporter, xrd_base):
    origin, cache, exporter = cache_with_exporter
    size = 8 * MIB + 11
    lfn = origin.put("drift.bin", os.urandom(size))
    warm = xrdcp(cache.url_for(lfn), xrd_base / "warm.bin")     # the cold read, before anything is measured
    assert warm.returncode == 0, warm.stderr

    poller = Poller(exporter.metrics_port)
    poller.thread.start()
    try:
        def quiet() -> bool:
            """Three summaries in a row with the same count: nothing in flight."""
            points = poller.points()
            return len(points) >= 3 and len({p.bytes for p in points[-3:]}) == 1
        wait_until(quiet, timeout=30, interval=0.5, what="a quiet cache before the reads")
        before = poller.points()[-1]

        copies = 12
        for i in range(copies):
            result = xrdcp(cache.url_for(lfn), xrd_base / f"read{i}.bin")
            assert result.returncode == 0, result.stderr
            assert (xrd_base / f"read{i}.bin").stat().st_size == size
        received = copies * size

        wait_until(lambda: quiet() and poller.points()[-1].bytes > before.bytes, timeout=30, interval=0.5,
                   what="the reads in the exporter's counter")
        after = poller.points()[-1]
    finally:
        poller.stop.set()
        poller.thread.join(timeout=5)

    # The count is the f-stream's bytes read: every copy, exactly.
    sent = after.bytes - before.bytes
    assert sent == received, (sent, received)
    assert poller.reads > len(poller.points())   # more reads than summaries: one point per summary

    # A window from just before the reads (the quiet summary `before`, the newest at or before its start) to the
    # last summary.
    rules = DriftRules(window_seconds=after.at - before.at, stale_seconds=30)
    # The reader's Gbps over the window is exactly the counter over the exporter's own summary times.
    points = poller.points()
    now = time.monotonic()
    first = [p for p in points if after.at - p.at >= rules.window_seconds][-1]
    assert first.bytes == before.bytes
    expected = (after.bytes - first.bytes) * 8 / (after.at - first.at) / 1e9
    gbps = host_gbps(points, now, rules)
    assert gbps == pytest.approx(expected) and gbps > 0
    observed = observed_gbps(poller.history, {SWITCH: [(POOL, HOST)], "sw2": [(POOL, "elsewhere")]}, now, rules)
    assert observed[SWITCH] == pytest.approx(gbps) and observed["sw2"] is None
    # ... and what the client received over that span.
    truth = received * 8 / (after.at - first.at) / 1e9
    assert observed[SWITCH] == pytest.approx(truth)

    # Judged against a plan: a prediction twice what was served drifts once sustained; the right one never does.
    subject, judged = (SWITCH, SERVE), observations(observed, {})
    wrong = assess({subject: 2 * observed[SWITCH]}, judged, {}, now, DriftRules(floor_gbps=0.001, sustain_seconds=0))
    assert [v.switch for v in wrong.drifting] == [SWITCH] and wrong.drifting[0].ratio == pytest.approx(0.5)
    right = assess({subject: observed[SWITCH] * 1.01}, judged, {subject: SwitchDrift(True)}, now,
                   DriftRules(floor_gbps=0.001, clear_seconds=0))
    assert not right.drifting and right.cleared == (subject,)


def test_bytes_to_a_reader_that_keeps_its_connection_busy_are_counted_while_it_reads(cache_with_exporter, xrd_base):
    # A Dask worker's XRootD client keeps its connection to a cache, busy, for as long as it reads: the drift
    # check's serve figure must follow such a reader while it reads, not only when it disconnects.
    from XRootD import client
    from XRootD.client.flags import OpenFlags

    origin, cache, exporter = cache_with_exporter
    size = 4 * MIB
    lfn = origin.put("busy.bin", os.urandom(size))
    poller = Poller(exporter.metrics_port)
    handle = client.File()
    status, _ = handle.open(cache.url_for(lfn), OpenFlags.READ, timeout=30)
    assert status.ok, status.message
    read, failed, stop = [0], [], threading.Event()

    def read_on() -> None:
        while not stop.is_set():
            status, data = handle.read(0, size, timeout=30)
            if not status.ok or len(data) != size:
                failed.append(status.message)
                return
            read[0] += size

    reader = threading.Thread(target=read_on, daemon=True)
    poller.thread.start()
    try:
        wait_until(lambda: len(poller.points()) >= 2, timeout=30, interval=0.5, what="the exporter's summaries")
        before, read_before = poller.points()[-1].bytes, read[0]
        reader.start()
        # the connection never pauses: the count must follow what was read while it reads
        wait_until(lambda: poller.points()[-1].bytes - before >= 8 * size or failed, timeout=30, interval=0.5,
                   what="the busy connection's bytes in the exporter's counter")
        counted, done = poller.points()[-1].bytes - before, read[0] - read_before
        assert not failed and reader.is_alive(), failed
        assert 8 * size <= counted <= done * 1.02 + size, (counted, done)
    finally:
        stop.set()
        reader.join(timeout=30)
        handle.close(timeout=10)
        poller.stop.set()
        poller.thread.join(timeout=5)



def test_bytes_to_forty_readers_that_keep_their_connections_are_counted_while_they_read(cache_with_exporter,
                                                                                          xrd_base):
    """Forty readers, each on a connection of its own that stays open and busy (as Dask workers' are), are
    counted while they read. XRootD 5.5.3's summary count of bytes to clients (client_bytes_total, the drift
    check's serve figure before) stayed flat for the whole of this: 0 of their bytes, 'xrd.report ... sync' or
    not; with 4 or 12 readers it counted 0.92 of them. The f-stream's count follows them."""
    from XRootD import client
    from XRootD.client.flags import OpenFlags

    origin, cache, exporter = cache_with_exporter
    size, readers, chunk = 4 * MIB, 40, 256 * 1024
    lfns = [origin.put(f"forty{i}.bin", os.urandom(size)) for i in range(8)]
    for i, lfn in enumerate(lfns):
        assert xrdcp(cache.url_for(lfn), xrd_base / f"warm{i}.bin").returncode == 0
    read, failed, stop = [0] * readers, [], threading.Event()

    def read_on(index: int) -> None:
        # Its own user name in the URL: XrdCl gives each a connection of its own (one per URL user and host).
        handle = client.File()
        url = cache.url_for(lfns[index % len(lfns)]).replace("root://", f"root://reader{index}@")
        status, _ = handle.open(url, OpenFlags.READ, timeout=30)
        if not status.ok:
            failed.append(status.message)
            return
        offset = 0
        while not stop.is_set():
            status, data = handle.read(offset, chunk, timeout=30)
            if not status.ok or len(data) != chunk:
                failed.append(status.message)
                break
            read[index] += chunk
            offset = (offset + chunk) % size
            stop.wait(0.1)   # some 20 Mbit/s each: a busy connection, not a flood on two cores
        handle.close(timeout=10)

    poller = Poller(exporter.metrics_port)
    poller.thread.start()
    threads = [threading.Thread(target=read_on, args=(i,), daemon=True) for i in range(readers)]
    try:
        wait_until(lambda: len(poller.points()) >= 2, timeout=30, interval=0.5, what="the exporter's count")
        before = poller.points()[-1].bytes
        for thread in threads:
            thread.start()
        time.sleep(15)
        # While they read: the count as of its last update, against what they had read by then.
        counted, done = poller.points()[-1].bytes - before, sum(read)
        connections = float(next(line.split()[-1] for line in metrics_text("127.0.0.1", exporter.metrics_port)
                                  .splitlines() if line.startswith("switchyard_xcache_open_connections")))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        poller.stop.set()
        poller.thread.join(timeout=5)
    assert not failed, failed[:3]
    assert connections >= readers, connections
    assert 0.8 * done <= counted <= done + readers * chunk, (counted, done)   # a chunk each in flight at most
