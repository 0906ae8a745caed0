"""`switchyard exporter`: XRootD monitoring → Prometheus, as a cache pod's sidecar.

xrootd sends its summary stream, pfc g-stream, user logins and f-stream to
this process over UDP on loopback (see switchyard.xrootd.config); it keeps
running totals in memory and serves them, with disk usage of the cache's
spaces, on /metrics. It opens no file per message and survives any packet: a
malformed one is only counted. Bytes read are labelled with the reader's
switch from the client map file (a mounted ConfigMap), read again when it
changes, so node churn never restarts a cache pod.

The same f-stream bytes, by the path each file was opened with, feed a
decaying read rate per file (fileload.py, a bounded table); the hottest are
served as a gauge with a `path` label. A gauge on /metrics rather than a JSON
endpoint: the operator already reads this text (handlers/exporters.py), and a
site's Grafana can show what is hot on which cache (`topk`) with no other
scrape. Its cardinality is bounded: at most HOT_FILES_SHOWN series per cache
host, and a file whose rate falls below the floor leaves, so the series that
churn are only those of files moving in and out of the top; a full per-file
table (thousands of paths) is what must not reach Prometheus, and does not.

The same port serves the pool's routing to readers outside Kubernetes
(HTCondor jobs: no credentials, no mounted ConfigMap, but they reach the
cache hosts' addresses, and this sidecar runs on the host network):
`GET /routing/ring` and `/routing/hot`, the `ring` and `hot` keys the
operator puts beside the client map in the same ConfigMap while a facility's
spec.outsideReaders read through the pool (builders/xcachepool.py), the text
the fleets' routing ConfigMaps hold. Read from the mounted files at each
request, so kubelet's refresh reaches them with no restart; 404 when the pool
publishes none (and for `hot` when it lists no hot file). switchyard.routing
fetches them (SWITCHYARD_ROUTING_URL).
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

from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .clientmap import UNATTRIBUTED, UNKNOWN, ClientMap, InvalidClientMap
from .exporterspec import (
    DEFAULT_METRICS_PORT, FAMILIES, HOT_FILE_FLOOR_BYTES_PER_SECOND, HOT_FILES_SHOWN, LABELS, PREFIX,
)
from .fileload import FileLoad
from ..routing import HOT_KEY, RING_KEY, ROUTING_PATH
from ..xrootd.config import DEFAULT_EXPORTER_PORT
from ..xrootd.monitoring import CacheTotals, FileStream, MalformedPacket, Summary, UserLogin, decode


log = logging.getLogger("switchyard.observe.exporter")
MAP_CHECK_SECONDS = 5.0  # how often the client map file is looked at (kubelet swaps a ConfigMap in within ~1 min)
MALFORMED_LOG_SECONDS = 60.0  # at most one line a minute about refused monitoring packets
# Summaries in a row with no f-stream packet before served_bytes_total counts as up to date at each summary.
# xrootd sends the f-stream at every fstat pass that has a record (an open file's bytes, a close), at the
# summaries' interval (xrootd/config.py): a pass within two silent intervals had nothing to say.
SILENT_SUMMARIES = 3


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


class ClientMapFile:
    """The client map at `path`, parsed again whenever its text changes; the last good one is kept."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.text: str | None = None
        self.map = ClientMap()

    def refresh(self) -> bool:
        """True when a new map was loaded."""
        if not self.path:
            return False
        try:
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as error:
            if self.text is not None:
                log.warning("client map %s unreadable, keeping the last one: %s", self.path, error)
                self.text = None
            return False
        if text == self.text:
            return False
        self.text = text
        try:
            self.map = ClientMap.from_json(text)
        except InvalidClientMap as error:
            log.warning("client map %s refused, keeping the last one: %s", self.path, error)
            return False
        log.info("client map %s: %d networks on %d switches", self.path, len(self.map.networks), len(self.map.switches))
        return True


def _kind(decoded) -> str:
    if isinstance(decoded, Summary):
        return "summary"
    if isinstance(decoded, list):
        return "gstream"
    if isinstance(decoded, UserLogin):
        return "user"
    return "fstream" if isinstance(decoded, FileStream) else "ignored"


