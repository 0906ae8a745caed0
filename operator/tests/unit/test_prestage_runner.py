"""The prestage runner's pieces: its pace, its URL list, its report and journal, its failover (fake xrdcp)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from switchyard.prestage import Progress, parse_report, progress_from_samples
from switchyard.prestage.pace import Pace
from switchyard.prestage.runner import Journal, Runner, Tally, exit_code, read_urls
from switchyard.routing import Router


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_pace_bounds_what_readers_take_to_the_rate_plus_one_chunk():
    clock = FakeClock()
    pace = Pace(1000.0, clock=clock, sleep=clock.sleep)
    taken = 0
    for _ in range(50):
        pace.took(100)
        taken += 100
        # what was taken by now is at most rate x elapsed plus the chunk just read
        assert taken <= 1000.0 * clock.now + 100
    assert clock.now == pytest.approx(5.0)


def test_a_stalled_reader_saves_up_no_burst():
    clock = FakeClock()
    pace = Pace(1000.0, clock=clock, sleep=clock.sleep)
    pace.took(100)
    clock.now += 60  # a minute with nothing read (a slow cache)
    assert pace.took(1000) == pytest.approx(1.0)  # no credit for the idle minute


def test_a_pace_must_be_positive():
    with pytest.raises(ValueError):
        Pace(0)


def test_urls_skip_comments_blanks_and_repeats_in_order():
    assert read_urls(["# set", "", " root://o//a ", "root://o//b", "root://o//a"]) == ["root://o//a", "root://o//b"]


def test_the_report_goes_through_the_termination_message_and_back():
    progress = Progress(3, 1, 2, 300, 200, ("root://o//x: xrdcp exit 54",))
    assert parse_report(progress.report()) == progress
    assert progress.to_status() == {"files": {"total": 6, "done": 3, "failed": 1, "remaining": 2},
                                    "bytes": {"done": 300, "remaining": 200}}
    for text in (None, "", "not json", '{"files": {}}', '{"files": {"done": -1, "failed": 0, "remaining": 0}, '
                                                        '"bytes": {"done": 0, "remaining": 0}}'):
        assert parse_report(text) is None


def test_progress_from_the_runner_metrics():
    samples = {("switchyard_prestage_runner_files", "done"): 2.0, ("switchyard_prestage_runner_files", "failed"): 0.0,
               ("switchyard_prestage_runner_files", "remaining"): 5.0,
               ("switchyard_prestage_runner_bytes", "done"): 20.0,
               ("switchyard_prestage_runner_bytes", "remaining"): 50.0}
    assert progress_from_samples(samples) == Progress(2, 0, 5, 20, 50)
    assert progress_from_samples({}) is None


def _fake(tmp_path: Path, name: str, body: str) -> str:
    script = tmp_path / name
    script.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    script.chmod(0o755)
    return str(script)


def _runner(tmp_path: Path, urls: list[str], journal: Journal) -> Runner:
    router = Router.from_env({"SWITCHYARD_ROUTING": "hashed",
                              "SWITCHYARD_CACHE_RING": "down@root://10.0.0.1:1094=5,up@root://10.0.0.2:1094=1"})
    xrdfs = _fake(tmp_path, "xrdfs", "print('Size:   6')")
    # the cache at 10.0.0.1 is down; the other serves every file's six bytes
    xrdcp = _fake(tmp_path, "xrdcp", "url = sys.argv[-2]\n"
                  "if '10.0.0.1' in url:\n    sys.stderr.write('[ERROR] Server responded with an error\\n'); sys.exit(54)\n"
                  "sys.stdout.write('abcdef')")
    tally = Tally(urls, CollectorRegistry(), 1e9)
    return Runner(router, Pace(1e9), tally, journal, xrdcp=xrdcp, xrdfs=xrdfs, log=lambda line: None)


def test_a_file_whose_home_fails_is_read_from_the_next_cache_and_journaled(tmp_path):
    urls = ["root://origin//store/a.root", "root://origin//store/b.root", "https://elsewhere/c"]
    journal = Journal.open(tmp_path / "done")
    runner = _runner(tmp_path, urls, journal)
    progress = runner.run(urls, parallel=2)
    assert (progress.files_done, progress.files_failed, progress.bytes_done) == (2, 1, 12)
    assert progress.failed == ("https://elsewhere/c: not a root:// URL",)
    assert Journal.open(tmp_path / "done").done == {urls[0]: 6, urls[1]: 6}


def test_a_restarted_runner_skips_the_journaled_files(tmp_path):
    urls = ["root://origin//store/a.root", "root://origin//store/b.root"]
    (tmp_path / "done").write_text(f"6 {urls[0]}\n")
    runner = _runner(tmp_path, urls, Journal.open(tmp_path / "done"))
    runner.xrdcp = _fake(tmp_path, "xrdcp-counting", f"open({str(tmp_path / 'reads')!r}, 'a').write(sys.argv[-2] + '\\n')\n"
                         "sys.stdout.write('abcdef')")
    progress = runner.run(urls, parallel=1)
    assert progress.files_done == 2 and progress.bytes_done == 12
    assert [line.rsplit("//", 1)[1] for line in (tmp_path / "reads").read_text().splitlines()] == ["store/b.root"]


def test_the_bytes_remaining_count_every_file_before_it_is_read(tmp_path):
    urls = [f"root://origin//store/{name}.root" for name in "abcd"]
    runner = _runner(tmp_path, urls, Journal.open(None))
    remaining = []
    read_through = runner.read_through

    def watched(cache_url, paced=True):
        # the stats run ahead of the reads: while the first file waits to be read, the others' sizes come in
        deadline = time.monotonic() + 20
        while len(runner.tally.sizes) < len(urls) and time.monotonic() < deadline:
            time.sleep(0.01)
        remaining.append(runner.tally.progress().bytes_remaining)
        return read_through(cache_url, paced)

    runner.read_through = watched
    runner.run(urls, parallel=1)
    # 6 bytes a file, each read twice (its home is down, then the next cache): the whole list from the first read
    assert remaining == [24, 24, 18, 18, 12, 12, 6, 6]


def test_the_report_fits_the_kubelets_4096_bytes_however_long_the_failures():
    # five URLs of the longest the model admits, with why, each character one JSON escapes to many
    for char in ("a", '"', "é", "\U0001F600"):
        failed = tuple(f"root://o//{char * 2040}: xrdcp exit 54: [ERROR] {char * 2000}" for _ in range(5))
        progress = Progress(10 ** 12, 10 ** 12, 10 ** 12, 10 ** 18, 10 ** 18, failed)
        report = progress.report()
        assert len(report.encode()) <= 4096
        back = parse_report(report)
        assert back.files_failed == 10 ** 12 and len(back.failed) == 5 and back.failed[0].endswith("...")
    short = Progress(0, 1, 0, 0, 0, ("root://o//x: xrdcp exit 54",))
    assert parse_report(short.report()) == short  # an entry that fits is kept whole


def test_a_run_with_failed_files_ends_well_unless_no_file_was_read():
    assert exit_code(Progress(9, 1, 0, 90, 0)) == 0      # Complete, FilesFailed: not retried for a missing file
    assert exit_code(Progress(10, 0, 0, 100, 0)) == 0
    assert exit_code(Progress(0, 10, 0, 0, 0)) == 1      # no cache answered: the Job runs it again


def test_xrdcp_writing_much_to_stderr_does_not_block_the_read(tmp_path):
    # more than a pipe holds (64 KiB) on stderr before any byte on stdout: a stderr pipe read only after
    # stdout closed blocks xrdcp and the runner both (the alarm ends the fake should it hang)
    runner = _runner(tmp_path, ["root://origin//store/a.root"], Journal.open(None))
    runner.xrdcp = _fake(tmp_path, "xrdcp-loud", "import signal; signal.alarm(20)\n"
                         "sys.stderr.write('[WARNING] retrying\\n' * 20000); sys.stderr.flush()\n"
                         "sys.stdout.write('abcdef'); sys.stdout.flush(); sys.exit(3)")
    result = []
    reader = threading.Thread(target=lambda: result.append(runner.read_through("root://10.0.0.2:1094//store/a.root")),
                              daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "read_through blocked on xrdcp's stderr"
    assert result == [(6, "xrdcp exit 3: [WARNING] retrying")]


class _RecordingPace:
    """Records what is charged, and when: before an open (the fake xrdcp has not run yet) or during a read."""

    def __init__(self, tmp_path: Path) -> None:
        self.opens = tmp_path / "opens"
        self.charged: list[tuple[int, int]] = []   # (bytes, files opened by then)

    def took(self, count: int) -> float:
        opened = len(self.opens.read_text().splitlines()) if self.opens.exists() else 0
        self.charged.append((count, opened))
        return 0.0


def test_a_sized_file_is_charged_whole_before_its_open_and_read_unpaced(tmp_path):
    # XCache prefetches an opened file to its end: the WAN is spent at the open, so that is where the pace is
    urls = ["root://origin//store/a.root", "root://origin//store/b.root"]
    runner = _runner(tmp_path, urls, Journal.open(None))
    runner.pace = pace = _RecordingPace(tmp_path)
    runner.xrdcp = _fake(tmp_path, "xrdcp-opens", f"open({str(pace.opens)!r}, 'a').write(sys.argv[-2] + '\\n')\n"
                         "url = sys.argv[-2]\n"
                         "if '10.0.0.1' in url:\n    sys.exit(54)\n"
                         "sys.stdout.write('abcdef')")
    progress = runner.run(urls, parallel=1)
    assert progress.files_done == 2
    # each file's home is down: charged again for the next cache, which fetches it afresh; never per chunk
    assert pace.charged == [(6, 0), (6, 1), (6, 2), (6, 3)]


def test_a_file_of_unknown_size_is_paced_as_it_is_read(tmp_path):
    urls = ["root://origin//store/a.root"]
    runner = _runner(tmp_path, urls, Journal.open(None))
    runner.xrdfs = _fake(tmp_path, "xrdfs-fails", "sys.exit(51)")
    runner.pace = pace = _RecordingPace(tmp_path)
    runner.xrdcp = _fake(tmp_path, "xrdcp-opens", f"open({str(pace.opens)!r}, 'a').write(sys.argv[-2] + '\\n')\n"
                         "sys.stdout.write('abcdef')")
    runner.router = Router.from_env({"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_CACHE_RING": "up@root://10.0.0.2:1094=1"})
    assert runner.run(urls, parallel=1).files_done == 1
    assert pace.charged == [(6, 1)]
