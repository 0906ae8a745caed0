"""The prestage runner's contract: what the operator builds into its Job and reads back from it.

A CachePrestage becomes one Job whose pod runs `switchyard prestage` (runner.py): it reads each listed
file through the cache the ring rule names for it (planner/hashing.py), which fills that cache, at no more
than the WAN share's rate in total. It serves its progress on METRICS_PORT (the families below, no labels
but `state`) and, as it ends, writes the same figures as one JSON line to its termination message, which
the kubelet keeps in the pod's status after the pod's address is gone. Standard library only: the builders
and the operator's handler import it; the runner's own imports (prometheus_client, routing) stay there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

METRICS_PORT = 9934
PREFIX = "switchyard_prestage_runner_"
FILES = PREFIX + "files"          # gauge, label state: done, failed, remaining
BYTES = PREFIX + "bytes"          # gauge, label state: done, remaining (remaining: the files stat'ed, not done)
READ_BYTES = PREFIX + "read_bytes_total"   # counter: bytes read through the caches (paced)
BUDGET = PREFIX + "budget_bytes_per_second"  # gauge: the pace
FILE_STATES = ("done", "failed", "remaining")
BYTE_STATES = ("done", "remaining")
# Where the runner keeps the files it finished (an emptyDir: it outlives a restart of the container, so a
# runner restarted in the same pod skips them without a read; a new pod reads them through the caches,
# which costs the WAN nothing for a file already cached).
JOURNAL_DIR = "/var/run/switchyard-prestage"
JOURNAL_FILE = "done"
TERMINATION_LOG = "/dev/termination-log"
FAILED_SHOWN = 5  # failed URLs named in the termination report (the kubelet keeps at most 4096 bytes of it)
FAILED_ENTRY_CHARS = 600  # each as JSON at most: five of them and the counts stay within the 4096 bytes


@dataclass(frozen=True)
class Progress:
    """Files and bytes as the runner counts them."""

    files_done: int = 0
    files_failed: int = 0
    files_remaining: int = 0
    bytes_done: int = 0
    bytes_remaining: int = 0
    failed: tuple[str, ...] = ()   # a few failed URLs with why (the report only)

    @property
    def files_total(self) -> int:
        return self.files_done + self.files_failed + self.files_remaining

    def to_status(self) -> dict:
        """status.files and status.bytes of the CachePrestage."""
        return {"files": {"total": self.files_total, "done": self.files_done, "failed": self.files_failed,
                          "remaining": self.files_remaining},
                "bytes": {"done": self.bytes_done, "remaining": self.bytes_remaining}}

    def report(self) -> str:
        """The termination message: one JSON line."""
        return json.dumps({"files": {"done": self.files_done, "failed": self.files_failed,
                                     "remaining": self.files_remaining},
                           "bytes": {"done": self.bytes_done, "remaining": self.bytes_remaining},
                           "failedUrls": [_capped(entry) for entry in self.failed[:FAILED_SHOWN]]}, sort_keys=True)


def _capped(entry: str) -> str:
    """`entry` cut to FAILED_ENTRY_CHARS as it is written in the report (JSON escapes count: a quote is two
    characters, a non-ASCII one six), marked with '...' when cut: a URL may be 2048 characters."""
    if len(json.dumps(entry)) <= FAILED_ENTRY_CHARS:
        return entry
    cut = entry[:FAILED_ENTRY_CHARS]
    while len(json.dumps(cut + "...")) > FAILED_ENTRY_CHARS:
        cut = cut[:-max(1, (len(json.dumps(cut + "...")) - FAILED_ENTRY_CHARS) // 6)]
    return cut + "..."


def _count(value: object) -> int:
    number = int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else -1
    if number < 0:
        raise ValueError(f"{value!r} is not a count")
    return number


def parse_report(text: str | None) -> Progress | None:
    """A termination message back into Progress; None when it is not the runner's report."""
    try:
        data = json.loads(text or "")
        files, size = data["files"], data["bytes"]
        failed = tuple(str(u) for u in data.get("failedUrls") or ())[:FAILED_SHOWN]
        return Progress(_count(files["done"]), _count(files["failed"]), _count(files["remaining"]),
                        _count(size["done"]), _count(size["remaining"]), failed)
    except (ValueError, TypeError, KeyError):
        return None


def progress_from_samples(samples: Mapping[tuple[str, str], float]) -> Progress | None:
    """Progress from the runner's /metrics ((family name, state) -> value); None without its gauges."""
    try:
        return Progress(int(samples[(FILES, "done")]), int(samples[(FILES, "failed")]),
                        int(samples[(FILES, "remaining")]), int(samples[(BYTES, "done")]),
                        int(samples[(BYTES, "remaining")]))
    except KeyError:
        return None
