"""Readers outside Kubernetes observed and told where to read (issue #31 items 2 and 3).

The facility hands each pool, in its plan, the outside readers' address ranges by switch and (when some read
through it) its ring; the pool's exporters' client map places those ranges on their switches, so the live
drift check measures the racks' uplinks, and the same ConfigMap carries the ring its fleets publish, which the
exporters serve to those readers.
"""

from __future__ import annotations

import json

import pytest
import yaml

from switchyard.api.plans import FleetPlan, PoolPlan
from switchyard.builders.workerfleet import build_routing_config
from switchyard.desired.facility import desired_facility
from switchyard.desired.xcachepool import desired_pool
from switchyard.observe import clientmap, drift
from switchyard.observe.clientmap import ClientMap
from switchyard.policy.settings import Settings
from switchyard.topology import load_topology, read_yaml

from test_outside_readers import CASE, RACKS

RACK_READER = {"condor-2x40": "10.40.1.9", "condor-6x40": "10.40.6.9", "condor-2x100": "10.40.9.9"}


def facility(with_outside: bool = True):
    doc = yaml.safe_load(CASE.with_name(CASE.name + "-facility.yaml").read_text())
    if not with_outside:
        del doc["spec"]["outsideReaders"]
    nodes = load_topology(read_yaml(str(CASE) + ".yaml"), "topology").node_infos()
    return desired_facility("nebraska-condor", doc["spec"], None, nodes, [], [], Settings()), nodes


def child(out, kind: str) -> dict:
    return next(c for c in out.children if c["kind"] == kind)


def pool_children(out, nodes, pods=(), status: dict | None = None) -> tuple[dict, dict]:
    """The pool's desired children from the plan the facility wrote: (its client-map ConfigMap, its status)."""
    pool = child(out, "XCachePool")
    done = desired_pool(pool["metadata"]["name"], "default", pool["spec"], {**pool["status"], **(status or {})}, {},
                        nodes, Settings(), pods=pods)
    return next(c for c in done.children if c["metadata"]["name"].endswith("-clients")), done.status


def test_the_pool_plan_carries_the_outside_ranges_and_the_ring_only_when_declared():
    out, _ = facility()
    plan = child(out, "XCachePool")["status"]["plan"]
    assert plan["outsideNetworks"] == {"condor-2x100": ["10.40.8.0/22"], "condor-2x40": ["10.40.0.0/22"],
                                       "condor-6x40": ["10.40.4.0/22"]}
    fleet_ring = child(out, "WorkerFleet")["status"]["plan"]["cacheRing"]
    assert plan["cacheRing"] == fleet_ring and len(fleet_ring) == 8
    assert PoolPlan.model_validate(plan).cache_ring == fleet_ring
    bare, _ = facility(with_outside=False)
    assert set(child(bare, "XCachePool")["status"]["plan"]) == {"facility", "switchLabel", "hosts"}  # as before


def test_the_client_map_places_the_outside_readers_on_their_racks(tmp_path):
    out, nodes = facility()
    clients, _ = pool_children(out, nodes)
    read = ClientMap.from_json(clients["data"][clientmap.KEY])
    assert {read.switch_of(address) for address in RACK_READER.values()} == set(RACKS)
    assert all(read.switch_of(address) == rack for rack, address in RACK_READER.items())
    assert read.switch_of("10.40.12.1") == clientmap.UNKNOWN  # outside every declared range
    bare, bare_nodes = facility(with_outside=False)
    bare_clients, _ = pool_children(bare, bare_nodes)
    assert set(bare_clients["data"]) == {clientmap.KEY}  # no routing published, the map of before
    assert ClientMap.from_json(bare_clients["data"][clientmap.KEY]).switch_of(RACK_READER["condor-6x40"]) == "unknown"


def test_the_exporters_are_handed_the_ring_the_fleets_publish_with_its_hosts_out_and_hot_files():
    out, nodes = facility()
    addresses = {n.name: n.address for n in nodes}
    fleet = FleetPlan.model_validate(child(out, "WorkerFleet")["status"]["plan"])
    clients, _ = pool_children(out, nodes)
    assert clients["data"]["ring"] == build_routing_config("f", fleet, addresses)["data"]["ring"]
    assert "hot" not in clients["data"]
    # one host without a Ready pod is out of both; a hot file is listed in both
    hosts = sorted(fleet.cache_ring)
    pods = [{"node": h, "ready": h != hosts[0]} for h in hosts]
    hot = [{"path": "/store/hot.root", "replicas": 2}]
    clients, status = pool_children(out, nodes, pods, {"hotFiles": hot})
    assert status["ringOut"] == [hosts[0]]
    without = fleet.model_copy(update={"cache_ring": {h: w for h, w in fleet.cache_ring.items() if h != hosts[0]}})
    published = build_routing_config("f", without, addresses, hot)["data"]
    assert (clients["data"]["ring"], clients["data"]["hot"]) == (published["ring"], published["hot"])


