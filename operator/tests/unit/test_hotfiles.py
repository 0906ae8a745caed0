"""A pool's hot files: which files get more than one home, how many, and how the list follows the load."""

from __future__ import annotations

import random
import struct

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from switchyard.api.xcachepool import HotFile
from switchyard.desired.hotfiles import HostBudget, HotFileRules, file_rates, hashed_path, hot_files
from switchyard.observe.exporter import ExporterSettings, XCacheCollector
from switchyard.planner import hashing
from switchyard.routing import file_path

RULES = HotFileRules()


def _hot(path: str, replicas: int) -> HotFile:
    return HotFile(path=path, replicas=replicas)
CAP = 10.0


def _ring(count: int) -> dict[str, float]:
    return {f"host-{i}": 1.0 for i in range(count)}


def _budgets(ring, served: float | None = 0.0, cap: float = CAP) -> dict[str, HostBudget]:
    return {host: HostBudget(cap, served) for host in ring}


def _at_homes(loads: dict[str, float], ring) -> dict[str, dict[str, float]]:
    """host -> path -> Gbps as exporters report them when every file is read from its home."""
    out: dict[str, dict[str, float]] = {}
    for path, gbps in loads.items():
        out.setdefault(hashing.home(path, ring), {})[path] = gbps
    return out


def _hot_load(listed, loads, ring) -> dict[str, float]:
    """The hot-file load each host is planned by the list: a file's load split over its first k caches."""
    placed = dict.fromkeys(ring, 0.0)
    for f in listed:
        for host in hashing.order(f.path, ring)[:f.replicas]:
            placed[host] += loads[f.path] / f.replicas
    return placed


def _zipf(files: int, exponent: float, total_gbps: float) -> dict[str, float]:
    raw = [1 / (rank ** exponent) for rank in range(1, files + 1)]
    return {f"/store/data/file{rank:03d}.root": total_gbps * r / sum(raw) for rank, r in enumerate(raw, 1)}


@pytest.mark.parametrize("exponent", [0.8, 1.1, 1.4])
def test_zipf_load_lists_the_hot_head_and_keeps_every_cache_under_its_cap(exponent):
    ring = _ring(6)
    loads = _zipf(300, exponent, total_gbps=30.0)
    listed = hot_files(_at_homes(loads, ring), _budgets(ring), ring)
    paths = [f.path for f in listed]
    assert paths == sorted(paths) and len(listed) <= RULES.max_files
    # Exactly the files at or above a quarter of their home's cap (no home is above its plan: served 0).
    assert set(paths) == {p for p, gbps in loads.items() if gbps >= RULES.enter_share * CAP}
    assert listed, "the head of a Zipf load over 6 caches is hot"
    for f in listed:
        assert 2 <= f.replicas <= len(ring)
        # each home takes at most spread_share of its cap from one file, unless every cache is a home already
        assert loads[f.path] / f.replicas <= RULES.spread_share * CAP + 1e-9 or f.replicas == len(ring)
    assert max(_hot_load(listed, loads, ring).values()) <= CAP + 1e-9


def test_the_result_is_deterministic_whatever_the_input_order():
    ring = _ring(5)
    loads = _zipf(100, 1.1, total_gbps=25.0)
    rates = _at_homes(loads, ring)
    shuffled_rates = {host: dict(reversed(list(by_path.items()))) for host, by_path in reversed(list(rates.items()))}
    first = hot_files(rates, _budgets(ring), ring)
    assert hot_files(shuffled_rates, _budgets(ring), dict(reversed(list(ring.items())))) == first
    assert hot_files(rates, _budgets(ring), ring, previous=first) == first


@pytest.mark.parametrize("gbps, replicas", [
    (2.4, None),   # below a quarter of the home's cap: not hot
    (2.6, 2),      # 1.3 per home
    (8.0, 6),      # 8/5 = 1.6 > 1.5; 8/6 = 1.33
    (20.0, 8),     # no k keeps each home's share under 1.5 (20/8 = 2.5): the most homes
    (60.0, 8),     # likewise, and 60/8 = 7.5 <= 10
])
def test_a_single_very_hot_file_gets_the_least_k_that_spreads_it(gbps, replicas):
    ring = _ring(8)
    listed = hot_files(_at_homes({"/hot": gbps}, ring), _budgets(ring), ring)
    assert listed == (() if replicas is None else (_hot("/hot", replicas),))


