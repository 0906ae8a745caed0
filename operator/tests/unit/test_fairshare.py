"""The fair-share prediction beside the LP optimum (issue 14, part 3): each case a contradiction the
emulated fabric measured (bench/notes/fabric-notes.md), first seen failing against the plan's figures."""

from __future__ import annotations

import dataclasses

import pytest

from switchyard.api.analysisfacility import PlanSummary
from switchyard.desired.facility import summary
from switchyard.planner import fairshare, hashing, plan
from switchyard.planner.flow import evaluate
from switchyard.planner.model import Placement

from test_planner_cases import fleet, nodes, pool, switch, topology


def netbound():
    """fabric-netbound's shape: rack-c's one cache behind a 20 Gbps uplink, readers on rack-x and rack-y."""
    return topology([
        switch("rack-c", 20, nodes("cache", cpu=5, memory=64, nic=100, nvme=2)),
        switch("rack-x", 100, nodes("w", count=10, cpu=4, memory=16, nic=25)),
        switch("rack-y", 100, nodes("w", count=8, cpu=4, memory=16, nic=25)),
    ])


def netbound_placement(x: int = 10, y: int = 8) -> Placement:
    return Placement(caches={"xc": {"rack-c": ("rack-c-cache",)}}, workers={"f": {"rack-x": x, "rack-y": y}},
                     hashed={"f": {"rack-x": x, "rack-y": y}})


def test_flows_sharing_a_saturated_source_uplink_split_it_per_flow():
    """fabric-netbound (b): the LP gave rack-c's full 20 Gbps to one switch's readers (rack-x in 20.0,
    rack-y in 0.0, one arbitrary optimum); measured 12.5 and 6.6. TCP shares per flow: 18 readers get
    20/18 each, so rack-x carries 10 x 20/18 and rack-y 8 x 20/18."""
    topo, pools, fleets = netbound(), [pool(serve=45)], [fleet(replicas=18, cores=4, memory=8, read=2)]
    placement = netbound_placement()
    lp = evaluate(topo, pools, fleets, placement)
    assert lp.delivered_gbps == pytest.approx(20)
    fair = fairshare.predict(topo, pools, fleets, placement)
    assert fair.delivered_gbps == pytest.approx(20, abs=1e-3)
    assert fair.uplinks["rack-x"]["in"] == pytest.approx(200 / 18, abs=1e-3)
    assert fair.uplinks["rack-y"]["in"] == pytest.approx(160 / 18, abs=1e-3)
    assert fair.uplinks["rack-c"]["out"] == pytest.approx(20, abs=1e-3)
    assert fair.saturated == ("up_out:rack-c",)
    assert fair.switch_served == {"rack-c": pytest.approx(20, abs=1e-3)}


def test_flows_below_their_demand_are_not_held_back_by_a_link_they_do_not_use():
    """Progressive filling: readers whose own uplink fills freeze there; the rest keep growing."""
    topo = topology([
        switch("c", 400, nodes("cache", count=2, cpu=16, memory=64, nic=100, nvme=2)),
        switch("x", 10, nodes("w", count=10, cpu=4, memory=16, nic=25)),
        switch("y", 400, nodes("w", count=10, cpu=4, memory=16, nic=25)),
    ])
    pools, fleets = [pool(serve=90, maxHostsPerSwitch=2)], [fleet(replicas=20, cores=4, memory=8, read=4)]
    placement = Placement(caches={"xc": {"c": ("c-cache-0", "c-cache-1")}}, workers={"f": {"x": 10, "y": 10}},
                          hashed={"f": {"x": 10, "y": 10}})
    fair = fairshare.predict(topo, pools, fleets, placement)
    assert fair.uplinks["x"]["in"] == pytest.approx(10, abs=1e-3)       # 1 Gbps each, x's uplink full
    assert fair.uplinks["y"]["in"] == pytest.approx(40, abs=1e-3)       # 4 Gbps each, their demand
    assert fair.delivered_gbps == pytest.approx(50, abs=1e-3)
    assert fair.demand_gbps == pytest.approx(80)


