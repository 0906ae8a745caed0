"""Builders: deterministic, owned per switch, pinned to the switch, no shell."""

import json

from switchyard.api import AnalysisFacilitySpec, WorkerFleetSpec, XCachePoolSpec
from switchyard.builders.common import MAX_NAME, PLAN_ANNOTATION, child_name
from switchyard.builders.facility import build_children
from switchyard.builders.workerfleet import build_fleet, worker_command
from switchyard.builders.xcachepool import build_pool
from switchyard.planner import FleetRequest, PoolRequest, plan
from switchyard.topology import TopologyFile, snapshot

TOPO = TopologyFile.model_validate({"switches": [
    {"name": "sw1", "uplinkGbps": 80, "nodes": [{"name": "c", "count": 2, "nvmeDisks": 2, "nicGbps": 50},
                                                 {"name": "w", "count": 2, "cpu": 64}]},
    {"name": "sw2", "uplinkGbps": 40, "nodes": [{"name": "w", "count": 3, "cpu": 64}]},
]})
FACILITY = AnalysisFacilitySpec.model_validate({
    "network": {"switches": [{"name": "sw1", "uplinkGbps": 80}, {"name": "sw2", "uplinkGbps": 40}]},
    "cachePools": [{"name": "xc", "origin": {"host": "origin.example.org"}}],
    "fleets": [{"name": "dask", "replicas": 5, "dask": {"schedulerAddress": "tcp://s.example:8786"}}],
})


def the_plan():
    topology = snapshot(TOPO.node_infos(), FACILITY.network)
    return plan(topology, [PoolRequest(p.name, p) for p in FACILITY.cache_pools],
                [FleetRequest(f.name, f) for f in FACILITY.fleets], FACILITY.routing)


def test_child_names_are_stable_and_bounded():
    assert child_name("af", "xcache", "rack-a") == "af-xcache-rack-a"
    long = child_name("a" * 40, "b" * 40, "c" * 30)
    assert len(long) <= MAX_NAME and long == child_name("a" * 40, "b" * 40, "c" * 30)
    assert long != child_name("a" * 40, "b" * 40, "c" * 29 + "d")


def test_facility_children_carry_their_plan_slice():
    children = build_children("af", FACILITY, the_plan())
    assert [c["kind"] for c in children] == ["XCachePool", "WorkerFleet"]
    pool_plan = json.loads(children[0]["metadata"]["annotations"][PLAN_ANNOTATION])
    assert pool_plan["hosts"] == {"sw1": ["sw1-c-0", "sw1-c-1"]}
    fleet_plan = json.loads(children[1]["metadata"]["annotations"][PLAN_ANNOTATION])
    assert sum(fleet_plan["workers"].values()) == 5 and fleet_plan["pool"] == "af-xc"
    assert children[1]["spec"]["facilityRef"] == {"name": "af"}


def test_pool_is_one_statefulset_per_switch_pinned_to_its_hosts():
    children = build_children("af", FACILITY, the_plan())
    data = json.loads(children[0]["metadata"]["annotations"][PLAN_ANNOTATION])
    spec = XCachePoolSpec.model_validate(children[0]["spec"])
    objs = build_pool("af-xc", spec, data["hosts"], data["switchLabel"], "img:1")
    kinds = [o["kind"] for o in objs]
    assert kinds == ["ConfigMap", "StatefulSet", "Service", "Service", "PodDisruptionBudget"]
    sts = objs[1]
    assert sts["spec"]["replicas"] == 2
    terms = sts["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    exprs = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "switchyard.dev/switch", "operator": "In", "values": ["sw1"]} in exprs
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": ["sw1-c-0", "sw1-c-1"]} in exprs
    assert sts["spec"]["template"]["spec"]["hostNetwork"] is True
    assert build_pool("af-xc", spec, data["hosts"], data["switchLabel"], "img:1") == objs


def test_fleet_deployments_follow_the_plan_and_name_their_cache():
    children = build_children("af", FACILITY, the_plan())
    data = json.loads(children[1]["metadata"]["annotations"][PLAN_ANNOTATION])
    spec = WorkerFleetSpec.model_validate(children[1]["spec"])
    objs = build_fleet("af-dask", "ns", spec, data, data["switchLabel"], helper_image="img:1")
    assert sum(o["spec"]["replicas"] for o in objs) == 5
    for dep in objs:
        switch = dep["metadata"]["labels"]["switchyard.dev/switch"]
        env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["SWITCHYARD_SWITCH"] == switch
        # Only sw1 has caches: its workers read locally, sw2's through the pool Service.
        expected = "root://af-xc-sw1.ns.svc:1094" if switch == "sw1" else "root://af-xc.ns.svc:1094"
        assert env["SWITCHYARD_CACHE_ENDPOINT"] == expected


def test_cache_pod_prepares_its_directories_and_mounts_token_auth():
    spec = XCachePoolSpec.model_validate({
        "facilityRef": {"name": "af"}, "origin": {"host": "origin.example.org"},
        "storage": {"dataPaths": ["/mnt/a", "/mnt/b"], "metaPath": "/mnt/meta"},
        "auth": {"mode": "scitokens", "issuers": ["https://issuer.example.org"], "tlsSecret": "xcache-tls"}})
    objs = build_pool("p", spec, {"sw1": ["n1"]}, "switchyard.dev/switch", "img:1")
    config, sts = objs[0], objs[1]
    assert set(config["data"]) == {"xcache.cfg", "scitokens.cfg"}
    pod = sts["spec"]["template"]["spec"]
    prepare = pod["initContainers"][0]
    assert prepare["command"][:6] == ["install", "-d", "-o", "xrootd", "-g", "xrootd"]
    assert prepare["command"][6:] == ["/mnt/meta/namespace", "/mnt/a", "/mnt/b"]
    xrootd, exporter = pod["containers"]
    mounts = {m["mountPath"]: m for m in xrootd["volumeMounts"]}
    assert mounts["/etc/grid-security/xrd"]["name"] == "tls"
    assert mounts["/etc/xrootd/switchyard/scitokens.cfg"]["subPath"] == "scitokens.cfg"
    assert {"secret": {"secretName": "xcache-tls", "defaultMode": 0o400}, "name": "tls"} in pod["volumes"]
    assert exporter["args"][0] == "exporter" and "--data-path" in exporter["args"]
    assert all(m["readOnly"] for m in exporter["volumeMounts"])
    assert xrootd["readinessProbe"]["exec"]["command"][:2] == ["xrdfs", "localhost:1094"]
