"""The readers of one fabric node: a thread per stream, reading its files in order, round and round.

    python3 fabric_reader.py SPEC.json

SPEC: {"once": false, "streams": [{"urls": ["root://10.77.1.1:1094//f00.root", ...], "wire_mbit": 0}],
       "report": "done.json", "ready": "ready", "go": "go"}.
Each stream opens a file with the XRootD client, reads it to the end in CHUNK
reads, closes it and takes the next (the way an analysis job walks its files,
so a stream's bytes split over its sources in fixed proportions and the
slowest source holds it back). One process keeps the client's connections
open between files: no process start per file, so files can be small and a
20 s window sees many of them. wire_mbit > 0 paces the stream (wire bytes).
With "once", every URL is read once (warming a cache, or a fixed workload) and
the exit status says whether all reads succeeded; "report" names a file that
gets each stream's wall-clock end (time.time(), null for a stream that did not
finish) and the failed reads' count, for completion times. With "ready" and
"go", the process touches "ready" once it has started (imports done) and reads
nothing until "go" exists: every reader of a run starts at the same moment
(fabric.py release_readers). SIGTERM stops the streams.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from XRootD import client
from XRootD.client.flags import OpenFlags

CHUNK = 1 << 20
WIRE_PER_PAYLOAD = 1514 / 1448
TIMEOUT = 60
CREDIT = 1.0   # seconds of reading a paced stream may be behind and make up
START_POLL = 0.05  # seconds between looks for the start signal


def read_file(url: str, stop: threading.Event, pace) -> bool:
    f = client.File()
    status, _ = f.open(url, OpenFlags.READ, timeout=TIMEOUT)
    if not status.ok:
        return False
    # The size from the open's reply (XrdCl asks for it with the open; no round trip): reads stop at the
    # file's end, as fsspec's and uproot's do. A request past the end would count whole in the cache's
    # f-stream (it counts what a request asks for), doubling a 1 MiB file's bytes in the exporter.
    status, info = f.stat(timeout=TIMEOUT)
    if not status.ok:
        f.close(timeout=TIMEOUT)
        return False
    offset = 0
    ok = True
    while offset < info.size and not stop.is_set():
        status, data = f.read(offset, min(CHUNK, info.size - offset), timeout=TIMEOUT)
        if not status.ok or not data:
            ok = False
            break
        offset += len(data)
        pace(len(data))
    f.close(timeout=TIMEOUT)
    return ok


def stream(urls: list[str], wire_mbit: float, once: bool, stop: threading.Event, failures: list[str]) -> None:
    rate = wire_mbit * 1e6 / 8 / WIRE_PER_PAYLOAD
    due = [time.monotonic()]

    def pace(n: int) -> None:
        if rate <= 0:
            return
        now = time.monotonic()
        # A stream the network held back banks at most CREDIT seconds: a task reads no faster than it
        # processes, so it does not race to make up for a slow read.
        due[0] = max(due[0], now - CREDIT) + n / rate
        if due[0] > now:
            stop.wait(due[0] - now)

    while not stop.is_set():
        for url in urls:
            if stop.is_set():
                return
            if not read_file(url, stop, pace):
                failures.append(url)
                if once:
                    return
                stop.wait(1.0)
        if once:
            return


def wait_for_go(ready: str, go: str, stop: threading.Event) -> None:
    open(ready, "w").close()
    while not os.path.exists(go) and not stop.wait(START_POLL):
        pass


def main(path: str) -> int:
    spec = json.loads(open(path).read())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if spec.get("go"):
        wait_for_go(spec["ready"], spec["go"], stop)
    failures: list[str] = []
    ended: list[float | None] = [None] * len(spec["streams"])

    def run(i: int, s: dict) -> None:
        stream(s["urls"], s.get("wire_mbit", 0), spec.get("once", False), stop, failures)
        if not stop.is_set():
            ended[i] = time.time()

    threads = [threading.Thread(target=run, args=(i, s), daemon=True) for i, s in enumerate(spec["streams"])]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    if spec.get("report"):
        with open(spec["report"], "w") as out:
            json.dump({"ended": ended, "failures": len(failures)}, out)
    if failures:
        print(f"{len(failures)} reads failed, first {failures[0]}", file=sys.stderr)
    return 1 if failures and spec.get("once") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
