"""`switchyard prestage` against a real origin and two real caches (the config switchyard renders).

The runner is the one a CachePrestage's Job runs, started as a process with the environment the Job gives
it (builders/prestage.py; the ring file, of the two caches, a local file). Origin bytes are the origin's own xrd.report counter: an independent
witness of what the caches fetched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from xrootd_fixtures import cache_pool, free_port, start_cache, start_origin, wait_until, xrdcp

from switchyard.api.prestage import CachePrestageSpec
from switchyard.builders.prestage import build_prestage
from switchyard.desired import validate
from switchyard.prestage import FILES, parse_report
from switchyard.prestage.runner import CHUNK_BYTES
from switchyard.routing import Router, ring_entry

pytestmark = pytest.mark.integration

MIB = 1 << 20
FILES_IN_SET = 12
FILE_BYTES = 4 * MIB          # 16 cache blocks of 256 KiB: the origin sends whole blocks, so exactly these bytes
PACE_GBPS = 0.08              # 10 MB/s: ~5 s for the 48 MiB set, far below what loopback carries
PARALLEL = 3
PROTOCOL_OVERHEAD = 64 * 1024  # opens and stats on the wire: far below one block
BLOCK = 256 * 1024             # the pool's pfc.blocksize: a block fetched again would show as this many bytes


@pytest.fixture
def rig(xrd_base, xrootd_account):
    origin = start_origin(xrd_base, xrootd_account)
    caches = []
    try:
        for index in range(2):
            data = xrootd_account.make_dir(xrd_base / f"c{index}-data")
            meta = xrootd_account.make_dir(xrd_base / f"c{index}-meta")
            caches.append(start_cache(xrd_base, xrootd_account, cache_pool(origin.daemon.port, [str(data)], str(meta))))
        yield origin, caches
    finally:
        for cache in caches:
            cache.daemon.stop()
        origin.daemon.stop()
        origin.meter.close()


def _env(caches, work: Path) -> dict[str, str]:
    """The environment the CachePrestage's Job gives its runner (builders/prestage.py), its ring file a local
    file in the fleets' format (one `node@root://address:port=weight` a line)."""
    ring = work / "routing" / "ring"
    ring.parent.mkdir()
    ring.write_text("".join(f"{ring_entry(f'cache-{i}', f'127.0.0.1:{c.daemon.port}', 1)}\n"
                            for i, c in enumerate(caches)))
    model, _ = validate(CachePrestageSpec, {"poolRef": {"name": "pool"}, "urls": ["root://o//x"], "wanShare": 1})
    [_, job] = build_prestage("warm", "ns", model, pool="pool", pool_port=caches[0].daemon.port, origin_mode="fixed",
                              ring_fleet="fleet", image="i", gbps=PACE_GBPS, uid=1094)
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    return {**os.environ, **env, "HOME": os.environ.get("HOME", "/tmp"), "SWITCHYARD_CACHE_RING_FILE": str(ring)}


