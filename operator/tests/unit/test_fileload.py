"""The exporter's per-file read load: decaying rates, a bounded table, the hottest first."""

from __future__ import annotations

import math

import pytest

from switchyard.observe.fileload import FileLoad


def test_a_steady_load_reads_as_its_rate_and_decays_by_e_every_tau():
    load = FileLoad(tau=60.0)
    for step in range(60):  # 10 MB every 10 s for 10 minutes: 1 MB/s
        load.add("/hot", 10_000_000, now=10.0 * step)
    at_last_record = load.rate("/hot", 590.0)
    # Steps of 10 s under a 60 s tau: just after a record the estimate is 1/6 / (1 - e^-1/6) = 1.085 of the rate.
    assert at_last_record == pytest.approx(1e6 * (1 / 6) / (1 - math.exp(-1 / 6)), rel=1e-3)
    assert load.rate("/hot", 590.0 + 60.0) == pytest.approx(at_last_record / math.e)
    assert load.rate("/absent", 590.0) == 0.0


def test_the_table_is_bounded_and_evicts_the_coldest():
    load = FileLoad(capacity=3)
    for index, (path, size) in enumerate([("/a", 300), ("/b", 200), ("/c", 100)]):
        load.add(path, size, now=float(index))
    load.add("/d", 150, now=3.0)      # /c is the coldest
    assert len(load) == 3 and load.rate("/c", 3.0) == 0.0
    load.add("/e", 1, now=3.0)        # the newcomer is the coldest: it goes
    assert [path for path, _ in load.hottest(10, 3.0)] == ["/a", "/b", "/d"]


def test_hottest_is_ordered_bounded_and_drops_files_below_the_floor():
    load = FileLoad(tau=1.0)
    for path, size in [("/x", 5), ("/y", 9), ("/w", 5), ("/z", 1)]:
        load.add(path, size, now=0.0)
    assert load.hottest(3, 0.0) == [("/y", 9.0), ("/w", 5.0), ("/x", 5.0)]  # ties by path
    assert load.hottest(10, 0.0, floor=4.0) == [("/y", 9.0), ("/w", 5.0), ("/x", 5.0)]
    assert load.hottest(10, math.log(9.0), floor=1.0 - 1e-9) == [("/y", pytest.approx(1.0))]


def test_recent_bytes_outweigh_old_ones():
    load = FileLoad(tau=60.0)
    load.add("/old", 1000, now=0.0)
    load.add("/new", 500, now=60.0)   # half the bytes, one tau later: 500 > 1000/e
    assert [path for path, _ in load.hottest(2, 60.0)] == ["/new", "/old"]


def test_rates_survive_rebasing_over_a_long_run():
    load = FileLoad(tau=1.0)
    load.add("/f", 100, now=0.0)
    load.add("/g", 100, now=1000.0)   # 1000 tau later: the origin moves instead of e^1000 overflowing
    assert load.rate("/g", 1000.0) == pytest.approx(100.0)
    assert load.rate("/f", 1000.0) == 0.0
    assert load.rate("/g", 1001.0) == pytest.approx(100.0 / math.e)


def test_nothing_read_changes_nothing_and_a_clock_stepped_back_does_not_inflate():
    load = FileLoad(tau=10.0)
    load.add("/f", 0, now=0.0)
    assert len(load) == 0
    load.add("/f", 100, now=50.0)
    assert load.rate("/f", 40.0) == pytest.approx(load.rate("/f", 50.0))


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        FileLoad(tau=0.0)
    with pytest.raises(ValueError):
        FileLoad(capacity=0)
