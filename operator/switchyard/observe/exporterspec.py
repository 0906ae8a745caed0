"""The cache exporter sidecar as data: its port and command line (what the builders need).

The exporter's runtime (exporter.py: sockets, threads, a Prometheus server) is
not imported by the builders; both take these from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api.xcachepool import XCachePoolBody
from .clientmap import KEY as CLIENT_MAP_KEY
from ..xrootd.config import DEFAULT_EXPORTER_PORT, meta_space_path

DEFAULT_METRICS_PORT = 9933  # the sidecar's /metrics
CLIENT_MAP_DIR = "/etc/switchyard/clients"  # where the client map ConfigMap is mounted in the sidecar
PREFIX = "switchyard_xcache_"
LABELS = ("pool", "host", "switch")  # on every family, first
# Hot files the exporter publishes, and the least rate that is published (1 kB/s: an idle file's series ends).
HOT_FILES_SHOWN = 20
HOT_FILE_FLOOR_BYTES_PER_SECOND = 1000.0


@dataclass(frozen=True)
class Family:
    """One metric family the exporter serves: its name (after PREFIX), type, meaning and further labels."""

    name: str
    type: str
    documentation: str
    labels: tuple[str, ...] = ()


FAMILIES = {f.name: f for f in (
    Family("last_summary_timestamp_seconds", "gauge", "When the last xrd.report summary arrived (Unix time)."),
    Family("exporter_start_time_seconds", "gauge", "When this exporter started (Unix time): its counters count from "
           "then."),
    Family("served_bytes_timestamp_seconds", "gauge", "When served_bytes_total was last brought up to date (Unix "
           "time): the last f-stream packet, or, once the f-stream has been silent for two summary intervals (no "
           "file being read), the last summary."),
    Family("hit_bytes", "counter", "Bytes served from the cache's disks, per pfc g-stream file_close records."),
    Family("miss_bytes", "counter", "Bytes served on a cache miss, per pfc g-stream file_close records."),
    Family("bypass_bytes", "counter", "Bytes read from the origin around the cache, per pfc g-stream."),
    Family("origin_bytes", "counter", "Bytes fetched from the origin (new blocks written to disk plus bypass)."),
    Family("files_closed", "counter", "Files the cache closed (pfc g-stream file_close records)."),
    Family("monitoring_malformed_packets", "counter", "Monitoring packets that could not be decoded (dropped)."),
    Family("client_bytes", "counter", "Bytes sent to clients (xrd.report link out). XRootD 5.5 leaves "
           "connections open and busy out of it (flat with some 40 such readers): use served_bytes_total."),
    Family("client_received_bytes", "counter", "Bytes received from clients (xrd.report link in)."),
    Family("connections", "counter", "Client connections accepted since xrootd started."),
    Family("open_connections", "gauge", "Client connections open now."),
    Family("open_files", "gauge", "Files open now (ofs file handles)."),
    Family("xrootd_start_time_seconds", "gauge", "When the reporting xrootd started (Unix time)."),
    Family("served_bytes", "counter", "Bytes clients read from this cache (f-stream), by the switch the reader "
           "sits behind (the mounted client map; 'unknown' when not in it, 'unattributed' when the exporter saw no open "
           "or login for the file: opened before it started).", ('client_switch',)),
    Family("monitoring_packets", "counter", "Monitoring packets received, by kind.", ('kind',)),
    Family("space_total_bytes", "gauge", "Size of a cache space (its disks' filesystems, each once).", ('space',)),
    Family("space_used_bytes", "gauge", "Bytes used in a cache space (size minus free), what pfc.diskusage compares with the water marks.", ('space',)),
    Family("space_usage_ratio", "gauge", "Used fraction of a cache space; compare with switchyard_xcache_space_watermark_ratio.", ('space',)),
    Family("disk_total_bytes", "gauge", "Size of each data disk.", ('path',)),
    Family("disk_used_bytes", "gauge", "Bytes used on each data disk.", ('path',)),
    Family("space_watermark_ratio", "gauge", "pfc.diskusage water marks of the data space.", ('space', 'mark')),
    Family("hot_file_read_bytes_per_second", "gauge", f"Read rate of this cache's hottest files (at most "
           f"{HOT_FILES_SHOWN}, by path; f-stream bytes read, decaying with a 60 s time constant); a file "
           f"leaves below {HOT_FILE_FLOOR_BYTES_PER_SECOND:g} bytes/s.", ('path',)),
)}


def exporter_args(pool: XCachePoolBody, *, pool_name: str, switch: str,
                  exporter_port: int = DEFAULT_EXPORTER_PORT, metrics_port: int = DEFAULT_METRICS_PORT) -> list[str]:
    """Arguments after `switchyard exporter` for a sidecar of `pool` (host from NODE_NAME)."""
    args = ["--pool", pool_name, "--switch", switch,
            "--udp", f"127.0.0.1:{exporter_port}", "--metrics-port", str(metrics_port),
            "--meta-path", meta_space_path(pool),
            "--low-watermark", str(pool.pfc.low_watermark), "--high-watermark", str(pool.pfc.high_watermark)]
    for path in pool.storage.data_paths:
        args += ["--data-path", path]
    return [*args, "--client-map", f"{CLIENT_MAP_DIR}/{CLIENT_MAP_KEY}"]
