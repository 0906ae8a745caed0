"""Tolerations of pools, fleets and MinIO, and the taint-aware placement they allow: Kubernetes'
matching rules, the schema's refusals, the planner and its baselines keeping pods off nodes whose
taints they do not tolerate, and the builders putting the tolerations on every pod."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from switchyard.api import AnalysisFacilitySpec, WorkerFleetSpec, XCachePoolSpec
from switchyard.api.base import Taint, Toleration, admits
from switchyard.api.plans import FleetPlan
from switchyard.builders.s3staging import build_minio
from switchyard.builders.workerfleet import build_fleet
from switchyard.builders.xcachepool import build_pool
from switchyard.generate.crds import crd
from switchyard.api import KINDS
from switchyard.api.s3staging import S3StagingSpec
from switchyard.planner import Unsatisfiable, baselines, plan
from switchyard.planner.baselines import spread
from switchyard.topology import load_topology, node_info, snapshot

from test_planner_cases import fleet, nodes, pool, switch, topology, total_workers

DEDICATED = {"key": "dedicated", "value": "xcache", "effect": "NoSchedule"}
TOLERATE_DEDICATED = {"key": "dedicated", "operator": "Equal", "value": "xcache", "effect": "NoSchedule"}


# ------------------------------------------------------------------ matching (Kubernetes' ToleratesTaint)
@pytest.mark.parametrize("toleration, taint, tolerated", [
    (TOLERATE_DEDICATED, DEDICATED, True),
    ({"key": "dedicated", "value": "xcache"}, DEDICATED, True),                               # empty effect: all
    ({"key": "dedicated", "value": "dask"}, DEDICATED, False),                                # Equal compares values
    ({"key": "dedicated", "operator": "Exists"}, DEDICATED, True),                            # Exists: any value
    ({"key": "other", "operator": "Exists"}, DEDICATED, False),                               # key must match
    ({"operator": "Exists"}, DEDICATED, True),                                                # empty key + Exists: all
    ({"operator": "Exists", "effect": "NoExecute"}, DEDICATED, False),                        # ...of that effect only
    ({**TOLERATE_DEDICATED, "effect": "NoExecute"}, DEDICATED, False),
    ({"key": "dedicated", "value": "xcache", "effect": "NoExecute", "tolerationSeconds": 60},
     {**DEDICATED, "effect": "NoExecute"}, True),
    ({"key": "flag", "operator": "Equal"}, {"key": "flag", "effect": "NoSchedule"}, True),    # empty value equals empty
])
def test_toleration_matches_taint_as_kubernetes_does(toleration, taint, tolerated):
    assert Toleration.model_validate(toleration).tolerates(Taint.model_validate(taint)) is tolerated


def test_only_noschedule_and_noexecute_taints_keep_pods_off():
    prefer = Taint(key="a", effect="PreferNoSchedule")
    hard = Taint(key="a", effect="NoSchedule")
    assert admits([prefer], [])
    assert not admits([hard], [])
    assert not admits([hard, Taint(key="b", effect="NoExecute")], [Toleration(key="a", operator="Exists")])
    assert admits([hard, Taint(key="b", effect="NoExecute")], [Toleration(key="a", operator="Exists"),
                                                              Toleration(key="b", operator="Exists")])


# ------------------------------------------------------------------ schema
def pool_spec(*tolerations: dict) -> dict:
    return {"facilityRef": {"name": "af"}, "origin": {"host": "origin.example.org"}, "tolerations": list(tolerations)}


@pytest.mark.parametrize("bad", [
    {"key": "dedicated", "operator": "Exists", "value": "xcache"},   # Exists takes no value
    {"value": "xcache"},                                             # empty key needs Exists
    {"key": "dedicated", "operator": "In"},
    {"key": "dedicated", "effect": "NoWay"},
    {"key": "dedicated", "value": "x", "effect": "NoSchedule", "tolerationSeconds": 5},  # only with NoExecute
    {"key": "dedicated", "effect": "NoExecute", "tolerationSeconds": -1},
    {"key": "bad key", "operator": "Exists"},
    {"key": "a/" * 200 + "b", "operator": "Exists"},
    {"key": "dedicated", "value": "x" * 64},
    {"key": "dedicated", "value": "$(id)"},
    {"key": "dedicated", "operator": "Exists", "extra": 1},
])
def test_bad_tolerations_are_refused(bad):
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate(pool_spec(bad))
    with pytest.raises(ValidationError):
        WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "dask": {"createScheduler": True},
                                        "tolerations": [bad]})


def test_at_most_sixteen_tolerations():
    XCachePoolSpec.model_validate(pool_spec(*[{"key": f"k{i}", "operator": "Exists"} for i in range(16)]))
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate(pool_spec(*[{"key": f"k{i}", "operator": "Exists"} for i in range(17)]))


@pytest.mark.parametrize("kind", ["XCachePool", "WorkerFleet", "AnalysisFacility", "S3Staging"])
def test_the_crds_carry_the_tolerations_schema_and_rules(kind):
    text = str(crd(next(k for k in KINDS if k.kind == kind)))
    assert "tolerationSeconds" in text and "maxItems': 16" in text
    assert "self.operator != 'Exists' || self.value == ''" in text
    assert "self.key != '' || self.operator == 'Exists'" in text


# ------------------------------------------------------------------ placement
def tainted(group: dict, *taints: dict) -> dict:
    return {**group, "taints": list(taints)}


def rack_b_dedicated():
    """Two racks alike; rack b's nodes are all tainted dedicated=xcache:NoSchedule."""
    return topology([
        switch("a", 100, nodes("c", nic=100, nvme=2), nodes("w", count=2)),
        switch("b", 100, tainted(nodes("c", nic=100, nvme=2), DEDICATED), tainted(nodes("w", count=2), DEDICATED)),
    ])