def test_a_file_is_served_by_one_host_whose_nic_its_readers_share():
    """Pooled per switch, two cache hosts of 10 and 40 Gbps serve 50 and 40 local readers of 1 Gbps get
    40. The switch's Service sends each connection to either host alike, so every reader takes half its
    bytes from the 10 Gbps host: it fills at 20 readers' worth, and every reader is held to 0.5 Gbps."""
    topo = topology([switch("s0", 100, nodes("small", cpu=16, memory=64, nic=10, nvme=2),
                            nodes("big", cpu=16, memory=64, nic=40, nvme=2),
                            nodes("w", count=10, cpu=16, memory=64, nic=25))])
    pools, fleets = [pool(serve=45, maxHostsPerSwitch=2)], [fleet(replicas=40, cores=4, memory=8, read=1)]
    placement = Placement(caches={"xc": {"s0": ("s0-big", "s0-small")}}, workers={"f": {"s0": 40}})
    assert evaluate(topo, pools, fleets, placement).delivered_gbps == pytest.approx(40)   # pooled: 10 + 40 >= 40
    fair = fairshare.predict(topo, pools, fleets, placement)
    assert fair.served == {"s0-big": pytest.approx(10, abs=1e-3), "s0-small": pytest.approx(10, abs=1e-3)}
    assert fair.delivered_gbps == pytest.approx(20, abs=1e-3)
    assert fair.saturated == ("serve:xc:s0-small",)


def test_local_and_cross_switch_readers_share_a_cache_hosts_nic():
    """One 20 Gbps host on s0 serves its 10 local readers and 10 ring readers on s1 (2 Gbps each): all
    20 flows share its NIC alike, 1 Gbps each; the s0 -> s1 uplink carries s1's half."""
    topo = topology([switch("s0", 100, nodes("cache", cpu=16, memory=64, nic=20, nvme=2),
                            nodes("w", count=10, cpu=16, memory=64, nic=25)),
                     switch("s1", 100, nodes("w", count=10, cpu=16, memory=64, nic=25))])
    pools, fleets = [pool(serve=45)], [fleet(replicas=20, cores=4, memory=8, read=2)]
    placement = Placement(caches={"xc": {"s0": ("s0-cache",)}}, workers={"f": {"s0": 10, "s1": 10}})
    fair = fairshare.predict(topo, pools, fleets, placement)
    assert fair.delivered_gbps == pytest.approx(20, abs=1e-3)
    assert fair.uplinks["s0"] == {"in": 0.0, "out": pytest.approx(10, abs=1e-3)}
    assert fair.uplinks["s1"] == {"in": pytest.approx(10, abs=1e-3), "out": 0.0}


def tandem(serve: float, nic: float = 20, **body):
    """s0's one cache host serves 10 local readers and 10 ring readers behind s1's 4 Gbps uplink (1 Gbps
    each): s1's readers fill their uplink at 0.4 each; s0's grow until the host is full, if it fills."""
    topo = topology([switch("s0", 100, nodes("cache", cpu=16, memory=64, nic=nic, nvme=2),
                            nodes("w", count=10, cpu=16, memory=64, nic=25)),
                     switch("s1", 4, nodes("w", count=10, cpu=16, memory=64, nic=25))])
    pools, fleets = [pool(serve=serve, **body)], [fleet(replicas=20, cores=4, memory=8, read=1)]
    placement = Placement(caches={"xc": {"s0": ("s0-cache",)}}, workers={"f": {"s0": 10, "s1": 10}})
    return fairshare.predict(topo, pools, fleets, placement)


