"""Readers outside Kubernetes (spec.outsideReaders, issue #31 item 1): declared on the facility, counted by
the planner as fixed demand on their switch, read through their pool's ring, shown apart from the pods."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pydantic
import pytest
import yaml

from switchyard.api import AnalysisFacilitySpec, reasons
from switchyard.api.analysisfacility import AnalysisFacilityStatus
from switchyard.desired.facility import desired_facility
from switchyard.planner import FleetRequest, PoolRequest, Unsatisfiable, plan
from switchyard.planner.fairshare import predict, with_fair_share
from switchyard.planner.flow import evaluate
from switchyard.policy.settings import Settings
from switchyard.topology import OutsideGroup, load_topology, read_yaml, snapshot

from test_planner_cases import fleet, nodes, pool, switch, topology

REPO = pathlib.Path(__file__).resolve().parents[3]
CASE = REPO / "bench/topologies/nebraska-condor"
RACKS = ("condor-2x40", "condor-6x40", "condor-2x100")


def condor_case(with_outside: bool = True):
    """The bench's Nebraska-like case with HTCondor racks: (spec, topology, pools, fleets)."""
    doc = yaml.safe_load(CASE.with_name(CASE.name + "-facility.yaml").read_text())
    if not with_outside:
        del doc["spec"]["outsideReaders"]
    spec = AnalysisFacilitySpec.model_validate(doc["spec"])
    nodes_ = load_topology(read_yaml(str(CASE) + ".yaml"), "topology").node_infos()
    topo = snapshot(nodes_, spec.network, spec.outside_readers)
    return (spec, topo, [PoolRequest(p.name, p) for p in spec.cache_pools],
            [FleetRequest(f.name, f) for f in spec.fleets])


def outside(topo, *groups: OutsideGroup):
    return dataclasses.replace(topo, outside=tuple(groups))


# ---------------------------------------------------------------- the model

def spec_with(**group) -> dict:
    doc = yaml.safe_load(CASE.with_name(CASE.name + "-facility.yaml").read_text())["spec"]
    doc["outsideReaders"] = [{**doc["outsideReaders"][0], **group}]
    return doc


def test_a_facility_declares_outside_readers_on_a_switch_without_nodes():
    spec, topo, _, _ = condor_case()
    assert [(g.name, g.switch, g.count, g.pool) for g in spec.outside_readers] == [
        ("condor-a", "condor-2x40", 50, None), ("condor-b", "condor-6x40", 100, None),
        ("condor-c", "condor-2x100", 60, "xcache")]
    assert not topo.switch("condor-2x40").hosts
    assert topo.outside_on("condor-6x40") == (OutsideGroup("condor-b", "condor-6x40", 100, 1.47, None),)
    assert AnalysisFacilitySpec.model_validate(spec_with(cidrs=["fd00:40::/64", "10.9.0.0/16"]))


