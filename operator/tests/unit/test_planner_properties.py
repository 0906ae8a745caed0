"""Properties every plan keeps, on facilities hypothesis makes up.

Capacities are checked against the topology's own hosts (not the planner's
reduced problem): the node-level witness packing must fit every node's CPU,
memory, pods and NIC, and every uplink and the WAN must carry what the flow
model puts on them.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from switchyard.planner import Unsatisfiable, plan
from switchyard.planner.flow import evaluate, host_serve
from switchyard.planner.packing import witness
from switchyard.api.uplinkscore import UTIL_TOLERANCE
from switchyard.planner.stay import GBPS_TOLERANCE, staying
from switchyard.topology import GIB, parse_quantity

from test_planner import without
from test_planner_cases import describe, fleet, nodes, pool, switch, topology

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def facilities(draw, shapes=st.sampled_from([1, 2, 4])):
    """(topology, pools, fleets). `shapes`: worker cores; node CPUs are multiples of them by default."""
    switches = []
    for i in range(draw(st.integers(1, 4))):
        groups = []
        for g in range(draw(st.integers(1, 2))):
            first = i == 0 and g == 0      # one NVMe node every pool may use: fewer refused facilities
            groups.append(nodes(
                f"g{g}", count=draw(st.integers(1, 3)), cpu=draw(st.sampled_from([8, 16, 32, 64])),
                memory=draw(st.sampled_from([64, 128, 256])), nic=draw(st.sampled_from([10, 25, 50, 100])),
                nvme=2 if first else draw(st.sampled_from([0, 0, 2])), pods=draw(st.sampled_from([8, 110])),
                labels={"zone": "x"} if first or draw(st.booleans()) else None))
        switches.append(switch(f"s{i}", draw(st.sampled_from([5, 10, 20, 40, 80])), *groups))
    topo = topology(switches, wan=draw(st.sampled_from([10, 50, 400])))
    pools = []
    for p in range(draw(st.integers(1, 2))):
        extra = {"nodeSelector": {"zone": "x"}} if draw(st.booleans()) else {}
        pools.append(pool(f"p{p}", serve=draw(st.sampled_from([10, 20, 45])), miss=draw(st.sampled_from([0, 0.1, 0.5])),
                          maxHostsPerSwitch=draw(st.sampled_from([1, 2, 8])), **extra))
    fleets = []
    for j in range(draw(st.integers(1, 3))):
        cores = draw(shapes)
        extra = {"pool": "p1"} if len(pools) > 1 and draw(st.booleans()) else {}
        fleets.append(fleet(f"f{j}", replicas=draw(st.integers(0, 60)), cores=cores, memory=2 * cores,
                            read=draw(st.sampled_from([0.5, 1, 2, 4])), **extra))
    return topo, pools, fleets


def planned(topo, pools, fleets, routing="auto"):
    note(describe(topo, pools, fleets))
    try:
        return plan(topo, pools, fleets, routing)
    except Unsatisfiable:
        return None


@SETTINGS
@given(facilities(shapes=st.integers(1, 6)), st.sampled_from(["auto", "local", "hashed"]))
def test_no_node_uplink_or_wan_capacity_is_exceeded(facility, routing):
    topo, pools, fleets = facility
    result = planned(topo, pools, fleets, routing)
    if result is None:
        return
    packing = witness(topo, pools, fleets, result.placement)
    assert not packing.shortfall
    size = {f.name: (f.body.cores * 1000, f.body.memory_gib * GIB, f.body.read_gbps) for f in fleets}
    pool_by_name = {p.name: p.body for p in pools}
    for host in topo.hosts:
        cpu = memory = nic = pods = 0.0
        for kind, count in packing.nodes.get(host.name, {}).items():
            pods += count
            if kind.startswith("cache:"):
                body = pool_by_name[kind[len("cache:"):]]
                cpu += parse_quantity(body.resources.cpu) * 1000
                memory += parse_quantity(body.resources.memory)
                nic += body.miss_ratio * min(host.nic_gbps, body.serve_gbps)   # fills coming in
            else:
                cpu += count * size[kind][0]
                memory += count * size[kind][1]
                nic += count * size[kind][2]
        assert cpu <= host.cpu_millis and memory <= host.memory_bytes and pods <= host.pods
        assert nic <= host.nic_gbps + 1e-9
    for load in result.uplinks:
        assert load.in_gbps <= load.capacity_gbps + 1e-3 and load.out_gbps <= load.capacity_gbps + 1e-3
    flow = evaluate(topo, pools, fleets, result.placement, result.hash_weights)
    assert flow.delivered_gbps == result.predicted_gbps
    serve = host_serve(topo, pools, result.placement)
    switch_of = {h.name: h.switch for h in topo.hosts}
    for p in pools:
        for sw, gbps in flow.served[p.name].items():
            assert gbps <= sum(g for n, g in serve[p.name].items() if switch_of[n] == sw) + 1e-3
    fills = sum(p.body.miss_ratio * sum(flow.served[p.name].values()) for p in pools)
    assert fills <= topo.wan_gbps + 1e-3
    for f in fleets:
        placed = sum(result.placement.workers.get(f.name, {}).values())
        assert placed + result.unplaced.get(f.name, 0) == f.body.replicas


@SETTINGS
@given(facilities(), st.sampled_from(["auto", "local", "hashed"]))
def test_caches_only_on_eligible_nodes_one_per_node_within_the_cap(facility, routing):
    topo, pools, fleets = facility
    result = planned(topo, pools, fleets, routing)
    if result is None:
        return
    hosts = {h.name: h for h in topo.hosts}
    seen = []
    for p in pools:
        for sw, names in result.placement.caches.get(p.name, {}).items():
            assert len(names) <= p.body.max_hosts_per_switch
            for name in names:
                assert hosts[name].switch == sw
                assert hosts[name].has_nvme(p.body.nvme_label)
                assert hosts[name].matches(p.body.node_selector)
            seen += names
    assert len(seen) == len(set(seen))
    served = host_serve(topo, pools, result.placement)
    for p in pools:
        assert set(result.hash_weights.get(p.name, {})) <= set(served[p.name])


@SETTINGS
@given(facilities(), st.sampled_from(["auto", "local", "hashed"]))
def test_same_input_same_plan_and_replanning_it_moves_nothing(facility, routing):
    topo, pools, fleets = facility
    result = planned(topo, pools, fleets, routing)
    if result is None:
        return
    assert plan(topo, pools, fleets, routing) == result
    again = plan(topo, pools, fleets, routing, current=result.placement)
    assert again.moves == 0


@SETTINGS
@given(facilities(), st.sampled_from(["auto", "local", "hashed"]), st.integers(0, 10**6))
def test_after_a_node_loss_pods_move_beyond_staying_only_for_more_gbps_or_a_lower_peak(facility, routing, pick):
    topo, pools, fleets = facility
    result = planned(topo, pools, fleets, routing)
    if result is None:
        return
    hosts = sorted(h.name for h in topo.hosts)
    lost = hosts[pick % len(hosts)]
    reduced = without(topo, lost)
    try:
        again = plan(reduced, pools, fleets, routing, current=result.placement)
    except Unsatisfiable:
        return
    stay = staying(reduced, pools, fleets, result.placement, routing)
    note(f"lost {lost}; staying: {stay and (stay.moves, stay.predicted_gbps, stay.peak)}; "
         f"re-plan: {again.moves, again.predicted_gbps, again.peak}")
    if stay is None:
        return      # the surviving pods do not fit where they are: some must move
    noise = 1e-6 * max(1.0, stay.predicted_gbps)
    if again.moves > stay.moves:
        more_gbps = again.predicted_gbps > stay.predicted_gbps * (1 + GBPS_TOLERANCE) + noise
        calmer = (again.predicted_gbps >= stay.predicted_gbps * (1 - GBPS_TOLERANCE) - noise
                  and again.peak < stay.peak - UTIL_TOLERANCE)
        assert more_gbps or calmer
    # and never worse than staying in the objective order
    assert again.predicted_gbps >= stay.predicted_gbps * (1 - GBPS_TOLERANCE) - noise


@SETTINGS
@given(facilities())
def test_rounding_costs_at_most_one_worker_per_switch(facility):
    # Node CPUs are multiples of worker cores here, so nodes pack whole workers
    # and the integer plan differs from the LP only by rounding.
    topo, pools, fleets = facility
    result = planned(topo, pools, fleets)
    if result is None:
        return
    one_worker = max(f.body.read_gbps for f in fleets)
    assert result.predicted_gbps <= result.bound_gbps + 1e-6
    assert result.predicted_gbps >= result.bound_gbps - len(topo.switches) * one_worker - 1e-6