def flows_text(labels_of, gbps_by_rack: dict[str, float], hosts: dict[str, list[str]], pool: str, seconds: float):
    """Each cache host's exporter text after `seconds` of its share of the racks' reads, labelled as its client
    map labels each rack's reader (`labels_of`)."""
    count = sum(len(h) for h in hosts.values())
    lines = []
    for switch, nodes in hosts.items():
        for node in nodes:
            labels = f'pool="{pool}",host="{node}",switch="{switch}"'
            by_label: dict[str, float] = {}
            for rack, gbps in gbps_by_rack.items():
                label = labels_of(RACK_READER[rack])
                by_label[label] = by_label.get(label, 0.0) + gbps / count * 1e9 / 8 * seconds
            lines += [f'switchyard_xcache_served_bytes_total{{{labels},client_switch="{c}"}} {v}'
                      for c, v in by_label.items()]
            lines += [f"switchyard_xcache_origin_bytes_total{{{labels}}} 0",
                      f"switchyard_xcache_exporter_start_time_seconds{{{labels}}} 1",
                      f"switchyard_xcache_served_bytes_timestamp_seconds{{{labels}}} {1000 + seconds}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("placed", [True, False])
def test_the_live_check_measures_the_racks_uplinks_only_once_the_map_places_their_readers(placed):
    """The racks' uplinks in carry what the plan predicts there. With the readers' ranges in the client map
    the live check measures that and no rack drifts; with them counted 'unknown' (the map of before this
    change) each rack's uplink reads idle against its prediction and drifts after the sustain time."""
    out, nodes = facility()
    clients, _ = pool_children(out, nodes)
    client_map = ClientMap.from_json(clients["data"][clientmap.KEY]) if placed else ClientMap()
    predicted = drift.predictions(out.status["plan"])
    racks_in = {rack: predicted[(rack, drift.IN)] for rack in RACKS}
    assert all(gbps > 50 for gbps in racks_in.values())
    pool = child(out, "XCachePool")["metadata"]["name"]
    hosts = {sw: list(n) for sw, n in out.plan.placement.caches["xcache"].items()}
    expected = {u.switch: [] for u in out.plan.uplinks}
    for switch, names in hosts.items():
        expected[switch] = [(pool, n) for n in names]
    rules = drift.DriftRules()
    history: dict = {}
    for seen, seconds in ((0.0, 0.0), (rules.window_seconds, rules.window_seconds)):
        text = flows_text(client_map.switch_of, racks_in, hosts, pool, seconds)
        history = drift.record_flows(history, drift.parse_flows(text), seen, keep_seconds=1e9)
    uplinks = drift.observed_uplinks(history, expected, rules.window_seconds, rules)
    for rack in RACKS:
        assert uplinks[(rack, drift.IN)] == pytest.approx(racks_in[rack] if placed else 0.0)
    # Placed or not, the racks' bytes leave the cache hosts' switches: each switch's hosts' share of them.
    count = sum(len(names) for names in hosts.values())
    for switch, names in hosts.items():
        assert uplinks[(switch, drift.OUT)] == pytest.approx(sum(racks_in.values()) * len(names) / count)
    # The racks' uplinks judged against the plan, the caches serving as predicted (so the facility is busy).
    subjects = {s: g for s, g in predicted.items() if s[1] == drift.SERVE or s[0] in RACKS}
    serving = {s: g for s, g in subjects.items() if s[1] == drift.SERVE}
    memory: dict = {}
    for now in range(0, int(rules.sustain_seconds) + 16, 15):
        result = drift.assess(subjects, drift.observations({s: g for (s, _), g in serving.items()}, uplinks),
                              memory, now, rules)
        memory = result.memory
    drifting = {v.subject for v in result.drifting}
    assert drifting == (set() if placed else {(rack, drift.IN) for rack in RACKS})
