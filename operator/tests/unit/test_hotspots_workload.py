"""The hot-spot bench's pure parts (bench/hotspots_workload.py, issue 30 item 4): the Zipf draw, the readers'
routing by the product's client rule with and without a hot list, the hot list the operator's rule decides
from exporter texts at the fabric's scale, and the run's summary figures."""

from __future__ import annotations

import math
import pathlib
import sys
from collections import Counter

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench"))

from hotspots_workload import (  # noqa: E402
    bench_load_rules, completion, decide_hot, draw_reads, figures, load_fed_rounds, popularity, route, steady_rates,
    warm_pairs,
)
from switchyard.api.xcachepool import XCachePoolBody  # noqa: E402
from switchyard.planner import hashing  # noqa: E402
from switchyard.topology import Host  # noqa: E402

FILES = [f"/f{i:04d}.root" for i in range(64)]
RING = {"c0": 1.0, "c1": 1.0, "c2": 1.0, "c3": 1.0}
ADDRESSES = {c: f"10.77.1.{i + 1}:1094" for i, c in enumerate(RING)}


def test_zipf_shares_sum_to_one_and_fall_as_rank_to_the_exponent():
    shares = popularity(FILES, 1.1, seed=0)
    assert sum(shares.values()) == pytest.approx(1)
    ranked = sorted(shares.values(), reverse=True)
    assert ranked[0] / ranked[1] == pytest.approx(2 ** 1.1)
    assert ranked[0] / ranked[9] == pytest.approx(10 ** 1.1)
    # a steeper exponent puts more on the hottest file
    assert max(popularity(FILES, 1.4, 0).values()) > ranked[0] > max(popularity(FILES, 0.8, 0).values())


def test_uniform_popularity_and_the_seed_moves_which_file_is_hottest():
    assert list(popularity(FILES, None, 0).values()) == [pytest.approx(1 / 64)] * 64
    hottest = {max(popularity(FILES, 1.1, seed).items(), key=lambda kv: kv[1])[0] for seed in range(5)}
    assert len(hottest) > 1
    assert popularity(FILES, 1.1, 3) == popularity(FILES, 1.1, 3)


def test_a_draw_is_a_fixed_workload_following_the_shares():
    shares = popularity(FILES, 1.1, 0)
    reads = draw_reads(shares, 20000, "r")
    assert len(reads) == 20000 and reads == draw_reads(shares, 20000, "r")
    hottest = max(shares, key=shares.get)
    assert Counter(reads)[hottest] / 20000 == pytest.approx(shares[hottest], abs=0.01)


def test_without_a_hot_list_every_reader_reads_a_file_from_its_home():
    for reader in ("vine-a-0", "vine-b-3"):
        routed = route(FILES[:8], RING, ADDRESSES, reader, None, "10.77.250.1:1094")
        assert routed == [(hashing.home(p, RING), p) for p in FILES[:8]]


def test_a_hot_file_spreads_its_readers_over_its_first_k_caches_and_others_stay_home():
    hot, other = FILES[0], FILES[1]
    text = "# hot files\n3 " + hot + "\n"
    picks = Counter()
    for i in range(64):
        (cache, _), (other_cache, _) = route([hot, other], RING, ADDRESSES, f"vine-n-{i}", text, "o:1094")
        picks[cache] += 1
        assert other_cache == hashing.home(other, RING)
    assert set(picks) == set(hashing.order(hot, RING)[:3])
    assert min(picks.values()) >= 10


def test_warm_pairs_are_the_files_each_cache_serves():
    assert warm_pairs([[("c0", "/a"), ("c1", "/b")], [("c0", "/a"), ("c0", "/c")]]) == {"c0": {"/a", "/c"},
                                                                                            "c1": {"/b"}}


def test_steady_rates_undo_the_exporters_decay_of_a_load_that_has_just_started():
    # observe/fileload: after t seconds of a steady load r the rate reads r (1 - e^(-t/tau))
    assert steady_rates({"c0": {"/a": 1 - math.exp(-1)}}, 60, tau=60)["c0"]["/a"] == pytest.approx(1)


def _exporter_text(host: str, rates: dict[str, float]) -> str:
    rows = [f'switchyard_xcache_hot_file_read_bytes_per_second{{host="{host}",path="{p}",pool="xcache",switch="s"}} {r}'
            for p, r in rates.items()]
    return "# TYPE switchyard_xcache_hot_file_read_bytes_per_second gauge\n" + "\n".join(rows) + "\n"