def test_a_file_too_hot_for_every_cap_gets_the_k_whose_busiest_home_is_least_loaded():
    ring = _ring(3)
    listed = hot_files({"host-0": {"/hot": 45.0}}, _budgets(ring), ring)
    assert listed == (_hot("/hot", 3),)  # 15 Gbps each: over the cap, the best the ring allows


def test_replicas_of_many_hot_files_respect_each_cache_cap():
    ring = _ring(4)
    loads = {f"/f{i}": 9.0 for i in range(4)}   # 36 of the ring's 40 Gbps, all hot
    listed = hot_files(_at_homes(loads, ring), _budgets(ring), ring)
    assert [f.path for f in listed] == sorted(loads)
    assert max(_hot_load(listed, loads, ring).values()) <= CAP + 1e-9


def test_a_file_enters_at_a_lower_share_while_its_home_is_overloaded():
    ring = _ring(4)
    rates = _at_homes({"/warm": 1.2}, ring)
    home = hashing.home("/warm", ring)
    calm = _budgets(ring, served=4.0)
    assert hot_files(rates, calm, ring) == ()
    overloaded = {**calm, home: HostBudget(CAP, 6.0)}
    assert hot_files(rates, overloaded, ring) == (_hot("/warm", 2),)
    # Without an observed total, the home's reported file rates stand in for it (1.2 < 5: not overloaded).
    assert hot_files(rates, _budgets(ring, served=None), ring) == ()
    # Listed, it stays when the split brings its home back under its plan: leaving needs its own load to fall.
    assert hot_files(rates, calm, ring, previous=(_hot("/warm", 2),)) == (_hot("/warm", 2),)


def test_a_home_below_its_plan_is_overloaded_when_it_serves_well_over_its_share_and_is_busy():
    """The plan's figure is the ring at full capacity: bench-hotspots' busiest cache at Zipf 1.1 served 9.2 of
    its 10 (its readers waiting on it) beside 4.0, 4.6 and 3.1, 1.8x its share, and was never above it."""
    ring = _ring(4)
    rates = _at_homes({"/warm": 1.2}, ring)
    home = hashing.home("/warm", ring)
    others = [h for h in ring if h != home]
    skewed = {home: HostBudget(CAP, 9.2), **{h: HostBudget(CAP, g) for h, g in zip(others, (4.0, 4.6, 3.1))}}
    assert hot_files(rates, skewed, ring) == (_hot("/warm", 2),)
    # Over its share but idle enough not to matter (under half its cap): nothing enters below enter_share.
    quiet = {h: HostBudget(CAP, b.served_gbps / 2.5) for h, b in skewed.items()}
    assert hot_files(rates, quiet, ring) == ()
    # Busy but at its share (every cache as busy): not overloaded.
    even = {h: HostBudget(CAP, 9.2) for h in ring}
    assert hot_files(rates, even, ring) == ()


def test_a_files_load_is_summed_over_every_host_that_serves_it():
    ring = _ring(4)
    listed = (_hot("/hot", 2),)
    first, second = hashing.order("/hot", ring)[:2]
    split = {first: {"/hot": 1.5}, second: {"/hot": 1.5}}
    assert hot_files(split, _budgets(ring), ring) == (_hot("/hot", 2),)  # 3 Gbps in all: hot
    assert hot_files(split, _budgets(ring), ring, listed) == hot_files(_at_homes({"/hot": 3.0}, ring),
                                                                      _budgets(ring), ring, listed)


