"""`switchyard exporter`: XRootD monitoring → Prometheus, as a cache pod's sidecar.

xrootd sends its summary stream and pfc g-stream to this process over UDP on
loopback (see switchyard.xrootd.config); it keeps running totals in memory and
serves them, with disk usage of the cache's spaces, on /metrics. It opens no
file per message and survives any packet: a malformed one is only counted.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .exporterspec import DEFAULT_METRICS_PORT
from .xrootd.config import DEFAULT_EXPORTER_PORT
from .xrootd.monitoring import CacheTotals, MalformedPacket, Summary, decode

PREFIX = "switchyard_xcache_"
LABELS = ("pool", "host", "switch")

log = logging.getLogger("switchyard.exporter")


@dataclass(frozen=True)
class SpaceUsage:
    """Bytes of one cache space, each filesystem counted once."""

    total: int
    used: int


def disk_usage(path: str) -> tuple[int, int, int] | None:
    """(device, total, used) of the filesystem holding `path`; None if unreadable."""
    try:
        st = os.statvfs(path)
        device = os.stat(path).st_dev
    except OSError:
        return None
    total = st.f_blocks * st.f_frsize
    return device, total, total - st.f_bfree * st.f_frsize


def space_usage(paths: Iterable[str]) -> SpaceUsage:
    """Usage of a space as XrdOss sees it: disks sharing a filesystem count once."""
    seen: dict[int, tuple[int, int]] = {}
    for path in paths:
        usage = disk_usage(path)
        if usage is not None:
            seen[usage[0]] = usage[1:]
    return SpaceUsage(sum(t for t, _ in seen.values()), sum(u for _, u in seen.values()))


@dataclass(frozen=True)
class ExporterSettings:
    pool: str
    host: str
    switch: str
    data_paths: tuple[str, ...]
    meta_paths: tuple[str, ...]
    low_watermark: float
    high_watermark: float


class XCacheCollector(Collector):
    """Turns the in-memory totals into metric families at scrape time."""

    def __init__(self, settings: ExporterSettings) -> None:
        self.settings = settings
        self.totals = CacheTotals()
        self.lock = threading.Lock()
        self.packets = {"summary": 0, "gstream": 0, "ignored": 0}
        self.malformed = 0
        self.last_summary_at: float | None = None

    def receive(self, packet: bytes, now: float) -> None:
        """Account for one datagram; never raises for bad input."""
        try:
            decoded = decode(packet)
        except Exception as error:  # noqa: BLE001 - no packet may stop the exporter
            with self.lock:
                self.malformed += 1
            if not isinstance(error, MalformedPacket):
                log.warning("undecodable monitoring packet (%s): %s", type(error).__name__, error)
            return
        kind = "summary" if isinstance(decoded, Summary) else "gstream" if isinstance(decoded, list) else "ignored"
        with self.lock:
            self.totals.add(decoded)
            self.packets[kind] += 1
            if kind == "summary":
                self.last_summary_at = now

    def _label_values(self) -> list[str]:
        return [self.settings.pool, self.settings.host, self.settings.switch]

    def collect(self) -> Iterator:
        labels = self._label_values()
        with self.lock:
            totals, summary = self.totals, self.totals.summary
            yield from self._counters(labels, totals)
            yield from self._packet_counters(labels)
            if summary is not None:
                yield from self._summary_metrics(labels, summary)
            if self.last_summary_at is not None:
                yield _gauge("last_summary_timestamp_seconds", "When the last xrd.report summary arrived (Unix time).",
                             labels, self.last_summary_at)
        yield from self._space_metrics(labels)

    def _counters(self, labels: list[str], totals: CacheTotals) -> Iterator:
        yield _counter("hit_bytes", "Bytes served from the cache's disks, per pfc g-stream file_close records.", labels, totals.hit_bytes)
        yield _counter("miss_bytes", "Bytes served on a cache miss, per pfc g-stream file_close records.", labels, totals.miss_bytes)
        yield _counter("bypass_bytes", "Bytes read from the origin around the cache, per pfc g-stream.", labels, totals.bypass_bytes)
        yield _counter("origin_bytes", "Bytes fetched from the origin (new blocks written to disk plus bypass).", labels, totals.origin_bytes)
        yield _counter("files_closed", "Files the cache closed (pfc g-stream file_close records).", labels, totals.files_closed)

    def _packet_counters(self, labels: list[str]) -> Iterator:
        family = CounterMetricFamily(PREFIX + "monitoring_packets", "Monitoring packets received, by kind.",
                                     labels=[*LABELS, "kind"])
        for kind, count in sorted(self.packets.items()):
            family.add_metric([*labels, kind], count)
        yield family
        yield _counter("monitoring_malformed_packets", "Monitoring packets that could not be decoded (dropped).", labels, self.malformed)

    def _summary_metrics(self, labels: list[str], summary: Summary) -> Iterator:
        yield _counter("client_bytes", "Bytes sent to clients (xrd.report link out).", labels, summary.bytes_sent)
        yield _counter("client_received_bytes", "Bytes received from clients (xrd.report link in).", labels, summary.bytes_received)
        yield _counter("connections", "Client connections accepted since xrootd started.", labels, summary.connections_total)
        yield _gauge("open_connections", "Client connections open now.", labels, summary.connections)
        if summary.open_files is not None:
            yield _gauge("open_files", "Files open now (ofs file handles).", labels, summary.open_files)
        yield _gauge("xrootd_start_time_seconds", "When the reporting xrootd started (Unix time).", labels, summary.started)

    def _space_metrics(self, labels: list[str]) -> Iterator:
        settings = self.settings
        total = GaugeMetricFamily(PREFIX + "space_total_bytes", "Size of a cache space (its disks' filesystems, each once).",
                                  labels=[*LABELS, "space"])
        used = GaugeMetricFamily(PREFIX + "space_used_bytes", "Bytes used in a cache space (size minus free), what pfc.diskusage compares with the water marks.",
                                 labels=[*LABELS, "space"])
        ratio = GaugeMetricFamily(PREFIX + "space_usage_ratio", "Used fraction of a cache space; compare with "
                                  + PREFIX + "space_watermark_ratio.", labels=[*LABELS, "space"])
        for space, paths in (("data", settings.data_paths), ("meta", settings.meta_paths)):
            if paths:
                usage = space_usage(paths)
                total.add_metric([*labels, space], usage.total)
                used.add_metric([*labels, space], usage.used)
                if usage.total:
                    ratio.add_metric([*labels, space], usage.used / usage.total)
        yield total
        yield used
        yield ratio
        disk_total = GaugeMetricFamily(PREFIX + "disk_total_bytes", "Size of each data disk.", labels=[*LABELS, "path"])
        disk_used = GaugeMetricFamily(PREFIX + "disk_used_bytes", "Bytes used on each data disk.", labels=[*LABELS, "path"])
        for path in settings.data_paths:
            usage = disk_usage(path)
            if usage is not None:
                disk_total.add_metric([*labels, path], usage[1])
                disk_used.add_metric([*labels, path], usage[2])
        yield disk_total
        yield disk_used
        marks = GaugeMetricFamily(PREFIX + "space_watermark_ratio", "pfc.diskusage water marks of the data space.",
                                  labels=[*LABELS, "space", "mark"])
        marks.add_metric([*labels, "data", "low"], settings.low_watermark)
        marks.add_metric([*labels, "data", "high"], settings.high_watermark)
        yield marks


def _counter(name: str, documentation: str, labels: list[str], value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(PREFIX + name, documentation, labels=list(LABELS))
    family.add_metric(labels, value)
    return family


def _gauge(name: str, documentation: str, labels: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(PREFIX + name, documentation, labels=list(LABELS))
    family.add_metric(labels, value)
    return family


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError("a water mark is a fraction in (0, 1]")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="switchyard exporter", description=__doc__.splitlines()[0])
    parser.add_argument("--pool", required=True, help="XCachePool name (label 'pool').")
    parser.add_argument("--switch", default="", help="Switch of this cache host (label 'switch').")
    parser.add_argument("--host", default=os.environ.get("NODE_NAME") or socket.gethostname(),
                        help="Cache host name (label 'host'); defaults to $NODE_NAME, then the host name.")
    parser.add_argument("--udp", type=_host_port, default=("127.0.0.1", DEFAULT_EXPORTER_PORT),
                        help="Where xrootd sends monitoring (HOST:PORT, loopback).")
    parser.add_argument("--metrics-address", default="0.0.0.0", help="Address /metrics listens on.")
    parser.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT, help="Port /metrics listens on.")
    parser.add_argument("--data-path", action="append", default=[], help="A data disk of the cache (repeat per disk).")
    parser.add_argument("--meta-path", action="append", default=[], help="The cache's metadata space directory.")
    parser.add_argument("--low-watermark", type=_fraction, default=0.90, help="pfc.diskusage low water mark.")
    parser.add_argument("--high-watermark", type=_fraction, default=0.95, help="pfc.diskusage high water mark.")
    parser.add_argument("--log-level", default="INFO", help="Python logging level.")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Run the exporter until SIGTERM or SIGINT; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    collector = XCacheCollector(ExporterSettings(
        pool=args.pool, host=args.host, switch=args.switch,
        data_paths=tuple(args.data_path), meta_paths=tuple(args.meta_path),
        low_watermark=args.low_watermark, high_watermark=args.high_watermark,
    ))
    registry = CollectorRegistry()
    registry.register(collector)

    receiver = socket.socket(socket.AF_INET6 if ":" in args.udp[0] else socket.AF_INET, socket.SOCK_DGRAM)
    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # ride out bursts of file closes
    receiver.bind(args.udp)
    receiver.settimeout(0.5)  # wake up to notice a stop request
    server, server_thread = start_http_server(args.metrics_port, args.metrics_address, registry=registry)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("exporter for pool %s host %s switch %s: UDP %s:%d, metrics on %s:%d",
             args.pool, args.host, args.switch, *args.udp, args.metrics_address, args.metrics_port)
    try:
        while not stop.is_set():
            try:
                packet = receiver.recv(65536)
            except TimeoutError:
                continue
            collector.receive(packet, time.time())
    finally:
        receiver.close()
        server.shutdown()
        server_thread.join(timeout=5)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
