"""Helpers the e2e tests share (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import time

import localcluster
from switchyard.apply import ApiError

# SWITCHYARD_E2E_CLUSTER lets several suites run side by side on separate clusters.
REPO = localcluster.REPO
CLUSTER_NAME = os.environ.get("SWITCHYARD_E2E_CLUSTER", "switchyard-e2e")
TOPOLOGY = localcluster.REPO / "e2e" / "topologies" / "mini.yaml"


def wait_for(predicate, timeout: float = 120, interval: float = 1.0, what: str = "condition"):
    """Poll until predicate() returns a truthy value; return it."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except ApiError as exc:
            last_error = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def condition(obj: dict | None, ctype: str) -> dict:
    """An object's condition of type `ctype` ({} if it has none yet)."""
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions", []) if c["type"] == ctype), {})


def ready_condition(obj: dict) -> dict:
    return condition(obj, "Ready")


def wait_ready(cluster, ns, name="af", generation=None, timeout=180):
    """Wait until the facility is Ready at `generation` (default: its current one)."""
    def check():
        obj = cluster.kube.get("AnalysisFacility", ns, name)
        if not obj:
            return None
        gen = generation or obj["metadata"]["generation"]
        cond = ready_condition(obj)
        return obj if cond.get("status") == "True" and obj["status"].get("observedGeneration") == gen else None
    return wait_for(check, timeout, what=f"AnalysisFacility {name} Ready")
