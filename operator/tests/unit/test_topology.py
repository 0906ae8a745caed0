"""Topology files and snapshots."""

import pytest

from switchyard.api.analysisfacility import Network
from switchyard.topology import NodeInfo, TopologyError, load_topology, node_info, parse_quantity, snapshot


def test_quantities():
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("16Gi") == 16 * 2**30
    with pytest.raises(ValueError):
        parse_quantity("lots")


@pytest.mark.parametrize("data,message", [
    ({"switches": [{"name": "a", "uplinkGbps": "fast"}]}, "switches[0].uplinkGbps"),
    ({"switches": [{"name": "a", "uplinkGbps": 1, "nodes": [{"name": "n", "cpu": 0}]}]}, "switches[0].nodes[0].cpu"),
    ({"switches": [{"name": "a", "uplinkGbps": 1, "nodes": [{"name": "n", "bogus": 1}]}]}, "switches[0].nodes[0].bogus"),
    ({"switches": []}, "switches"),
    ({"switches": [{"name": "a", "uplinkGbps": 1}, {"name": "a", "uplinkGbps": 2}]}, "duplicate switch name"),
])
def test_bad_topology_names_the_field(data, message):
    with pytest.raises(TopologyError) as err:
        load_topology(data, "topo.yaml")
    assert message in str(err.value) and str(err.value).startswith("topo.yaml")


def test_snapshot_groups_schedulable_nodes_by_declared_switch():
    network = Network.model_validate({"switches": [{"name": "a", "uplinkGbps": 10}], "defaultNicGbps": 10})
    nodes = [
        NodeInfo("n1", {"switchyard.dev/switch": "a"}, 40.0, 4000, 2**30, 110),
        NodeInfo("n2", {"switchyard.dev/switch": "a"}, None, 4000, 2**30, 110),
        NodeInfo("n3", {"switchyard.dev/switch": "z"}, None, 4000, 2**30, 110),
        NodeInfo("n4", {"switchyard.dev/switch": "a"}, None, 4000, 2**30, 110, schedulable=False),
    ]
    topo = snapshot(nodes, network)
    assert [h.name for h in topo.switch("a").hosts] == ["n1", "n2"]
    assert topo.switch("a").hosts[1].nic_gbps == 10
    assert topo.unknown_switch_nodes == ("n3",)


def test_node_info_reads_labels_allocatable_and_readiness():
    body = {"metadata": {"name": "n", "labels": {"x": "y"}, "annotations": {"switchyard.dev/nic-gbps": "100"}},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "50"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}
    info = node_info(body)
    assert (info.nic_gbps, info.cpu_millis, info.pods, info.schedulable) == (100.0, 8000, 50, True)
    assert info.not_ready_since is None
    body["spec"]["unschedulable"] = True
    assert node_info(body).schedulable is False
    assert node_info(body).not_ready_since is None, "cordoned is not lost"
    body["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-22T01:00:00Z"}]
    assert node_info(body).not_ready_since == "2026-11-22T01:00:00Z"


def test_facility_chooses_the_nic_annotation():
    body = {"metadata": {"name": "n", "labels": {"sw": "a"},
                         "annotations": {"example.org/nic": "200", "switchyard.dev/nic-gbps": "10"}},
            "status": {"allocatable": {"cpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}
    info = node_info(body)
    custom = Network.model_validate({"switchLabel": "sw", "nicGbpsAnnotation": "example.org/nic",
                                     "switches": [{"name": "a", "uplinkGbps": 10}]})
    assert snapshot([info], custom).switch("a").hosts[0].nic_gbps == 200
    default = Network.model_validate({"switchLabel": "sw", "switches": [{"name": "a", "uplinkGbps": 10}]})
    assert snapshot([info], default).switch("a").hosts[0].nic_gbps == 10


def test_snapshot_lists_not_ready_nodes_on_declared_switches_only():
    network = Network.model_validate({"switches": [{"name": "a", "uplinkGbps": 10}], "defaultNicGbps": 10})
    nodes = [
        NodeInfo("n1", {"switchyard.dev/switch": "a"}, None, 4000, 2**30, 110),
        NodeInfo("n2", {"switchyard.dev/switch": "a"}, None, 4000, 2**30, 110, schedulable=False,
                 not_ready_since="2026-11-22T03:00:00Z"),
        NodeInfo("n3", {"switchyard.dev/switch": "z"}, None, 4000, 2**30, 110, schedulable=False,
                 not_ready_since="2026-11-22T03:00:00Z"),
        NodeInfo("n4", {"switchyard.dev/switch": "a"}, None, 4000, 2**30, 110, schedulable=False),  # cordoned
    ]
    topo = snapshot(nodes, network)
    assert [h.name for h in topo.switch("a").hosts] == ["n1"]
    assert topo.not_ready_nodes == ("n2",)


def test_real_groups_are_nodes_like_any_other_with_their_names():
    topo = load_topology({"switches": [{"name": "Rack-A", "uplinkGbps": 10, "nodes": [
        {"name": "real", "real": True, "nvmeDisks": 1},
        {"name": "w", "count": 2},
    ]}]})
    real, workers = topo.switches[0].nodes
    assert real.real and not workers.real
    assert real.node_names("Rack-A") == ["rack-a-real"]
    assert workers.node_names("Rack-A") == ["rack-a-w-0", "rack-a-w-1"]
    # `switchyard plan` sees every node; only the local cluster starts real ones differently.
    assert [n.name for n in topo.node_infos()] == ["rack-a-real", "rack-a-w-0", "rack-a-w-1"]