@pytest.mark.parametrize("group,message", [
    ({"switch": "rack-9"}, "every outside reader group's switch must name one of spec.network.switches"),
    ({"pool": "other"}, "every outside reader group's pool must name one of spec.cachePools"),
    ({"cidrs": ["10.40.0.1/22"]}, "has host bits set"),
    ({"cidrs": ["10.400.0.0/22"]}, "is not an address range"),
    ({"cidrs": ["condor.example.org"]}, "should match pattern"),
    ({"cidrs": []}, "at least 1 item"),
    ({"count": 0}, "greater than or equal to 1"),
])
def test_bad_outside_readers_are_refused_by_the_model(group, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        AnalysisFacilitySpec.model_validate(spec_with(**group))


def test_the_crd_checks_the_references_and_the_cidr_pattern():
    crd = yaml.safe_load((REPO / "crds/switchyard.dev_analysisfacilities.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("self.network.switches.exists(s, s.name == r.switch)" in r for r in rules)
    assert any("self.cachePools.exists(p, p.name == r.pool)" in r for r in rules)
    cidrs = spec["properties"]["outsideReaders"]["items"]["properties"]["cidrs"]["items"]
    assert cidrs["pattern"].startswith("^")


def test_a_bad_declaration_holds_the_facility_with_a_reason():
    out = desired_facility("af", spec_with(pool="other"), None, [], [], [], Settings())
    ready = out.states["Ready"]
    assert not ready.status and ready.reason == reasons.INVALID_SPEC and "spec.cachePools" in ready.message


def test_the_planner_refuses_a_group_on_an_undeclared_switch_or_pool():
    topo = topology([switch("s0", 100, nodes("cache", nic=100, nvme=2), nodes("w"))])
    for group, reason in ((OutsideGroup("o", "s9", 1, 1.0, None), reasons.INVALID_SPEC),
                          (OutsideGroup("o", "s0", 1, 1.0, "nope"), reasons.UNKNOWN_POOL)):
        with pytest.raises(Unsatisfiable) as exc:
            plan(outside(topo, group), [pool()], [fleet()])
        assert exc.value.reason == reason and "outside readers o" in exc.value.message


# ---------------------------------------------------------------- the planner's accounting

def test_the_condor_racks_uplinks_carry_their_readers_only_when_declared():
    """The acceptance's first half: the plan with the outside readers declared differs from the plan without,
    on the uplinks of the racks they load (and what the caches' switches send)."""
    _, bare, pools, fleets = condor_case(with_outside=False)
    spec, topo, _, _ = condor_case()
    without, with_ = plan(bare, pools, fleets), plan(topo, pools, fleets)
    for rack in RACKS:
        assert without.uplink(rack).in_gbps == 0 and without.routing[rack] == "local"
        assert with_.uplink(rack).in_gbps > 0 and with_.routing[rack] == "hashed"
        demand = sum(g.demand_gbps for g in topo.outside_on(rack))
        assert with_.uplink(rack).in_gbps <= min(demand, with_.uplink(rack).capacity_gbps) + 1e-6
    assert without.demand_gbps == pytest.approx(48 * 1.47)
    assert with_.demand_gbps == pytest.approx(48 * 1.47 + 210 * 1.47)
    # the pods cannot use what the caches serve the racks: the ring serves 360 Gbps in all
    assert with_.predicted_gbps > without.predicted_gbps
    assert with_.predicted_gbps == pytest.approx(360, abs=0.01) and with_.bottleneck == "cache serving"
    sent = sum(with_.uplink(s).out_gbps for s in ("k8s-1", "k8s-2"))
    assert sent == pytest.approx(sum(with_.uplink(r).in_gbps for r in RACKS), abs=0.01)
    # no pod is placed behind a rack without nodes
    assert not any(rack in by for by in with_.placement.workers.values() for rack in RACKS)


def fenced_racks(outside_gbps: float):
    """A cache rack with room for 10 workers, two worker racks with 40 Gbps uplinks; outside readers on w1."""
    topo = topology([switch("c", 400, nodes("cache", cpu=16, memory=64, nic=100, nvme=2), nodes("w", count=1, cpu=40)),
                     switch("w1", 40, nodes("w", count=4, cpu=40)), switch("w2", 40, nodes("w", count=4, cpu=40))])
    if outside_gbps:
        topo = outside(topo, OutsideGroup("condor", "w1", int(outside_gbps), 1.0, None))
    return topo, [pool(serve=100)], [fleet(replicas=40, read=1, cores=4)]


def test_the_planner_places_its_workers_around_the_outside_readers():
    """Outside readers filling w1's uplink: the planner moves its own workers to w2 to keep the peak down."""
    topo, pools, fleets = fenced_racks(0)
    bare = plan(topo, pools, fleets)
    topo, pools, fleets = fenced_racks(30)
    loaded = plan(topo, pools, fleets)
    assert bare.predicted_gbps == pytest.approx(40) and loaded.predicted_gbps == pytest.approx(70)
    assert bare.placement.workers["f"].get("w1", 0) > 0
    assert loaded.placement.workers["f"].get("w1", 0) < bare.placement.workers["f"]["w1"]
    assert loaded.uplink("w1").in_gbps == pytest.approx(30 + loaded.placement.workers["f"].get("w1", 0))
    assert loaded.peak < 1.0


def test_outside_readers_of_a_pool_without_caches_read_nothing_but_count_in_the_demand():
    topo = topology([switch("s0", 100, nodes("w"))])
    topo = outside(topo, OutsideGroup("o", "s0", 10, 2.0, None))
    flow = evaluate(topo, [], [fleet()], plan(topo, [], [fleet()]).placement)
    assert flow.delivered_gbps == 0 and flow.demand_gbps == 0     # no pool: nothing to read through


# ---------------------------------------------------------------- the fair share

def test_the_fair_share_gives_the_outside_readers_their_flows():
    spec, topo, pools, fleets = condor_case()
    result = with_fair_share(topo, pools, fleets, plan(topo, pools, fleets))
    fair = result.fair
    assert set(fair.outside) == set(RACKS)
    for rack in RACKS:
        # nothing else crosses a rack's uplink: what its readers get is what it carries in
        assert fair.outside[rack] == pytest.approx(fair.uplinks[rack]["in"], abs=0.01)
        assert 0 < fair.outside[rack] <= sum(g.demand_gbps for g in topo.outside_on(rack)) + 1e-6
    assert fair.demand_gbps == pytest.approx(result.demand_gbps)
    assert sum(fair.switch_served.values()) == pytest.approx(fair.delivered_gbps, abs=0.01)
    _, bare, _, _ = condor_case(with_outside=False)
    assert predict(bare, pools, fleets, result.placement, result.hash_weights).outside == {}


# ---------------------------------------------------------------- the status and the CLI

def test_the_status_shows_the_outside_readers_per_switch_apart_from_the_pods():
    doc = yaml.safe_load(CASE.with_name(CASE.name + "-facility.yaml").read_text())
    nodes_ = load_topology(read_yaml(str(CASE) + ".yaml"), "topology").node_infos()
    out = desired_facility("nebraska-condor", doc["spec"], None, nodes_, [], [], Settings())
    rows = {s["name"]: s for s in out.status["plan"]["switches"]}
    assert rows["condor-6x40"]["outsideReaders"] == 100 and rows["condor-6x40"]["workers"] == 0
    assert rows["condor-6x40"]["outsideGbps"] == pytest.approx(147)
    assert rows["condor-6x40"]["outsideFairGbps"] == out.plan.fair.outside["condor-6x40"]
    assert "outsideReaders" not in rows["k8s-1"] and rows["k8s-1"]["workers"] > 0
    assert out.status["switches"] == 2       # switches with nodes
    written = AnalysisFacilityStatus.model_validate(out.status).plan
    assert {s.name: s.outside_readers for s in written.switches}["condor-2x40"] == 50
    del doc["spec"]["outsideReaders"]
    bare = desired_facility("nebraska-condor", doc["spec"], None, nodes_, [], [], Settings())
    assert not any(k.startswith("outside") for s in bare.status["plan"]["switches"] for k in s)


def run_plan(capsys, *args):
    from switchyard.cli import main

    code = main(["plan", "-f", str(CASE) + "-facility.yaml", "--topology", str(CASE) + ".yaml", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_switchyard_plan_shows_the_outside_readers_in_their_own_columns(capsys):
    code, out, err = run_plan(capsys)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[:9] == ["SWITCH", "UPLINK", "CACHES", "W:vine", "RING", "OUTSIDE", "OUTSIDE-GBPS",
                                  "OUTSIDE-FAIR", "ROUTING"]
    cells = {r.split()[0]: r.split() for r in rows[:6]}
    assert cells["condor-6x40"][3:8] == ["0", "0", "100", "147.0", cells["condor-6x40"][7]]
    assert cells["condor-6x40"][8] == "hashed" and cells["k8s-1"][5] == "0"
    assert cells["TOTAL"][5] == "210" and cells["TOTAL"][6] == "308.7"
    # a rack of outside readers is as declared, not a switch nobody can use
    assert "nothing is placed behind it" not in err
    code, out, _ = run_plan(capsys, "-o", "json")
    switches = {s["name"]: s for s in json.loads(out)["switches"]}
    assert switches["condor-2x100"]["outsideReaders"] == {"condor-c": 60}
    assert switches["condor-2x100"]["outsideGbps"] == pytest.approx(88.2)
    assert switches["k8s-2"]["outsideReaders"] == {} and switches["k8s-2"]["outsideGbps"] == 0


def test_without_outside_readers_the_table_has_no_outside_column(capsys, tmp_path):
    doc = yaml.safe_load(pathlib.Path(str(CASE) + "-facility.yaml").read_text())
    del doc["spec"]["outsideReaders"]
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(doc))
    from switchyard.cli import main

    assert main(["plan", "-f", str(bare), "--topology", str(CASE) + ".yaml", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert not any(k.startswith("outside") for s in json.loads(out)["switches"] for k in s)
    assert "switch condor-2x40: no schedulable node" in err
    assert main(["plan", "-f", str(bare), "--topology", str(CASE) + ".yaml"]) == 0
    assert "OUTSIDE" not in capsys.readouterr().out


def test_when_demand_binds_the_remedy_counts_the_workers_apart_from_the_outside_readers():
    from switchyard.planner.explain import shortfall

    topo = topology([switch("s0", 400, nodes("cache", nic=100, nvme=2), nodes("w"))])
    topo = outside(topo, OutsideGroup("o", "s0", 5, 2.0, None))
    pools, fleets = [pool(serve=100)], [fleet(replicas=10, read=1)]
    result = plan(topo, pools, fleets)
    assert result.bottleneck == "demand" and result.demand_gbps == pytest.approx(20)
    text = shortfall(100, result, topo, pools, fleets)
    assert "(10 workers read 10 Gbps, beside 5 outside readers reading 10 Gbps)" in text
    assert "about 80 more workers at 1 Gbps each" in text


@pytest.mark.parametrize("mode", ["auto", "local"])
def test_outside_readers_beside_local_workers_leave_the_switch_routed_as_its_pods(mode, capsys):
    """Outside readers read the ring wherever they are; a switch's routing is what its pods are told, so a
    Kubernetes switch whose workers read their local caches stays local, a rack of outside readers is hashed."""
    spec, topo, pools, fleets = condor_case()
    mixed = outside(topo, *topo.outside, OutsideGroup("beside", "k8s-1", 10, 1.47, None))
    result = plan(mixed, pools, fleets, mode)
    assert result.placement.workers["vine"]["k8s-1"] > result.placement.hashed.get("vine", {}).get("k8s-1", 0)
    assert result.routing["k8s-1"] == "local" and result.routing["condor-6x40"] == "hashed"
    assert result.uplink("k8s-1").in_gbps > plan(topo, pools, fleets, mode).uplink("k8s-1").in_gbps
    code, out, _ = run_plan(capsys, "--routing", "local")
    assert code == 0 and "routing local:" not in out      # the racks hold no worker to be told hashed
