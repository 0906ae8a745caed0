"""The cache exporter sidecar as data: its port and command line (what the builders need).

The exporter's runtime (exporter.py: sockets, threads, a Prometheus server) is
not imported by the builders; both take these from here.
"""

from __future__ import annotations

from .api.xcachepool import XCachePoolBody
from .xrootd.config import DEFAULT_EXPORTER_PORT, meta_space_path

DEFAULT_METRICS_PORT = 9933  # the sidecar's /metrics


def exporter_args(pool: XCachePoolBody, *, pool_name: str, switch: str,
                  exporter_port: int = DEFAULT_EXPORTER_PORT, metrics_port: int = DEFAULT_METRICS_PORT) -> list[str]:
    """Arguments after `switchyard exporter` for a sidecar of `pool` (host from NODE_NAME)."""
    args = ["--pool", pool_name, "--switch", switch,
            "--udp", f"127.0.0.1:{exporter_port}", "--metrics-port", str(metrics_port),
            "--meta-path", meta_space_path(pool),
            "--low-watermark", str(pool.pfc.low_watermark), "--high-watermark", str(pool.pfc.high_watermark)]
    for path in pool.storage.data_paths:
        args += ["--data-path", path]
    return args