def test_the_hot_list_is_the_operators_rule_at_the_fabrics_scale():
    """At 4 Mbit/s per model Gbps, 4.5 MB/s (36 Mbit/s real) is 9 model Gbps: above a quarter of a 10 Gbps cap,
    and k = 4 keeps each replica at most a quarter of its cap; 0.1 MB/s (0.2 model Gbps) stays off the list."""
    body = XCachePoolBody.model_validate({"serveGbps": 10, "origin": {"host": "o", "port": 1094}})
    hosts = [Host(c, "s", 25.0, 1000, 1 << 30, 10) for c in RING]
    home = hashing.home("/hot.root", RING)
    texts = [_exporter_text(home, {"/hot.root": 4.5e6, "/cold.root": 1e5})]
    listed, text = decide_hot(texts, "xcache", body, RING, hosts, scale=4, seconds=1e9)
    assert listed == [{"path": "/hot.root", "replicas": 4}]
    assert text.splitlines()[1:] == ["4 /hot.root"]
    assert decide_hot([_exporter_text(home, {"/cold.root": 1e5})], "xcache", body, RING, hosts, 4, 1e9) == ([], None)


def test_completion_and_figures():
    assert completion([10, 12, 30]) == (30, 12, 2.5)
    fig = figures(reader_bytes=60e6, cache_bytes={"c0": 40e6, "c1": 20e6}, origin_bytes=11e6, unique_bytes=10e6,
                  seconds=[10, 20, 30], scale=4)
    # 60 MB in 30 s = 16 Mbit/s = 4 model Gbps at 4 Mbit/s per Gbps
    assert fig.delivered_gbps == pytest.approx(4)
    assert fig.served_gbps == {"c0": pytest.approx(2.667, abs=1e-3), "c1": pytest.approx(1.333, abs=1e-3)}
    assert fig.slowest_over_median == 1.5 and fig.origin_over_unique == 1.1


def test_the_workloads_own_rates_are_what_the_readers_asked_of_each_cache():
    from hotspots_workload import workload_rates
    # two 1 MB reads of /a from c0 and one of /b from c1 over 8 s at 1 Mbit/s per Gbps: 2 and 1 model Gbps
    rates = workload_rates([[("c0", "/a"), ("c1", "/b")], [("c0", "/a")]], 1_000_000, 8, 1)
    assert rates == {"c0": {"/a": pytest.approx(2)}, "c1": {"/b": pytest.approx(1)}}


def _fabric_of(files: dict, weights_read_by):
    """measure(weights) for load_fed_rounds: each file's Gbps served by its rendezvous home under the weights
    the readers read by, as cumulative sent bytes every 5 s for 40 s."""
    def measure(weights):
        served = {c: 0.0 for c in weights}
        for path, gbps in files.items():
            served[hashing.home(path, weights_read_by(weights))] += gbps
        return [(5.0 * k + 0.3, {c: g / 8e-9 * 5.0 * k for c, g in served.items()}) for k in range(1, 9)], served
    return measure


def test_load_fed_weights_step_against_load_measured_again_and_stop_once_the_load_has_moved():
    """The hot file (4 Gbps of 20) leaves c0 for c3 at c0's second step: measured again after each step, the
    rule stops at 0.8; fed one fixed run's bytes again and again (the load never sheds), it walks c0 to the
    floor."""
    ring, caps = {c: 1.0 for c in RING}, {c: 11.0 for c in RING}
    files = {f"/f{i:03d}": 16 / 200 for i in range(200)} | {"/hot58": 4.0}
    assert [hashing.home("/hot58", {**ring, "c0": f}) for f in (1.0, 0.9, 0.8)] == ["c0", "c0", "c3"]
    rules = bench_load_rules(5.0)
    rounds, settled = load_fed_rounds(ring, caps, _fabric_of(files, lambda w: w), rules, max_rounds=8)
    assert settled and [r.factors for r in rounds] == [{"c0": 0.9}, {"c0": 0.8}, {"c0": 0.8}]
    assert [r.weights["c0"] for r in rounds] == [1.0, 0.9, 0.8]  # each round reads by the last one's factors
    assert rounds[-1].run["c0"] < rounds[-1].run["c3"]
    replayed, _ = load_fed_rounds(ring, caps, _fabric_of(files, lambda w: ring), rules, max_rounds=8)
    assert replayed[-1].factors == {"c0": rules.floor}
    bounded, settled = load_fed_rounds(ring, caps, _fabric_of(files, lambda w: w), rules, max_rounds=2)
    assert not settled and bounded[-1].factors == {"c0": 0.8}