class XCacheCollector(Collector):
    """Turns the in-memory totals into metric families at scrape time."""

    def __init__(self, settings: ExporterSettings) -> None:
        self.settings = settings
        self.totals = CacheTotals()
        self.lock = threading.Lock()
        self.packets = {"summary": 0, "gstream": 0, "user": 0, "fstream": 0, "ignored": 0}
        self.client_switches: frozenset[str] = frozenset()
        self.malformed = 0
        self.malformed_logged_at = float("-inf")
        self.last_summary_at: float | None = None
        self.started_at = time.time()
        self.served_at: float | None = None  # when the served bytes were last known up to date
        self.summaries_since_fstream = 0
        self.file_load = FileLoad()
        self.clock = time.time  # the clock `receive` is given; rates are read against it at scrape time

    def receive(self, packet: bytes, now: float) -> None:
        """Account for one datagram; never raises for bad input."""
        try:
            decoded = decode(packet)
        except Exception as error:  # noqa: BLE001 - no packet may stop the exporter
            with self.lock:
                self.malformed += 1
                say = now - self.malformed_logged_at >= MALFORMED_LOG_SECONDS
                if say:
                    self.malformed_logged_at = now
            if not isinstance(error, MalformedPacket):
                log.warning("undecodable monitoring packet (%s): %s", type(error).__name__, error)
            elif say:  # refused packets are counted; one line a minute says why (a stream that turned bad)
                log.warning("monitoring packet refused (%d so far): %s", self.malformed, error)
            return
        kind = _kind(decoded)
        with self.lock:
            self.totals.add(decoded)
            for path, read_bytes in self.totals.clients.take_path_reads().items():
                self.file_load.add(path, read_bytes, now)
            self.packets[kind] += 1
            if kind == "fstream":
                self.served_at, self.summaries_since_fstream = now, 0
            elif kind == "summary":
                self.last_summary_at = now
                self.summaries_since_fstream += 1
                if self.summaries_since_fstream >= SILENT_SUMMARIES:
                    self.served_at = now

    def use_client_map(self, client_map: ClientMap) -> None:
        """Files opened from now on are attributed with `client_map`."""
        with self.lock:
            self.totals.clients.switch_of = client_map.switch_of
            self.client_switches = client_map.switches

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
                yield _sample("last_summary_timestamp_seconds", labels, self.last_summary_at)
            if self.served_at is not None:
                yield _sample("served_bytes_timestamp_seconds", labels, self.served_at)
            yield _sample("exporter_start_time_seconds", labels, self.started_at)
            yield self._hot_files(labels)
        yield from self._space_metrics(labels)

    def _counters(self, labels: list[str], totals: CacheTotals) -> Iterator:
        yield _sample("hit_bytes", labels, totals.hit_bytes)
        yield _sample("miss_bytes", labels, totals.miss_bytes)
        yield _sample("bypass_bytes", labels, totals.bypass_bytes)
        yield _sample("origin_bytes", labels, totals.origin_bytes)
        yield _sample("files_closed", labels, totals.files_closed)
        served = _family("served_bytes")
        by_switch = totals.clients.by_switch
        # Every switch of the map, 'unknown' and 'unattributed' from the start, so rate() sees the first bytes.
        for switch in sorted(self.client_switches | by_switch.keys() | {UNKNOWN, UNATTRIBUTED}):
            served.add_metric([*labels, switch], by_switch.get(switch, 0))
        yield served

    def _hot_files(self, labels: list[str]) -> GaugeMetricFamily:
        family = _family("hot_file_read_bytes_per_second")
        for path, rate in self.file_load.hottest(HOT_FILES_SHOWN, self.clock(), HOT_FILE_FLOOR_BYTES_PER_SECOND):
            family.add_metric([*labels, path], rate)
        return family

    def _packet_counters(self, labels: list[str]) -> Iterator:
        family = _family("monitoring_packets")
        for kind, count in sorted(self.packets.items()):
            family.add_metric([*labels, kind], count)
        yield family
        yield _sample("monitoring_malformed_packets", labels, self.malformed)

    def _summary_metrics(self, labels: list[str], summary: Summary) -> Iterator:
        yield _sample("client_bytes", labels, summary.bytes_sent)
        yield _sample("client_received_bytes", labels, summary.bytes_received)
        yield _sample("connections", labels, summary.connections_total)
        yield _sample("open_connections", labels, summary.connections)
        if summary.open_files is not None:
            yield _sample("open_files", labels, summary.open_files)
        yield _sample("xrootd_start_time_seconds", labels, summary.started)

    def _space_metrics(self, labels: list[str]) -> Iterator:
        settings = self.settings
        total = _family("space_total_bytes")
        used = _family("space_used_bytes")
        ratio = _family("space_usage_ratio")
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
        disk_total = _family("disk_total_bytes")
        disk_used = _family("disk_used_bytes")
        for path in settings.data_paths:
            usage = disk_usage(path)
            if usage is not None:
                disk_total.add_metric([*labels, path], usage[1])
                disk_used.add_metric([*labels, path], usage[2])
        yield disk_total
        yield disk_used
        marks = _family("space_watermark_ratio")
        marks.add_metric([*labels, "data", "low"], settings.low_watermark)
        marks.add_metric([*labels, "data", "high"], settings.high_watermark)
        yield marks