def test_a_full_uplink_whose_flows_also_come_from_a_full_cache_host_is_named():
    """The emulated fabric's short uplinks (fabric.md: rack-5 in -14.4%, tor-2x40 in -7.6%, -13.1% the run
    before) were the two whose readers also read from hosts at their cap; with every host at half its cap
    bound uplinks carried all of their fair share (bench/notes/fabric.hostfree.md). The fair share names such pairs; it
    cannot say how much TCP takes from them."""
    fair = tandem(serve=10)
    assert fair.uplinks["s1"]["in"] == pytest.approx(4, abs=1e-3)
    assert fair.served == {"s0-cache": pytest.approx(10, abs=1e-3)}
    assert fair.full_hosts_behind == {"up_in:s1": ("s0-cache",)}
    # planned at half of serveGbps 40, but its 10 GbE NIC binds first: full in the network too
    assert tandem(serve=40, nic=10, serveHeadroom=0.5).full_hosts_behind == {"up_in:s1": ("s0-cache",)}


def test_a_full_uplink_behind_hosts_with_room_is_not_named():
    assert tandem(serve=45).full_hosts_behind == {}       # the host serves 14 of its 20: not full
    # planned at 10 of the 20 it can serve (serveHeadroom): full in the prediction, not in the network
    planned_half = tandem(serve=20, serveHeadroom=0.5)
    assert planned_half.served == {"s0-cache": pytest.approx(10, abs=1e-3)}
    assert planned_half.full_hosts_behind == {}


def test_a_full_cache_hosts_fills_through_a_full_uplink_are_not_its_reads():
    """A host's misses come in through its own switch's uplink: with that uplink and the host full, nothing
    its readers read crosses the uplink, so nothing is named."""
    topo = topology([switch("s0", 2, nodes("cache", cpu=16, memory=64, nic=10, nvme=2),
                            nodes("w", count=10, cpu=16, memory=64, nic=25))])
    fair = fairshare.predict(topo, [pool(serve=10, miss=0.2)], [fleet(replicas=10, cores=4, memory=8, read=4)],
                             Placement(caches={"xc": {"s0": ("s0-cache",)}}, workers={"f": {"s0": 10}}))
    assert {"up_in:s0", "serve:xc:s0-cache"} <= set(fair.saturated)     # 10 served, 2 of them filled
    assert fair.full_hosts_behind == {}


def test_the_benchs_node_level_share_names_them_too():
    """fair_share(), the bench's per-node share: reader streams on node r1 (switch b) behind b's 4 Gbps uplink,
    and on node c0 itself (loopback), both reading cache c0 (10 Gbps)."""
    share = fairshare.fair_share({"c0": "a", "r0": "a", "r1": "b"}, {"a": 100, "b": 4},
                                 {"c0": (10, 100), "r0": (25, 25), "r1": (25, 25)},
                                 [("r1", 10, {"c0": 1.0}), ("r0", 10, {"c0": 1.0})])
    assert share.uplinks["b"]["in"] == pytest.approx(4, abs=1e-3)
    assert share.served == {"c0": pytest.approx(10, abs=1e-3)}
    assert share.full_hosts_behind == {"up_in:b": ("c0",)}


def test_the_ring_splits_bytes_by_the_published_weights_not_by_capacity():
    """Two equal 20 Gbps hosts with published weights 0.8 / 0.2: the hot host fills at 25 Gbps of
    reads, not at 40 as a capacity-proportional split would have it."""
    topo = topology([switch("s0", 100, nodes("cache", count=2, cpu=16, memory=64, nic=20, nvme=2)),
                     switch("s1", 100, nodes("w", count=10, cpu=16, memory=64, nic=25))])
    pools, fleets = [pool(serve=45, maxHostsPerSwitch=2)], [fleet(replicas=10, cores=4, memory=8, read=4)]
    placement = Placement(caches={"xc": {"s0": ("s0-cache-0", "s0-cache-1")}}, workers={"f": {"s1": 10}})
    weights = {"xc": {"s0-cache-0": 0.8, "s0-cache-1": 0.2}}
    fair = fairshare.predict(topo, pools, fleets, placement, weights)
    assert fair.delivered_gbps == pytest.approx(25, abs=1e-3)
    assert fair.served == {"s0-cache-0": pytest.approx(20, abs=1e-3), "s0-cache-1": pytest.approx(5, abs=1e-3)}
    assert fair.ring_split == {"xc": {"s0-cache-0": 0.8, "s0-cache-1": 0.2}}
    assert fairshare.predict(topo, pools, fleets, placement).delivered_gbps == pytest.approx(40, abs=1e-3)