def test_tainted_switch_gets_no_cache_or_worker_without_the_toleration():
    topo = rack_b_dedicated()
    pools, fleets = [pool()], [fleet(replicas=20, cores=4, read=1)]
    for result in (plan(topo, pools, fleets), baselines.default_scheduler(topo, pools, fleets),
                   baselines.random_placement(topo, pools, fleets, seed=3), spread.plan(topo, pools, fleets)):
        assert set(result.placement.caches["xc"]) == {"a"}, result.planner
        assert set(result.placement.workers["f"]) == {"a"}, result.planner
        assert total_workers(result, "f") == 20, result.planner


def test_with_the_toleration_the_tainted_switch_is_used():
    topo = rack_b_dedicated()
    pools = [pool(tolerations=[TOLERATE_DEDICATED])]
    # More workers than one rack holds: both racks are needed.
    fleets = [fleet(replicas=80, cores=4, read=1, tolerations=[{"key": "dedicated", "operator": "Exists"}])]
    for result in (plan(topo, pools, fleets), baselines.default_scheduler(topo, pools, fleets),
                   spread.plan(topo, pools, fleets)):
        assert set(result.placement.caches["xc"]) == {"a", "b"}, result.planner
        assert set(result.placement.workers["f"]) == {"a", "b"}, result.planner


def test_pool_and_fleet_tolerations_are_their_own():
    # The pool tolerates rack b, the fleet does not: b hosts a cache but no worker.
    topo = rack_b_dedicated()
    result = plan(topo, [pool(tolerations=[TOLERATE_DEDICATED])], [fleet(replicas=40, cores=4, read=1)])
    assert set(result.placement.caches["xc"]) == {"a", "b"}
    assert set(result.placement.workers["f"]) == {"a"}


def test_prefer_no_schedule_does_not_keep_a_pool_off():
    topo = topology([switch("a", 100, tainted(nodes("c", nic=100, nvme=2), {**DEDICATED, "effect": "PreferNoSchedule"}),
                            nodes("w"))])
    assert plan(topo, [pool()], [fleet(replicas=4)]).placement.caches["xc"] == {"a": ("a-c",)}


def test_every_node_tainted_is_unsatisfiable_and_says_so():
    topo = topology([switch("a", 100, tainted(nodes("c", nic=100, nvme=2), DEDICATED), nodes("w"))])
    with pytest.raises(Unsatisfiable) as exc:
        plan(topo, [pool()], [fleet(replicas=4)])
    assert exc.value.reason == "NoEligibleCacheNodes" and "tolerations" in str(exc.value)
    topo = topology([switch("a", 100, tainted(nodes("c", nic=100, nvme=2), DEDICATED), tainted(nodes("w"), DEDICATED))])
    with pytest.raises(Unsatisfiable) as exc:
        plan(topo, [pool(tolerations=[TOLERATE_DEDICATED])], [fleet(replicas=4)])
    assert exc.value.reason == "NoNodeFitsWorker" and "tolerations" in str(exc.value)


