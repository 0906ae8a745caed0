"""What stands between a plan and its target, in words (planner/explain.py): one case per binding constraint."""

import pytest

from switchyard.api.xcachepool import InlinePool
from switchyard.planner import Placement, Plan, PoolRequest, UplinkLoad
from switchyard.planner.explain import idle_cache_nodes, link_words, shortfall
from switchyard.topology import Topology

TOPOLOGY = Topology(switches=(), wan_gbps=40)
POOL = PoolRequest("xcache", InlinePool.model_validate({"name": "xcache", "serveGbps": 45,
                                                        "origin": {"host": "o.example.org"}}))


def plan(bottleneck: str, uplinks=(), predicted: float = 100, demand: float = 150, unplaced=None) -> Plan:
    placement = Placement(caches={"xcache": {"rack-a": ("a-0", "a-1"), "rack-b": ("b-0",)}},
                          workers={"dask": {"rack-a": 30, "rack-b": 45}}, hashed={})
    return Plan(placement=placement, routing={}, uplinks=tuple(uplinks), predicted_gbps=predicted, bound_gbps=predicted,
                bottleneck=bottleneck, planner="test", demand_gbps=demand, unplaced=unplaced or {})


@pytest.mark.parametrize("result,words", [
    (plan("demand", demand=100), "the workers' demand binds (75 workers read 100 Gbps): raise the fleets' replicas "
                                 "or readGbps (about 75 more workers at 1.3 Gbps each)"),
    (plan("demand", unplaced={"dask": 12}), "12 workers fit on no node (dask 12): more nodes"),
    (plan("uplink rack-b", [UplinkLoad("rack-a", 80, 10, 20), UplinkLoad("rack-b", 40, 40, 5)]),
     "full uplinks: rack-b uplink into the switch (40 of 40 Gbps): fewer bytes across them"),
    (plan("wan"), "the WAN binds (40 Gbps of cache fills from the origin)"),
    (plan("cache serving"), "every cache host serves at its cap (3 hosts, serveGbps 45): more cache hosts"),
    (plan("caches on rack-a"), "the caches on rack-a serve at their cap while others have room"),
])
def test_each_binding_constraint_is_named_with_what_would_lift_it(result, words):
    text = shortfall(200, result, TOPOLOGY, [POOL], [])
    assert text.startswith(f"target 200 Gbps, predicted {result.predicted_gbps:.0f} Gbps (")
    assert words in text, text


def test_a_met_target_says_so():
    assert shortfall(90, plan("demand"), TOPOLOGY, [POOL], []) == "target 90 Gbps: met (predicted 100 Gbps)"


@pytest.mark.parametrize("link,words", [("up_in:rack-a", "rack-a uplink into the switch"),
                                        ("up_out:rack-a", "rack-a uplink out of the switch"),
                                        ("serve:xcache:a-0", "cache host a-0 serving"), ("serve:a-0", "cache host a-0 serving"),
                                        ("nic:a-0", "cache host a-0 NIC"), ("wan", "the WAN")])
def test_fair_share_links_in_an_admins_words(link, words):
    assert link_words(link) == words


def test_a_free_node_beside_cache_hosts_near_their_cap_is_named_with_why_and_what_to_set():
    from switchyard.planner.model import FairShare
    from switchyard.topology import Host, SwitchNodes

    nvme = {"switchyard.dev/nvme": "4"}
    hosts = tuple(Host(f"a-{i}", "rack-a", 50, 16000, 64 << 30, 110, labels=nvme) for i in range(3))
    topology = Topology(switches=(SwitchNodes("rack-a", 100, hosts),), wan_gbps=100)

    def notes(served: float, max_hosts: int = 8) -> list[str]:
        pool = PoolRequest("xcache", InlinePool.model_validate({"name": "xcache", "serveGbps": 45, "maxHostsPerSwitch": max_hosts,
                                                                "origin": {"host": "o.example.org"}}))
        placement = Placement(caches={"xcache": {"rack-a": ("a-0",)}}, workers={}, hashed={})
        fair = FairShare(delivered_gbps=served, uplinks={"rack-a": {"in": 0.0, "out": 0.0}}, served={"a-0": served},
                         saturated=())
        result = Plan(placement=placement, routing={}, uplinks=(), predicted_gbps=served, bound_gbps=served,
                      bottleneck="demand", planner="test", fair=fair)
        return idle_cache_nodes(result, topology, [pool])

    (note,) = notes(42.3)
    assert note.startswith("switch rack-a: pool xcache's 1 cache host(s) serve up to 94% of their cap while 2 node(s)")
    assert "(a-1, a-2)" in note and "would not raise the total" in note and "serveHeadroom of about 0.15" in note
    assert "maxHostsPerSwitch (1) is reached" in notes(42.3, max_hosts=1)[0]
    assert notes(30) == []  # 67% of its cap: nothing to say
