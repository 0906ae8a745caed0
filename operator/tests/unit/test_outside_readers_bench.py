"""The outside-readers fabric bench's pure parts (bench/outside_readers_bench.py, issue #31's acceptance): the
case planned with and without switchyard's workers, the pool's clients ConfigMap rendered with the fabric's
addresses (the racks placed, the ring the exporters serve), the racks' streams from what `switchyard route`
printed, the fair share on a layout with namespaces no Kubernetes node is, and the summary's ratios."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import outside_readers_bench as bench  # noqa: E402
from fabric_fairshare import of_layout  # noqa: E402
from fabric_scenario import layout  # noqa: E402
from switchyard.observe import clientmap  # noqa: E402
from switchyard.observe.clientmap import ClientMap  # noqa: E402
from switchyard.routing import Router  # noqa: E402

FILES = [f"/f{i:04d}.root" for i in range(64)]
SCALE = 1.5


def case_layout(workers: bool):
    case = bench.load_case(REPO / "bench" / "topologies", bench.CASE, workers)
    plan = bench.render(case, {}, {g.name: "10.40.0.1" for g in case.topology.outside})[0].plan
    the = layout(case.topology, case.pools, case.fleets, plan.placement, dict(plan.hash_weights), SCALE, FILES)
    the.hosts.extend(bench.outside_rows(case.topology, SCALE))
    return case, plan, the


@pytest.mark.parametrize("workers", [False, True])
def test_the_case_loads_the_racks_and_the_workers_take_a_share(workers):
    case, plan, the = case_layout(workers)
    assert {g.switch for g in case.topology.outside} == {"condor-2x40", "condor-6x40"}
    assert plan.routing["condor-2x40"] == plan.routing["condor-6x40"] == "hashed"
    assert plan.fair.outside == pytest.approx({"condor-2x40": 39.12 if workers else 45.0,
                                               "condor-6x40": 39.12 if workers else 45.0}, abs=0.01)
    assert bool(the.workers) == workers
    # a namespace per group on its rack, its link the rack's uplink (no NIC of theirs is known)
    assert the.hosts[-2:] == [("condor-a", "condor-2x40", 80 * SCALE, 80 * SCALE),
                              ("condor-b", "condor-6x40", 240 * SCALE, 240 * SCALE)]


def test_more_readers_per_group_split_the_same_gbps():
    case = bench.load_case(REPO / "bench" / "topologies", bench.CASE, workers=True, readers=48)
    assert [(g.count, g.read_gbps) for g in case.topology.outside] == [(48, 1.5), (48, 1.5)]   # 12 at 6 in the case


def test_the_pool_publishes_the_ring_at_the_fabric_addresses_and_places_the_racks():
    case, plan, the = case_layout(True)
    addresses = {node: f"10.77.1.{i + 1}" for i, (node, *_rest) in enumerate(the.hosts)}
    out, clients = bench.render(case, addresses, {"condor-a": addresses["condor-a"], "condor-b": addresses["condor-b"]})
    assert out.plan.placement == plan.placement
    data = clients["xcache"]
    placed = ClientMap.from_json(data[clientmap.KEY])
    assert placed.switch_of(addresses["condor-a"]) == "condor-2x40"
    assert placed.switch_of(addresses["condor-b"]) == "condor-6x40"
    assert placed.switch_of(addresses["k8s-1-worker"]) == "k8s-1"
    # what a reader routed by the published ring reads from: the planner's ring home of each file
    router = Router.from_env({"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_CACHE_RING": ",".join(
        line for line in data["ring"].splitlines() if not line.startswith("#"))})
    by_address = {addresses[c]: c for c in the.caches}
    homes = bench.expected_homes(the, case.topology, case.pools, plan.placement, dict(plan.hash_weights), FILES)
    assert {f: bench.cache_of(router.route(bench.ORIGIN_URL + f), by_address) for f in FILES} == homes


def test_each_outside_reader_is_a_paced_stream_over_every_file_from_its_routed_cache():
    case, _plan, the = case_layout(False)
    by_address = {"10.77.1.1": "k8s-1-xcache", "10.77.1.2": "k8s-2-xcache"}
    routed = {g.name: {f: by_address[f"10.77.1.{1 + i % 2}"] for i, f in enumerate(FILES)}
              for g in case.topology.outside}
    streams = bench.outside_streams(case.topology, routed, FILES, SCALE)
    assert len(streams) == 24 and {s.node for s in streams} == {"condor-a", "condor-b"}
    # each reader a process of its own (a batch job with its own connections), not the rack's one process
    assert len({(s.node, s.process) for s in streams}) == 24 and all(s.process for s in streams)
    for s in streams:
        assert s.ring and s.demand_gbps == 6 and s.wire_mbit == 6 * SCALE
        assert sorted(f for _, f in s.urls) == FILES
        assert all(cache == by_address[f"10.77.1.{1 + FILES.index(f) % 2}"] for cache, f in s.urls)
    assert streams[0].urls != streams[1].urls      # each reader's own order
    for s in streams:                              # ... in which every stretch is split as the routing splits
        assert all(abs(sum(c == "k8s-1-xcache" for c, _ in s.urls[:k]) - k / 2) <= 1 for k in range(1, len(FILES)))
    # the bench's fair share places the racks' namespaces by the layout's rows, not the topology's hosts
    the.streams.extend(streams)
    share = of_layout(case.topology, the, SCALE)
    assert share.uplinks["condor-2x40"]["in"] == pytest.approx(45.0, abs=0.01)
    assert share.uplinks["condor-6x40"]["in"] == pytest.approx(45.0, abs=0.01)


def test_a_reader_reading_several_files_at_once_splits_its_gbps_and_keeps_one_process():
    case, _plan, the = case_layout(False)
    routed = {g.name: {f: ("k8s-1-xcache", "k8s-2-xcache")[i % 2] for i, f in enumerate(FILES)}
              for g in case.topology.outside}
    one = bench.outside_streams(case.topology, routed, FILES, SCALE)
    four = bench.outside_streams(case.topology, routed, FILES, SCALE, per_reader=4)
    assert len(four) == 96 and len({(s.node, s.process) for s in four}) == 24       # 24 batch jobs, 4 files each
    assert all(s.demand_gbps == 1.5 and s.wire_mbit == 1.5 * SCALE for s in four)
    job = [s.urls for s in four if (s.node, s.process) == ("condor-a", "job0")]
    assert len(job) == 4 and len({tuple(u) for u in job}) == 4                       # each stream its own order
    assert job[0] == next(s.urls for s in one if (s.node, s.process) == ("condor-a", "job0"))
    # the fair share is the same: the reader's Gbps over the same files
    with_one, with_four = (of_layout(case.topology, dataclasses.replace(the, streams=[*the.streams, *streams]), SCALE)
                           for streams in (one, four))
    assert with_four.delivered_gbps == pytest.approx(with_one.delivered_gbps, rel=1e-6)
    for switch, by_direction in with_one.uplinks.items():
        assert with_four.uplinks[switch] == pytest.approx(by_direction, abs=1e-6)


def test_the_closed_network_counts_each_stream_a_reader_of_its_share():
    """The readers alone: 24 sequential readers of 6 Gbps on two 45 Gbps caches bunch (0.938 of the fluid share,
    the convolution's exact figure); as 96 streams of 1.5 Gbps, 0.980."""
    case, plan, _the = case_layout(False)
    fair = plan.fair.delivered_gbps
    closed = {k: bench.closed_gbps(argparse.Namespace(topologies=str(REPO / "bench" / "topologies"), case=bench.CASE,
                                                      readers=0, reader_streams=k), plan) / fair for k in (1, 4)}
    assert closed == {1: pytest.approx(0.938, abs=5e-4), 4: pytest.approx(0.980, abs=5e-4)}
    assert len(case.topology.outside) == 2 and {g.count for g in case.topology.outside} == {12}   # the case's own


def test_the_summary_divides_the_measured_uplinks_by_the_plans_fair_share_over_valid_windows():
    window = {"cpu_busy": 0.5, "delivered_gbps": 85.5,
              "uplinks": {"a": {"out": 0.0, "in": 42.0}, "k": {"out": 44.0, "in": 0.1}}}
    r = {"predicted_uplinks": {"a": {"out": 0, "in": 40, "capacity": 80}, "k": {"out": 45, "in": 0, "capacity": 200}},
         "fair_uplinks": {"a": {"out": 0.0, "in": 40.0}, "k": {"out": 45.0, "in": 0.0}},
         "fair_layout_uplinks": {"a": {"out": 0.0, "in": 41.0}, "k": {"out": 44.0, "in": 0.0}},
         "fair_gbps": 90.0, "windows": [window, {**window, "cpu_busy": 0.9, "delivered_gbps": 10.0}]}
    s = bench.summarise(r)
    assert not s["valid"] and s["valid_windows"] == 1 and s["delivered"] == 85.5      # the busy window left out
    assert s["ratio_delivered"] == pytest.approx(0.95)
    assert set(s["uplinks"]) == {"a in", "k out"}                                         # loaded directions only
    assert s["uplinks"]["a in"]["ratio"] == pytest.approx(1.05) and bench.within(s["uplinks"]["a in"]["ratio"])
    assert s["uplinks"]["k out"]["ratio"] == pytest.approx(0.978, abs=1e-3)