def test_live_nodes_bring_their_taints_and_prefer_no_schedule_is_dropped_for_placement():
    body = {"metadata": {"name": "n1", "labels": {"switchyard.dev/switch": "a"}},
            "spec": {"taints": [{"key": "switchyard.dev/real-node", "value": "true", "effect": "NoSchedule"},
                                {"key": "soft", "effect": "PreferNoSchedule"}]},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    info = node_info(body)
    assert [(t.key, t.effect) for t in info.taints] == [("soft", "PreferNoSchedule"),
                                                        ("switchyard.dev/real-node", "NoSchedule")]
    facility = AnalysisFacilitySpec.model_validate({"network": {"switches": [{"name": "a", "uplinkGbps": 10}]}})
    [host] = snapshot([info], facility.network).hosts
    assert [t.key for t in host.taints] == ["switchyard.dev/real-node"]
    assert not host.admits([])
    assert host.admits([Toleration(key="switchyard.dev/real-node", value="true")])


def test_topology_files_take_taints_and_refuse_bad_ones():
    good = {"switches": [{"name": "a", "uplinkGbps": 10, "nodes": [{"name": "c", "taints": [DEDICATED]}]}]}
    [info] = load_topology(good).node_infos()
    assert [t.to_wire() for t in info.taints] == [DEDICATED]
    bad = {"switches": [{"name": "a", "uplinkGbps": 10, "nodes": [{"name": "c", "taints": [{"key": "x"}]}]}]}
    with pytest.raises(ValueError, match=r"taints\[0\]\.effect"):
        load_topology(bad)


# ------------------------------------------------------------------ builders
def test_cache_pods_carry_the_tolerations():
    spec = XCachePoolSpec.model_validate(pool_spec(TOLERATE_DEDICATED, {"operator": "Exists", "effect": "NoExecute"}))
    [sts] = [o for o in build_pool("af-xc", spec, {"a": ["a-c"]}, "switchyard.dev/switch", "img:1")
             if o["kind"] == "StatefulSet"]
    assert sts["spec"]["template"]["spec"]["tolerations"] == [TOLERATE_DEDICATED,
                                                              {"operator": "Exists", "effect": "NoExecute"}]
    plain = XCachePoolSpec.model_validate(pool_spec())
    [sts] = [o for o in build_pool("af-xc", plain, {"a": ["a-c"]}, "switchyard.dev/switch", "img:1")
             if o["kind"] == "StatefulSet"]
    assert "tolerations" not in sts["spec"]["template"]["spec"]


def test_workers_and_the_fleets_scheduler_carry_the_tolerations():
    toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 3,
                                           "dask": {"createScheduler": True}, "tolerations": [toleration]})
    fleet_plan = FleetPlan(facility="af", switch_label="switchyard.dev/switch", workers={"a": 2, "b": 1})
    objs = build_fleet("af-f", "ns", spec, fleet_plan, helper_image="img:1")
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    assert len(deployments) == 3   # the scheduler and one per switch
    for dep in deployments:
        assert dep["spec"]["template"]["spec"]["tolerations"] == [toleration], dep["metadata"]["name"]


def test_minio_pods_carry_the_tolerations():
    spec = S3StagingSpec.model_validate({"embedded": {"servers": 1, "tolerations": [TOLERATE_DEDICATED]},
                                         "buckets": [{"name": "scratch"}]})
    [sts] = [o for o in build_minio("stage", "ns", spec) if o["kind"] == "StatefulSet"]
    assert sts["spec"]["template"]["spec"]["tolerations"] == [TOLERATE_DEDICATED]


def test_packing_puts_no_worker_on_a_node_its_fleet_does_not_tolerate():
    # Node by node (the packing after the model's split, and its leftovers' relocation), a tainted
    # node's room is no room for a fleet that does not tolerate it: the excess is a shortfall.
    from switchyard.planner.packing import pack
    from switchyard.planner.problem import build_problem

    topo = topology([switch("a", 100, nodes("w", cpu=16), tainted(nodes("d", cpu=64), DEDICATED))])
    problem = build_problem(topo, [], [fleet(replicas=10, cores=4, read=1)])
    packing = pack(problem, {}, {(0, 0): 10})
    assert packing.nodes == {"a-w": {"f": 4}}
    assert packing.shortfall == {(0, 0): 6}
