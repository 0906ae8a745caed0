"""Reading the cache hosts' exporters (`switchyard exporter` sidecars): their /metrics text, by pod.

Cache pods use host networking, so an exporter answers on its pod's IP at
the sidecar's metrics port. Used for the pools' disk usage (xcachepool.py)
and the facilities' prediction drift (drift.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import urllib3

from ..builders.common import POOL_LABEL
from ..builders.xcachepool import METRICS_PORT
from .client import kube

_exporters = urllib3.PoolManager(num_pools=256, maxsize=1, retries=False,
                                 timeout=urllib3.Timeout(connect=2.0, read=3.0))


def metrics_text(address: str, port: int = METRICS_PORT) -> str | None:
    """An exporter's /metrics; None when it does not answer with 200."""
    host = f"[{address}]" if ":" in address else address
    try:
        response = _exporters.request("GET", f"http://{host}:{port}/metrics")
    except urllib3.exceptions.HTTPError:
        return None
    return response.data.decode("utf-8", "replace") if response.status == 200 else None


def _is_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or ())


def ready_cache_pods(namespace: str, pool: str) -> list[dict]:
    """The pool's cache pods that are Ready, have an address and are not going away."""
    return [p for p in kube().list("Pod", namespace, {POOL_LABEL: pool})
            if _is_ready(p) and p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]


def read_all(addresses: Sequence[str]) -> list[str | None]:
    """The exporter text at each pod address (None where it did not answer), read concurrently."""
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(addresses)))) as pool:
        return list(pool.map(metrics_text, addresses))
