"""What stands between a plan and its target, in words (planner/explain.py): one case per binding constraint."""

import pytest

from switchyard.api.xcachepool import InlinePool
from switchyard.planner import Placement, Plan, PoolRequest, UplinkLoad
from switchyard.planner.explain import link_words, shortfall
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