def test_the_list_decays_with_the_load_over_successive_calls():
    ring = _ring(8)
    listed: tuple[HotFile, ...] = ()
    seen = []
    for gbps in (6.0, 2.2, 0.81, 0.51, 0.49, 0.6, 2.0, 2.6):   # the exporter's rate falling by e per tau, then back
        listed = hot_files(_at_homes({"/hot": gbps}, ring), _budgets(ring), ring, listed)
        seen.append(listed[0].replicas if listed else 0)
    # 6 Gbps: 4 homes (1.5 each). 2.2: k shrinks to 3 (0.73 each, at most 1.0 per home), 0.81 to 2. Below 0.5
    # (a twentieth of the cap) it leaves; back at 0.6 and 2.0 it stays out (entry needs 2.5); at 2.6 it is back
    # with 2 homes.
    assert seen == [4, 3, 2, 2, 0, 0, 0, 2]


@pytest.mark.parametrize("previous, expected", [(None, 4), (2, 4), (4, 4), (5, 5), (6, 6), (7, 6), (8, 6)])
def test_replica_counts_move_on_bands(previous, expected):
    ring = _ring(8)
    before = () if previous is None else (_hot("/hot", previous),)
    # 6 Gbps: the least k with 6/k <= 1.5 is 4, the least with 6/k <= 1.0 is 6: a previous k in 4..6 stays.
    assert hot_files(_at_homes({"/hot": 6.0}, ring), _budgets(ring), ring, before) == (_hot("/hot", expected),)


def test_noise_around_the_thresholds_does_not_flap_the_list():
    ring = _ring(6)
    rng = random.Random(7)
    listed: tuple[HotFile, ...] = ()
    changes = 0
    for _ in range(200):
        loads = {"/a": rng.uniform(2.2, 2.8), "/b": rng.uniform(0.3, 0.7), "/c": rng.uniform(4.6, 5.4)}
        if loads["/a"] < 2.5 and not listed:
            loads["/a"] = 2.6  # the first call lists /a
        new = hot_files(_at_homes(loads, ring), _budgets(ring), ring, listed)
        changes += new != listed
        listed = new
    assert changes == 1, "listed once, then only noise inside the bands"
    assert [f.path for f in listed] == ["/a", "/c"]


def test_the_list_is_bounded_and_a_newcomer_must_be_twice_as_hot_to_displace():
    ring = _ring(8)
    rules = HotFileRules(max_files=3, enter_share=0.01, overloaded_share=0.01, leave_share=0.005)
    budgets = _budgets(ring, cap=100.0)
    incumbents = {"/a": 3.0, "/b": 3.0, "/c": 3.0}
    listed = hot_files(_at_homes(incumbents, ring), budgets, ring, rules=rules)
    assert [f.path for f in listed] == ["/a", "/b", "/c"]
    assert [f.path for f in hot_files(_at_homes({**incumbents, "/d": 5.9}, ring), budgets, ring, listed, rules)] \
        == ["/a", "/b", "/c"]
    assert [f.path for f in hot_files(_at_homes({**incumbents, "/d": 6.1}, ring), budgets, ring, listed, rules)] \
        == ["/a", "/b", "/d"]   # the incumbents tie: the last by path gives way
    many = {f"/z{i:03d}": 50.0 for i in range(200)}
    assert len(hot_files(_at_homes(many, ring), budgets, ring, (), rules)) == 3
    assert len(hot_files(_at_homes(many, ring), budgets, ring)) == RULES.max_files


def test_a_ring_of_fewer_than_two_hosts_lists_nothing_and_hosts_without_a_budget_are_left_out():
    assert hot_files({"host-0": {"/hot": 9.0}}, _budgets(_ring(1)), _ring(1)) == ()
    ring = _ring(3)
    budgets = _budgets(["host-0", "host-1"])
    listed = hot_files(_at_homes({"/hot": 9.0}, {"host-0": 1.0, "host-1": 1.0}), budgets, ring)
    assert listed == (_hot("/hot", 2),)  # 4.5 each over the two budgeted hosts (the spread share cannot hold)
    assert hot_files({"host-0": {"/hot": 9.0}}, budgets, {**ring, "host-1": 0.0}) == ()