def test_with_a_file_list_the_ring_split_is_that_of_the_files_hashed():
    """The weights are what hashing spreads bytes by on average; a known file list has its own split
    (the fabric's 1,024 files: up to 0.032 off a weight of 0.125), and the prediction can use it."""
    ring = {f"c{i}": 1.0 for i in range(4)}
    files = [f"/f{i:04d}.root" for i in range(64)]
    split = hashing.split(files, ring)
    homes = [hashing.home(f, ring) for f in files]
    assert split == {c: homes.count(c) / 64 for c in sorted(ring)}
    assert sum(split.values()) == pytest.approx(1)
    assert split != {c: 0.25 for c in ring}
    assert hashing.split([], ring) == {c: 0.25 for c in sorted(ring)}
    assert hashing.split(files, {}) == {}


def test_cache_fills_load_the_cache_switchs_uplink_in_and_the_wan():
    """missRatio 0.5: half of what a host serves comes in over its switch's uplink and the WAN (10 Gbps),
    which caps the readers at 20."""
    topo = topology([switch("s0", 100, nodes("cache", cpu=16, memory=64, nic=100, nvme=2),
                            nodes("w", count=10, cpu=16, memory=64, nic=25))], wan=10)
    pools, fleets = [pool(serve=90, miss=0.5)], [fleet(replicas=10, cores=4, memory=8, read=4)]
    placement = Placement(caches={"xc": {"s0": ("s0-cache",)}}, workers={"f": {"s0": 10}})
    fair = fairshare.predict(topo, pools, fleets, placement)
    assert fair.delivered_gbps == pytest.approx(20, abs=1e-3)
    assert fair.uplinks["s0"]["in"] == pytest.approx(10, abs=1e-3)
    assert fair.saturated == ("wan",)


def test_readers_without_a_cache_read_nothing_but_count_in_the_demand():
    topo = netbound()
    fair = fairshare.predict(topo, [pool(serve=45)], [fleet(replicas=4, read=2)],
                             Placement(caches={}, workers={"f": {"rack-x": 4}}))
    assert fair.delivered_gbps == 0 and fair.demand_gbps == pytest.approx(8)


def test_the_plan_publishes_the_fair_share_beside_the_lp_optimum():
    """status.plan: predictedGbps and per-switch in/outGbps stay the LP's; fairShareGbps, serveGbps and
    fairIn/OutGbps are the fair share's, what a live check compares observed bytes with."""
    topo, pools, fleets = netbound(), [pool(serve=45)], [fleet(replicas=18, cores=4, memory=8, read=2)]
    result = fairshare.with_fair_share(topo, pools, fleets, plan(topo, pools, fleets))
    written = summary(result)
    assert PlanSummary.model_validate(written).fair_share_gbps == pytest.approx(20, abs=1e-3)
    assert written["predictedGbps"] == pytest.approx(20, abs=1e-3)
    assert written["fairShareGbps"] == pytest.approx(20, abs=1e-3)
    rows = {s["name"]: s for s in written["switches"]}
    assert rows["rack-c"]["serveGbps"] == pytest.approx(20, abs=1e-3)
    assert rows["rack-c"]["fairOutGbps"] == pytest.approx(20, abs=1e-3)
    workers = {s: rows[s]["workers"] for s in ("rack-x", "rack-y")}
    for s, n in workers.items():
        assert rows[s]["fairInGbps"] == pytest.approx(20 * n / 18, abs=1e-3)
        assert rows[s]["serveGbps"] == 0