def _family(name: str) -> CounterMetricFamily | GaugeMetricFamily:
    """An empty family as exporterspec.FAMILIES declares it."""
    spec = FAMILIES[name]
    kind = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
    return kind(PREFIX + name, spec.documentation, labels=[*LABELS, *spec.labels])


def _sample(name: str, labels: list[str], value: float) -> CounterMetricFamily | GaugeMetricFamily:
    """A family with one sample."""
    family = _family(name)
    family.add_metric(labels, value)
    return family


ROUTED = {f"{ROUTING_PATH}/{key}": key for key in (RING_KEY, HOT_KEY)}  # URL path -> the mounted key


def routing_app(metrics_app, routing_dir: str | None):
    """A WSGI app: ROUTED paths from the files in `routing_dir` (text, never cached), the rest `metrics_app`."""
    def app(environ, start_response):
        key = ROUTED.get(environ.get("PATH_INFO", ""))
        if key is None:
            return metrics_app(environ, start_response)
        head = environ.get("REQUEST_METHOD") == "HEAD"  # the headers GET would send (Content-Length too), no body
        text = None
        if routing_dir:
            try:
                with open(os.path.join(routing_dir, key), encoding="utf-8") as handle:
                    text = handle.read()
            except OSError:
                text = None
        if text is None:
            published = bool(routing_dir) and os.path.exists(os.path.join(routing_dir, RING_KEY))
            body = ("no hot file listed\n" if published else
                    f"no {key} published: no spec.outsideReaders group reads through this pool\n").encode()
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8"),
                                             ("Content-Length", str(len(body)))])
            return [] if head else [body]
        body = text.encode("utf-8")
        start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-cache"),
                                  ("Content-Length", str(len(body)))])
        return [] if head else [body]
    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        """No line per request: Prometheus and the outside readers ask all the time."""


def start_server(port: int, address: str, app) -> tuple:
    """`app` served on address:port from a daemon thread, as prometheus_client's start_http_server does."""
    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

    httpd = make_server(address, port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return httpd, thread


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
    parser.add_argument("--client-map", default=None,
                        help="JSON file: switch -> client addresses/CIDRs (the mounted ConfigMap); re-read on change.")
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
    client_map = ClientMapFile(args.client_map)
    if client_map.refresh():
        collector.use_client_map(client_map.map)
    registry = CollectorRegistry()
    registry.register(collector)

    receiver = socket.socket(socket.AF_INET6 if ":" in args.udp[0] else socket.AF_INET, socket.SOCK_DGRAM)
    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # ride out bursts of file closes
    receiver.bind(args.udp)
    receiver.settimeout(0.5)  # wake up to notice a stop request
    # The routing the operator publishes beside the client map (the same mounted ConfigMap).
    routing_dir = os.path.dirname(args.client_map) if args.client_map else None
    server, server_thread = start_server(args.metrics_port, args.metrics_address,
                                         routing_app(make_wsgi_app(registry), routing_dir))

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("exporter for pool %s host %s switch %s: UDP %s:%d, metrics on %s:%d",
             args.pool, args.host, args.switch, *args.udp, args.metrics_address, args.metrics_port)
    next_map_check = time.monotonic() + MAP_CHECK_SECONDS
    try:
        while not stop.is_set():
            if time.monotonic() >= next_map_check:
                next_map_check = time.monotonic() + MAP_CHECK_SECONDS
                if client_map.refresh():
                    collector.use_client_map(client_map.map)
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