class RunnerProcess:
    def __init__(self, work: Path, urls: Path, env: dict[str, str], journal: Path, tag: str) -> None:
        self.port = free_port()
        self.report = work / f"report-{tag}"
        self.log = work / f"runner-{tag}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "switchyard.cli", "prestage", "--urls", str(urls), "--gbps", str(PACE_GBPS),
                 "--parallel", str(PARALLEL), "--metrics-address", "127.0.0.1", "--metrics-port", str(self.port),
                 "--journal", str(journal), "--termination-log", str(self.report)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.started = time.monotonic()

    def samples(self) -> dict[tuple[str, str], float]:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return {}
        return {(s.name, s.labels.get("state", "")): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def wait(self, timeout: float = 120) -> float:
        self.process.wait(timeout=timeout)
        return time.monotonic() - self.started

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


class OriginRate:
    """The origin's bytes sent, sampled from its 1 s reports: the fastest 2 s and the whole run's mean."""

    def __init__(self, origin) -> None:
        self.origin, self.points, self._stop = origin, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            latest = self.origin.meter.latest
            if latest is not None and (not self.points or self.points[-1][0] != latest.reported):
                self.points.append((latest.reported, latest.bytes_sent))
            time.sleep(0.2)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(timeout=5)
        rates = [(b2 - b1) * 8 / (t2 - t1) / 1e9 for (t1, b1), (t2, b2) in zip(self.points, self.points[2:])
                 if t2 > t1]
        return {"max_2s_gbps": max(rates, default=0.0)}


def test_prestage_warms_the_ring_homes_at_the_pace_and_a_restart_fetches_no_finished_file_again(rig, xrd_base):
    origin, caches = rig
    urls = [f"root://127.0.0.1:{origin.daemon.port}/" + origin.put(f"set/f{i:02d}.root", os.urandom(FILE_BYTES))
            for i in range(FILES_IN_SET)]
    unique = FILES_IN_SET * FILE_BYTES
    listing = xrd_base / "urls.txt"
    listing.write_text("# the bench's dataset\n" + "\n".join(urls + urls[:2]) + "\n")  # a repeat is read once
    journal = xrd_base / "journal"
    env = _env(caches, xrd_base)
    before = origin.bytes_sent_now()

    # A runner killed half-way, then restarted in the same pod (its journal kept).
    rate = OriginRate(origin)
    first = RunnerProcess(xrd_base, listing, env, journal, "first")
    wait_until(lambda: first.samples().get((FILES, "done"), 0) >= FILES_IN_SET // 2, timeout=60, interval=0.1,
               what="half the files done")
    done_when_killed = int(first.samples().get((FILES, "done"), 0))
    first.kill()
    journaled = len(journal.read_text().splitlines())
    second = RunnerProcess(xrd_base, listing, env, journal, "second")
    took = second.wait()
    origin_rate = rate.stop()
    assert second.process.returncode == 0, second.log.read_text()
    report = parse_report(second.report.read_text())
    assert report is not None and report.files_done == FILES_IN_SET and report.files_failed == 0, report
    assert report.bytes_done == unique and report.files_remaining == 0
    after_prestage = origin.bytes_sent_now()
    fetched = after_prestage - before
    print(f"\nprestage: killed at {done_when_killed} files done ({journaled} journaled); the restart read "
          f"{FILES_IN_SET - journaled} file(s) in {took:.2f} s; origin sent {fetched} bytes for {unique} unique; "
          f"origin's fastest 2 s: {origin_rate['max_2s_gbps']:.3f} Gbps (pace {PACE_GBPS} Gbps)")
    # Two runs' opens and stats (~5 kB a file) ride on top; one block or more would be file data fetched again.
    assert unique <= fetched < unique + BLOCK, "a finished file was fetched from the origin again"

    # The restarted runner's own read rate keeps the pace: it may be ahead by one chunk per reader at most.
    read = (FILES_IN_SET - journaled) * FILE_BYTES
    floor = (read - PARALLEL * CHUNK_BYTES) / (PACE_GBPS * 1e9 / 8)
    print(f"prestage: restarted runner read {read} bytes in {took:.2f} s = {read * 8 / took / 1e9:.3f} Gbps "
          f"(pace {PACE_GBPS} Gbps; the pace allows no less than {floor:.2f} s)")
    assert took >= floor * 0.98

    # An analysis pass reads every file from its home in the ring: nothing from the origin.
    router = Router.from_env(env)
    for url in urls:
        result = xrdcp(router.route(url), xrd_base / "analysis.root")
        assert result.returncode == 0, result.stderr
        assert (xrd_base / "analysis.root").stat().st_size == FILE_BYTES
    after_analysis = origin.bytes_sent_now()
    print(f"prestage: the analysis pass made the origin send {after_analysis - after_prestage} bytes")
    assert after_analysis - after_prestage < PROTOCOL_OVERHEAD

    # A runner in a new pod (no journal) reads the set through the caches again: the origin sends nothing.
    third = RunnerProcess(xrd_base, listing, env, xrd_base / "no-such-dir" / "journal", "third")
    took_third = third.wait()
    assert third.process.returncode == 0, third.log.read_text()
    after_rerun = origin.bytes_sent_now()
    print(f"prestage: a new pod's runner re-read the warm set in {took_third:.2f} s; origin sent "
          f"{after_rerun - after_analysis} bytes")
    assert after_rerun - after_analysis < PROTOCOL_OVERHEAD
    assert parse_report(third.report.read_text()).bytes_done == unique