@pytest.mark.parametrize("routing", ["auto", "local", "hashed"])
def test_the_fair_share_never_exceeds_the_lp_optimum(routing):
    """Every fair-share allocation is one the LP could pick (same links, per host is tighter than pooled)."""
    topo = topology([
        switch("s0", 30, nodes("cache", count=2, cpu=16, memory=64, nic=25, nvme=2), nodes("w", count=6, cpu=16, memory=64)),
        switch("s1", 20, nodes("cache", cpu=16, memory=64, nic=40, nvme=2), nodes("w", count=6, cpu=16, memory=64)),
        switch("s2", 10, nodes("w", count=8, cpu=16, memory=64)),
    ], wan=50)
    pools = [pool(serve=30, miss=0.1, maxHostsPerSwitch=2)]
    fleets = [fleet(replicas=40, cores=4, memory=8, read=3), fleet("g", replicas=12, cores=8, memory=8, read=5)]
    result = fairshare.with_fair_share(topo, pools, fleets, plan(topo, pools, fleets, routing=routing))
    assert 0 < result.fair.delivered_gbps <= result.predicted_gbps + 1e-3
    assert result.fair.demand_gbps == pytest.approx(result.demand_gbps)
    for u in result.uplinks:
        assert result.fair.uplinks[u.switch]["in"] <= u.capacity_gbps + 1e-6
        assert result.fair.uplinks[u.switch]["out"] <= u.capacity_gbps + 1e-6


def test_progressive_filling_counts_identical_flows_once_each():
    """One stream of 3 flows and one of 1 on a 8 Gbps link: 2 each; a 1 Gbps demand frees room for the rest."""
    out = fairshare.progressive_filling({"l": 8.0}, [fairshare.Stream(10, {"l": 1.0}, 3), fairshare.Stream(10, {"l": 1.0})])
    assert out.rates == (pytest.approx(2), pytest.approx(2))
    out = fairshare.progressive_filling({"l": 8.0}, [fairshare.Stream(10, {"l": 1.0}, 3), fairshare.Stream(1, {"l": 1.0})])
    assert out.rates == (pytest.approx(7 / 3), pytest.approx(1))
    assert out.loads == {"l": pytest.approx(8)} and out.saturated == ("l",)


def test_the_benchs_reference_is_the_products():
    """bench/fabric_fairshare.py's layout function calls this fair_share: one streams per node, readers on
    a cache host read it over loopback, each node's link in caps its readers."""
    share = fairshare.fair_share(
        {"c0": "a", "c1": "b", "w": "b"}, {"a": 10.0, "b": 100.0},
        {"c0": (25.0, 25.0), "c1": (25.0, 25.0), "w": (8.0, 8.0)},
        [("w", 20.0, {"c0": 0.5, "c1": 0.5}), ("c1", 30.0, {"c0": 0.5, "c1": 0.5})])
    # w is held by its own link in (8); c1 reads half over loopback, its c0 half crosses a's uplink (10 - 4)
    assert share.delivered_gbps == pytest.approx(8 + 12, abs=1e-3)
    assert share.uplinks["a"] == {"out": pytest.approx(10, abs=1e-3), "in": 0.0}
    assert share.served == {"c0": pytest.approx(10, abs=1e-3), "c1": pytest.approx(10, abs=1e-3)}
    assert share.saturated == ("node_in:w", "up_out:a")


def test_the_plan_counts_the_full_hosts_behind_a_full_uplink():
    """status.plan.switches[].fullHostsBehindIn/Out: written only where the fair share names such a pair."""
    topo, pools, fleets = netbound(), [pool(serve=45)], [fleet(replicas=18, cores=4, memory=8, read=2)]
    result = fairshare.with_fair_share(topo, pools, fleets, plan(topo, pools, fleets))
    assert result.fair.full_hosts_behind == {}
    named = dataclasses.replace(result, fair=dataclasses.replace(
        result.fair, full_hosts_behind={"up_in:rack-x": ("rack-c-cache",), "up_out:rack-c": ("rack-c-cache",)}))
    rows = {s.name: s for s in PlanSummary.model_validate(summary(named)).switches}
    assert (rows["rack-x"].full_hosts_behind_in, rows["rack-x"].full_hosts_behind_out) == (1, 0)
    assert (rows["rack-c"].full_hosts_behind_in, rows["rack-c"].full_hosts_behind_out) == (0, 1)
    assert all("fullHostsBehindIn" not in s and "fullHostsBehindOut" not in s for s in summary(result)["switches"])


