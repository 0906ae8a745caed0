"""At startup: the operator's settings read once from the environment, kopf's own settings, the metrics server."""

from __future__ import annotations

import datetime
import json
import logging

import kopf

from ..observe import metrics
from ..policy.settings import Settings, current, install

PREFIX = "switchyard.dev"

# kopf keeps its state in annotations anyone who may edit the object can write.
# Garbage there (not JSON, or the wrong shape) must cost the object its stored
# state, never a traceback: it is then handled as if seen for the first time.
_PROGRESS_TYPES = {"started": str, "stopped": str, "delayed": str, "purpose": str, "retries": int,
                   "success": bool, "failure": bool, "message": str, "subrefs": list}
_TIMES = ("started", "stopped", "delayed")


def _json_object(encoded: object) -> dict | None:
    try:
        decoded = json.loads(encoded) if isinstance(encoded, str) else None
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


def _valid_progress(record: dict) -> bool:
    for key, value in record.items():
        wanted = _PROGRESS_TYPES.get(key)
        if value is not None and wanted is not None and (not isinstance(value, wanted) or
                                                         (wanted is int and isinstance(value, bool))):
            return False
    try:
        for key in _TIMES:
            if record.get(key) is not None:
                datetime.datetime.fromisoformat(record[key])
    except ValueError:
        return False
    return True


class TolerantProgressStorage(kopf.AnnotationsProgressStorage):
    """kopf's annotation progress storage, reading malformed records as absent."""

    def fetch(self, *, key, body):
        for full_key in self.make_keys(key, body=body):
            record = _json_object((body.get("metadata", {}).get("annotations") or {}).get(full_key))
            if record is not None and _valid_progress(record):
                return record
        return None


class TolerantDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled-configuration storage, reading a malformed one as absent."""

    def fetch(self, *, body):
        for full_key in self.make_keys(self.key, body=body):
            essence = _json_object((body.get("metadata", {}).get("annotations") or {}).get(full_key))
            if essence is not None:
                return essence
        return None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, logger, **_):
    ours = install(Settings.from_environment())
    # Progress and diff-base live in annotations: status belongs to our schema.
    settings.persistence.progress_storage = TolerantProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = TolerantDiffBaseStorage(
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
    settings.execution.max_workers = ours.workers
    settings.batching.error_delays = [1, 2, 5, 10, 20, 30]
    port = ours.metrics_port
    if port:
        metrics.serve(port)
        logger.info(f"Metrics on :{port}/metrics")


@kopf.on.startup()
async def memory_dump_on_signal(logger, **_):
    """With SWITCHYARD_MEMDUMP_DIR set, SIGUSR1 writes where the heap is to that folder (the first
    signal starts tracing, the next ones report what was allocated since): how the operator's
    memory is profiled at scale. Tracing from the interpreter's start slows it too much for that."""
    directory = current().memdump_dir
    if not directory:
        return
    import asyncio
    import signal

    from .memdump import dump
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump, directory)
    logger.info(f"SIGUSR1 writes a heap report to {directory}")
