"""`switchyard prestage`: warm a pool's caches with a list of files, at no more than a share of the WAN.

Each file is read through the cache the ring rule names for it (the routing client's `Router`, from the
same SWITCHYARD_* environment and ring file a hashed worker gets): reading through a cache is what fills
it, and a file it already holds costs the origin nothing. Should the home cache fail, the next in the
rule's order is read, as a worker would fail over. Reads go through `xrdcp <cache URL> -`.

The pace (pace.Pace, shared by the parallel readers) is kept where the WAN is spent: at a file's open.
XrdPfc prefetches every file a client opens to its end (pfc.prefetch bounds the blocks in flight, not how
far ahead), so a reader slowed to the pace only delays its next open while the cache fetches the open files
at whatever the WAN gives it: in `make bench-prestage` (issue #30), 64 MiB files read that way took the WAN
at 1.56-2.01 of the budget. So a file of known size is charged to the pace whole before it is opened, and
read at once: by any time t the runner has opened at most rate x t bytes, and the cache's fetch of one file
spreads over the time the next waits. A file whose size the stat did not give is paced as it is read (the
pipe, then the TCP window fill and xrdcp stops asking: XRD_CPPARALLELCHUNKS=1 and a small XRD_CPCHUNKSIZE
bound what it has in flight), which holds the runner's reads but not the cache's prefetch. A file the cache
already holds is charged too: it costs the origin nothing, but the runner cannot tell before it opens it.

Files the runner finished are appended to a journal (JOURNAL_DIR/JOURNAL_FILE, an emptyDir in the Job's
pod): a runner restarted in the same pod skips them without a read. Progress is served on /metrics and,
at the end, written as one JSON line to the termination message (prestage/__init__.py). No shell: every
command is an argument list, and a URL is one argument.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from ..routing import SCHEMES, Router, RoutingError
from . import (BUDGET, BYTES, FAILED_SHOWN, FILES, JOURNAL_DIR, JOURNAL_FILE, METRICS_PORT, READ_BYTES,
               TERMINATION_LOG, Progress)
from .pace import Pace

CHUNK_BYTES = 256 * 1024          # what is read from xrdcp's pipe between two waits
XRDCP_CHUNK_BYTES = 1024 * 1024   # xrdcp's own reads from the cache (XRD_CPCHUNKSIZE), one at a time
STAT_TIMEOUT = 30.0
STAT_PARALLEL = 8
_SIZE = re.compile(r"^\s*Size:\s*(\d+)\s*$", re.MULTILINE)


def read_urls(lines: Iterable[str]) -> list[str]:
    """One URL per line; blank lines and lines starting with '#' are skipped, a URL listed twice is read once."""
    seen: dict[str, None] = {}
    for line in lines:
        url = line.strip()
        if url and not url.startswith("#"):
            seen.setdefault(url, None)
    return list(seen)


def is_xrootd_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in SCHEMES and bool(parts.netloc) and bool(parts.path.strip("/"))


def _split(cache_url: str) -> tuple[str, str]:
    """`root://host:port//path?q` -> ('root://host:port', '/path?q') for xrdfs."""
    parts = urlsplit(cache_url)
    path = "/" + cache_url.split("://", 1)[1].split("/", 1)[1].lstrip("/")
    return f"{parts.scheme}://{parts.netloc}", path


@dataclass
class Journal:
    """The files finished in this pod, `size url` per line, appended as each finishes."""

    path: Path | None
    done: dict[str, int] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path | None) -> "Journal":
        journal = cls(path)
        if path is not None and path.exists():
            for line in path.read_text(errors="replace").splitlines():
                size, _, url = line.partition(" ")
                if size.isdigit() and url:
                    journal.done[url] = int(size)
        return journal

    def record(self, url: str, size: int) -> None:
        self.done[url] = size
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(f"{size} {url}\n")


class Tally:
    """Files and bytes done, failed and remaining, exported as they change."""

    def __init__(self, urls: Sequence[str], registry: CollectorRegistry, rate: float) -> None:
        self._lock = threading.Lock()
        self.remaining = set(urls)
        self.sizes: dict[str, int] = {}
        self.done_files = self.done_bytes = 0
        self.failed: dict[str, str] = {}
        self.read_total = 0
        self.files = Gauge(FILES, "Files of the prestage, by state.", ["state"], registry=registry)
        self.bytes = Gauge(BYTES, "Bytes of the prestage, by state (remaining: of the files whose size is known).",
                           ["state"], registry=registry)
        self.read = Counter(READ_BYTES.removesuffix("_total"), "Bytes read through the caches.", registry=registry)
        Gauge(BUDGET, "The pace the reads keep, bytes/s.", registry=registry).set(rate)
        self._export()

    def add_read(self, count: int) -> None:
        with self._lock:
            self.read_total += count
        self.read.inc(count)

    def sized(self, url: str, size: int) -> None:
        with self._lock:
            self.sizes[url] = size
            self._export()

    def finished(self, url: str, size: int) -> None:
        with self._lock:
            self.remaining.discard(url)
            self.done_files += 1
            self.done_bytes += size
            self._export()

    def fail(self, url: str, why: str) -> None:
        with self._lock:
            self.remaining.discard(url)
            self.failed[url] = why
            self._export()

    def progress(self) -> Progress:
        with self._lock:
            return self._progress()

    def _progress(self) -> Progress:
        shown = tuple(f"{url}: {why}" for url, why in list(self.failed.items())[:FAILED_SHOWN])
        return Progress(self.done_files, len(self.failed), len(self.remaining), self.done_bytes,
                        sum(self.sizes.get(u, 0) for u in self.remaining), shown)

    def _export(self) -> None:
        now = self._progress()
        for state, value in (("done", now.files_done), ("failed", now.files_failed),
                             ("remaining", now.files_remaining)):
            self.files.labels(state).set(value)
        self.bytes.labels("done").set(now.bytes_done)
        self.bytes.labels("remaining").set(now.bytes_remaining)


Run = Callable[..., subprocess.CompletedProcess]


@dataclass
class Runner:
    router: Router
    pace: Pace
    tally: Tally
    journal: Journal
    xrdcp: str = "xrdcp"
    xrdfs: str = "xrdfs"
    attempts: int = 3
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)

    def size_of(self, url: str) -> int | None:
        """The file's size, asked of its home cache (a stat: metadata, no file data)."""
        for cache_url in self.router.candidates(url)[:self.attempts]:
            host, path = _split(cache_url)
            try:
                done = subprocess.run([self.xrdfs, host, "stat", path], capture_output=True, text=True,
                                      timeout=STAT_TIMEOUT, check=False)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if done.returncode == 0 and (found := _SIZE.search(done.stdout)):
                return int(found.group(1))
        return None

    def read_through(self, cache_url: str, paced: bool = True) -> tuple[int, str]:
        """Read one file from one cache, at the pace if `paced`: (bytes read, '' or why it failed)."""
        env = {**os.environ, "XRD_CPCHUNKSIZE": str(XRDCP_CHUNK_BYTES), "XRD_CPPARALLELCHUNKS": "1"}
        # stderr to a file, not a pipe: xrdcp writing more than a pipe holds while this reads its stdout
        # would block them both.
        with tempfile.TemporaryFile() as errors:
            try:
                process = subprocess.Popen([self.xrdcp, "--nopbar", "--force", cache_url, "-"],
                                           stdout=subprocess.PIPE, stderr=errors, env=env)
            except OSError as error:
                return 0, f"cannot run {self.xrdcp}: {error}"
            got = 0
            assert process.stdout is not None
            with process:
                descriptor = process.stdout.fileno()
                while chunk := os.read(descriptor, CHUNK_BYTES):
                    got += len(chunk)
                    self.tally.add_read(len(chunk))
                    if paced:
                        self.pace.took(len(chunk))
                code = process.wait()
            errors.seek(0)
            error = errors.read().decode(errors="replace")
        if code != 0:
            last = [line for line in error.splitlines() if line.strip()][-1:] or [f"exit {code}"]
            return got, f"xrdcp exit {code}: {last[0].strip()}"
        return got, ""

    def _sized(self, url: str) -> int | None:
        size = self.size_of(url)
        if size is not None:
            self.tally.sized(url, size)
        return size

    def fetch(self, url: str, sizing: Future | None = None) -> None:
        """Read one file through its cache (`sizing`: its stat under way, else it is stat'ed here)."""
        if url in self.journal.done:
            self.tally.finished(url, self.journal.done[url])
            return
        if not is_xrootd_url(url):
            self.tally.fail(url, "not a root:// URL")
            return
        size = sizing.result() if sizing is not None else self._sized(url)
        why = "no cache to read it from"
        for cache_url in self.router.candidates(url)[:self.attempts]:
            if size is not None:
                self.pace.took(size)  # before the open: what the cache will fetch of it (each cache afresh)
            got, why = self.read_through(cache_url, paced=size is None)
            if not why and size is not None and got != size:
                why = f"read {got} of {size} bytes"
            if not why:
                self.journal.record(url, got)
                self.tally.finished(url, got)
                return
            self.log(f"prestage: {url} from {cache_url}: {why}")
        self.tally.fail(url, why)

    def run(self, urls: Sequence[str], parallel: int) -> Progress:
        """Every file read; their sizes asked first, STAT_PARALLEL at a time in the order they are read, so
        the bytes remaining count the whole list early, not only the files being read."""
        stat = [u for u in urls if u not in self.journal.done and is_xrootd_url(u)]
        with ThreadPoolExecutor(max_workers=STAT_PARALLEL) as sizer, \
                ThreadPoolExecutor(max_workers=max(1, parallel)) as readers:
            sizes = {url: sizer.submit(self._sized, url) for url in stat}
            list(readers.map(lambda url: self.fetch(url, sizes.get(url)), urls))
        return self.tally.progress()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="switchyard prestage", description=__doc__.splitlines()[0])
    parser.add_argument("--urls", required=True, action="append",
                        help="file of origin URLs, one per line (repeatable)")
    parser.add_argument("--gbps", type=float, required=True,
                        help="the pace: at most this many Gbps read in total (the WAN share)")
    parser.add_argument("--parallel", type=int, default=4, help="files read at once")
    parser.add_argument("--metrics-address", default="0.0.0.0")
    parser.add_argument("--metrics-port", type=int, default=METRICS_PORT, help="/metrics port (0: none)")
    parser.add_argument("--journal", default=f"{JOURNAL_DIR}/{JOURNAL_FILE}",
                        help="file of finished files, kept across restarts ('': none)")
    parser.add_argument("--termination-log", default=TERMINATION_LOG)
    args = parser.parse_args(argv)
    if not args.gbps > 0 or args.parallel < 1:
        parser.error("--gbps must be above 0 and --parallel at least 1")
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    try:
        router = Router.from_env()
    except RoutingError as error:
        print(f"switchyard prestage: {error}", file=sys.stderr)
        return 2
    if router.routing is None:
        print("switchyard prestage: no routing in the environment (SWITCHYARD_ROUTING and the ring)", file=sys.stderr)
        return 2
    urls: list[str] = []
    for name in args.urls:
        urls += read_urls(Path(name).read_text(encoding="utf-8").splitlines())
    urls = read_urls(urls)
    rate = args.gbps * 1e9 / 8
    registry = CollectorRegistry()
    tally = Tally(urls, registry, rate)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_address, registry=registry)
    journal_path = Path(args.journal) if args.journal else None
    if journal_path is not None and not journal_path.parent.is_dir():
        journal_path = None
    runner = Runner(router, Pace(rate), tally, Journal.open(journal_path))
    started = time.monotonic()
    progress = runner.run(urls, args.parallel)
    took = time.monotonic() - started
    print(f"prestage: {progress.files_done} file(s) done, {progress.files_failed} failed, "
          f"{progress.bytes_done} bytes in {took:.1f} s ({tally.read_total * 8 / max(took, 1e-9) / 1e9:.3f} "
          f"Gbps read, pace {args.gbps:g} Gbps)", file=sys.stderr, flush=True)
    try:
        Path(args.termination_log).write_text(progress.report() + "\n", encoding="utf-8")
    except OSError:
        pass
    return exit_code(progress)


def exit_code(progress: Progress) -> int:
    """0 when the list was read, failed files and all (they are reported: the prestage is Complete with
    FilesFailed, not retried for a file missing at the origin); 1, so that the Job retries, when files failed
    and none was read: no cache answered, which a later run may find otherwise."""
    return 1 if progress.files_failed and not progress.files_done else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