@pytest.mark.parametrize("changes", [
    {"leave_share": 0.3}, {"leave_share": 0.0}, {"shrink_share": 0.3}, {"spread_share": 1.5},
    {"max_files": -1}, {"max_files": 257}, {"max_replicas": 1}, {"max_replicas": 17}, {"incumbent_weight": 0.5},
])
def test_bad_rules_are_refused(changes):
    with pytest.raises(ValueError):
        HotFileRules(**changes)


def _exporter_text(pool: str, host: str, reads: dict[str, int]) -> str:
    collector = XCacheCollector(ExporterSettings(pool, host, "sw1", (), (), 0.9, 0.95))
    collector.clock = lambda: 100.0
    records = b""
    for file_id, (path, size) in enumerate(reads.items()):
        body = struct.pack(">qI", 0, 1) + path.encode() + b"\x00"
        records += struct.pack(">BBhI", 1, 1, 8 + len(body), file_id) + body
        records += struct.pack(">BBhIqqq", 3, 0, 32, file_id, size, 0, 0)
    collector.receive(struct.pack(">BBHI", ord("f"), 0, 8 + len(records), 1) + records, 100.0)
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_file_rates_reads_the_exporters_gauge_in_gbps():
    texts = [_exporter_text("fast", "host-0", {"/a": 7_500_000_000, "/b": 750_000_000}),
             _exporter_text("fast", "host-1", {"/a": 1_500_000_000}),
             _exporter_text("other", "host-2", {"/a": 7_500_000_000}), "not { metrics"]
    # 7.5 GB in one record under a 60 s tau: 125 MB/s, 1 Gbps.
    rates = file_rates(texts, "fast")
    assert rates == {"host-0": {"/a": pytest.approx(1.0), "/b": pytest.approx(0.1)},
                     "host-1": {"/a": pytest.approx(0.2)}}


def test_a_home_already_carrying_hot_load_gives_the_next_file_more_replicas():
    ring = _ring(4)
    rules = HotFileRules(spread_share=1.0, shrink_share=0.5)   # only the caps bind
    home = hashing.home("/p", ring)
    q = next(f"/q{i}" for i in range(100) if hashing.home(f"/q{i}", ring) == home)
    assert hot_files(_at_homes({q: 9.0}, ring), _budgets(ring), ring, rules=rules) == (_hot(q, 2),)
    # /p (12 Gbps) goes first and puts 6 on their shared home: 6 + 9/2 > 10, so the next file needs 3 homes.
    loads = {"/p": 12.0, q: 9.0}
    listed = hot_files(_at_homes(loads, ring), _budgets(ring), ring, rules=rules)
    assert listed == tuple(sorted((_hot("/p", 2), _hot(q, 3)), key=lambda f: f.path))
    assert max(_hot_load(listed, loads, ring).values()) <= CAP + 1e-9


def test_paths_status_hot_files_cannot_hold_are_left_out():
    ring = _ring(4)
    bad = ["/with space.root", "/a?query=1", "/x#fragment", "/"]
    listed = hot_files(_at_homes({**dict.fromkeys(bad, 9.0), "/ok.root": 9.0}, ring), _budgets(ring), ring)
    assert [f.path for f in listed] == ["/ok.root"]


@pytest.mark.parametrize("lfn, hashed", [
    ("/store/a.root", "/store/a.root"),
    ("//store/a.root", "/store/a.root"),
    ("/root://origin:1094//store/a.root", "/store/a.root"),   # a forwarding proxy's path: the origin's URL
    ("/xroots://origin/store/a.root", "/store/a.root"),
    ("/rootish/a.root", "/rootish/a.root"),
])
def test_paths_are_read_as_the_readers_hash_them(lfn, hashed):
    assert hashed_path(lfn) == hashed
    if "://" not in lfn:
        assert file_path(f"root://cache:1094/{lfn}") == hashed


def test_a_forwarding_proxys_paths_add_up_under_the_path_readers_hash():
    ring = _ring(4)
    rates = {"host-0": {"/root://origin:1094//store/a.root": 1.5}, "host-1": {"/store/a.root": 1.5}}
    assert hot_files(rates, _budgets(ring), ring) == (_hot("/store/a.root", 2),)