def test_the_plan_marks_an_uplink_the_fair_share_fills_both_ways():
    """status.plan.switches[].fullBothWays: written only for a switch whose uplink is full in and out."""
    topo, pools, fleets = netbound(), [pool(serve=45)], [fleet(replicas=18, cores=4, memory=8, read=2)]
    result = fairshare.with_fair_share(topo, pools, fleets, plan(topo, pools, fleets))
    assert all("fullBothWays" not in s for s in summary(result)["switches"])
    named = dataclasses.replace(result, fair=dataclasses.replace(
        result.fair, saturated=("up_in:rack-x", "up_out:rack-x", "up_out:rack-c")))
    rows = {s.name: s for s in PlanSummary.model_validate(summary(named)).switches}
    assert rows["rack-x"].full_both_ways
    assert not rows["rack-c"].full_both_ways


def test_the_facility_status_carries_the_fair_share_for_every_switch():
    """What the operator writes (desired_facility → status.plan), which the live check reads."""
    from switchyard.api.analysisfacility import AnalysisFacilityStatus
    from switchyard.desired.facility import desired_facility

    from test_desired import NODES, SETTINGS, facility_spec

    out = desired_facility("af", facility_spec(6), None, NODES, [], [], SETTINGS)
    written = AnalysisFacilityStatus.model_validate(out.status).plan
    assert written.fair_share_gbps == pytest.approx(out.plan.fair.delivered_gbps)
    assert 0 < written.fair_share_gbps <= written.predicted_gbps + 1e-3
    assert {s.name for s in written.switches} == {"rack-a", "rack-b", "rack-c"}
    assert sum(s.serve_gbps for s in written.switches) == pytest.approx(written.fair_share_gbps, abs=0.01)
    for s in written.switches:
        assert "serveGbps" in next(x for x in out.status["plan"]["switches"] if x["name"] == s.name)
        assert s.fair_in_gbps == out.plan.fair.uplinks[s.name]["in"]
        assert s.fair_out_gbps == out.plan.fair.uplinks[s.name]["out"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_on_generated_facilities_the_fair_share_is_a_feasible_flow_below_the_optimum(seed):
    """The planner bench's 500-node cases, the plan and the default scheduler's placement: no link over
    its capacity, what hosts serve adds up to what is delivered, at most the LP optimum, and the same
    answer twice."""
    from switchyard.planner import baselines

    from test_planner_bounded import bench_case

    case = bench_case(500, 10, 5, seed)
    result = plan(case.topology, case.pools, case.fleets)
    for placed in (result, baselines.default_scheduler(case.topology, case.pools, case.fleets)):
        fair = fairshare.predict(case.topology, case.pools, case.fleets, placed.placement, dict(placed.hash_weights) or None)
        assert fair == fairshare.predict(case.topology, case.pools, case.fleets, placed.placement,
                                         dict(placed.hash_weights) or None)
        assert 0 < fair.delivered_gbps <= placed.predicted_gbps + 1e-3
        assert sum(fair.served.values()) == pytest.approx(fair.delivered_gbps, abs=0.01)
        assert fair.demand_gbps == pytest.approx(placed.demand_gbps, abs=1e-3)
        nic = {h.name: h.nic_gbps for h in case.topology.hosts}
        assert all(gbps <= nic[host] + 1e-3 for host, gbps in fair.served.items())
        for sw in case.topology.switches:
            assert fair.uplinks[sw.name]["in"] <= sw.uplink_gbps + 1e-3
            assert fair.uplinks[sw.name]["out"] <= sw.uplink_gbps + 1e-3
