"""Operator-wide kopf settings, applied once at startup."""

from __future__ import annotations

import logging
import os

import kopf
from prometheus_client import start_http_server

PREFIX = "switchyard.dev"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, logger, **_):
    # Progress and diff-base live in annotations: status belongs to our schema.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration")
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    # Handlers post meaningful events themselves (Created, Ready, reasons);
    # kopf's own log lines (every timer run) would flood `describe`.
    settings.posting.level = logging.ERROR
    # Explicit timeouts so a stalled watch is noticed and restarted.
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 15
    settings.execution.max_workers = int(os.environ.get("SWITCHYARD_WORKERS", "8"))
    settings.batching.error_delays = [1, 2, 5, 10, 20, 30]
    port = int(os.environ.get("SWITCHYARD_METRICS_PORT", "8080"))
    if port:
        start_http_server(port)
        logger.info(f"Metrics on :{port}/metrics")
