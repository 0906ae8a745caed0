"""Builders: deterministic, owned per switch, pinned to the switch, no shell."""

import json

from switchyard.api import AnalysisFacilitySpec, WorkerFleetSpec, XCachePoolSpec
from switchyard.api.plans import FleetPlan, PoolPlan
from switchyard.builders.common import MAX_NAME, child_name
from switchyard.builders.facility import build_children
from switchyard.builders.workerfleet import build_fleet, worker_command
from switchyard.builders.xcachepool import build_pool
from switchyard.observe.cachedisk import PREPARE_CONTAINER
from switchyard.desired.facility import inline_plans
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
    children = build_children("af", FACILITY, *inline_plans("af", FACILITY, the_plan()))
    assert [c["kind"] for c in children] == ["XCachePool", "WorkerFleet"]
    pool_plan = PoolPlan.model_validate(children[0]["status"]["plan"])
    assert pool_plan.hosts == {"sw1": ["sw1-c-0", "sw1-c-1"]} and pool_plan.facility == "af"
    fleet_plan = FleetPlan.model_validate(children[1]["status"]["plan"])
    assert sum(fleet_plan.workers.values()) == 5 and fleet_plan.pool == "af-xc"
    # the plan never travels in user-writable metadata
    assert all("annotations" not in c["metadata"] for c in children)
    assert children[1]["spec"]["facilityRef"] == {"name": "af"}


def test_pool_is_one_statefulset_per_switch_pinned_to_its_hosts():
    children = build_children("af", FACILITY, *inline_plans("af", FACILITY, the_plan()))
    data = children[0]["status"]["plan"]
    spec = XCachePoolSpec.model_validate(children[0]["spec"])
    objs = build_pool("af-xc", spec, data["hosts"], data["switchLabel"], "img:1")
    kinds = [o["kind"] for o in objs]
    # Applied in this order: what the pods mount and the Service a StatefulSet's serviceName names come first.
    assert kinds == ["ConfigMap", "ConfigMap", "Service", "StatefulSet", "Service", "PodDisruptionBudget"]
    sts = objs[3]
    assert objs[2]["metadata"]["name"] == sts["spec"]["serviceName"]
    assert sts["spec"]["replicas"] == 2
    terms = sts["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    exprs = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "switchyard.dev/switch", "operator": "In", "values": ["sw1"]} in exprs
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": ["sw1-c-0", "sw1-c-1"]} in exprs
    assert sts["spec"]["template"]["spec"]["hostNetwork"] is True
    assert build_pool("af-xc", spec, data["hosts"], data["switchLabel"], "img:1") == objs


def test_fleet_deployments_follow_the_plan_and_name_their_cache():
    children = build_children("af", FACILITY, *inline_plans("af", FACILITY, the_plan()))
    data = FleetPlan.model_validate(children[1]["status"]["plan"])
    spec = WorkerFleetSpec.model_validate(children[1]["spec"])
    objs = build_fleet("af-dask", "ns", spec, data, helper_image="img:1")
    assert sum(o["spec"]["replicas"] for o in objs) == 5
    for dep in objs:
        switch = dep["metadata"]["labels"]["switchyard.dev/switch"]
        env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["SWITCHYARD_SWITCH"] == switch
        # Only sw1 has caches: its workers read locally, sw2's through the pool Service.
        expected = "root://af-xc-sw1.ns.svc:1094" if switch == "sw1" else "root://af-xc.ns.svc:1094"
        assert env["SWITCHYARD_CACHE_ENDPOINT"] == expected


def quantity(text: str) -> float:
    """A Kubernetes quantity as a number (the suffixes these builders write)."""
    for suffix, factor in (("m", 1e-3), ("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def test_worker_pods_are_guaranteed_qos_with_the_jitter_init_container():
    # Every container, the init containers too, with CPU and memory limits equal to its requests:
    # otherwise the kubelet puts the workers in the Burstable class, first to be evicted.
    children = build_children("af", FACILITY, *inline_plans("af", FACILITY, the_plan()))
    spec = WorkerFleetSpec.model_validate({**children[1]["spec"], "rampUp": {"jitterSeconds": 30}})
    objs = build_fleet("af-dask", "ns", spec, FleetPlan.model_validate(children[1]["status"]["plan"]), helper_image="img:1")
    for dep in objs:
        pod = dep["spec"]["template"]["spec"]
        assert [c["name"] for c in pod["initContainers"]] == ["jitter", "routing-copy", "routing-check"]
        # no init container asks for more than the worker: the pod's request stays the worker's
        worker = pod["containers"][0]["resources"]["requests"]
        for c in pod["initContainers"]:
            for key in ("cpu", "memory"):
                assert quantity(c["resources"]["requests"][key]) <= quantity(worker[key]), (c["name"], key)
        for c in pod["initContainers"] + pod["containers"]:
            res = c["resources"]
            assert {k: res["limits"].get(k) for k in ("cpu", "memory")} == \
                {k: res["requests"].get(k) for k in ("cpu", "memory")}, (c["name"], res)
            assert res["limits"].get("cpu") and res["limits"].get("memory"), (c["name"], res)


def test_cache_pod_prepares_its_directories_and_mounts_token_auth():
    spec = XCachePoolSpec.model_validate({
        "facilityRef": {"name": "af"}, "origin": {"host": "origin.example.org"},
        "storage": {"dataPaths": ["/mnt/a", "/mnt/b"], "metaPath": "/mnt/meta"},
        "auth": {"mode": "scitokens", "issuers": ["https://issuer.example.org"], "tlsSecret": "xcache-tls"}})
    objs = build_pool("p", spec, {"sw1": ["n1"]}, "switchyard.dev/switch", "img:1")
    config, sts = objs[0], next(o for o in objs if o["kind"] == "StatefulSet")
    assert set(config["data"]) == {"xcache.cfg", "scitokens.cfg"}
    pod = sts["spec"]["template"]["spec"]
    prepare = pod["initContainers"][0]
    assert prepare["args"][:5] == ["prepare-cache", "--uid", "10940", "--gid", "10940"]
    assert [p for f, p in zip(prepare["args"][5::2], prepare["args"][6::2]) if f == "--dir"] == \
        ["/mnt/meta/namespace", "/mnt/meta/meta", "/mnt/a", "/mnt/b"]
    xrootd, exporter = pod["containers"]
    mounts = {m["mountPath"]: m for m in xrootd["volumeMounts"]}
    assert mounts["/etc/grid-security/xrd"]["name"] == "tls"
    assert mounts["/etc/xrootd/switchyard/scitokens.cfg"]["subPath"] == "scitokens.cfg"
    assert {"secret": {"secretName": "xcache-tls", "defaultMode": 0o400}, "name": "tls"} in pod["volumes"]
    assert exporter["args"][0] == "exporter" and "--data-path" in exporter["args"]
    assert all(m["readOnly"] for m in exporter["volumeMounts"])
    assert xrootd["readinessProbe"]["exec"]["command"][:2] == ["xrdfs", "localhost:1094"]


def test_a_switch_with_local_and_ring_readers_of_one_fleet_gets_a_deployment_for_each():
    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 14,
                                           "dask": {"schedulerAddress": "tcp://s.example:8786"}})
    # sw1: 7 local readers and 3 on the ring (its caches are full); sw2 has no cache: all ring;
    # sw3 has a cache and only local readers of this fleet, though another fleet's ring readers
    # make the switch "hashed".
    data = FleetPlan.model_validate({"facility": "af", "switchLabel": "switchyard.dev/switch", "workers": {"sw1": 10, "sw2": 2, "sw3": 2},
            "hashed": {"sw1": 3, "sw2": 2}, "pool": "af-xc", "poolPort": 1094, "cacheSwitches": ["sw1", "sw3"],
            "routing": {"sw1": "hashed", "sw2": "hashed", "sw3": "hashed"}, "cacheRing": {"sw1-c-0": 0.5, "sw3-c-0": 0.5}})
    objs = build_fleet("af-dask", "ns", spec, data, helper_image="img:1")
    by_name = {o["metadata"]["name"]: o for o in objs}
    assert sorted(by_name) == ["af-dask-sw1-local", "af-dask-sw1-ring", "af-dask-sw2", "af-dask-sw3"]

    def env(name):
        return {e["name"]: e.get("value") for e in by_name[name]["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert by_name["af-dask-sw1-local"]["spec"]["replicas"] == 7
    assert env("af-dask-sw1-local")["SWITCHYARD_CACHE_ENDPOINT"] == "root://af-xc-sw1.ns.svc:1094"
    assert env("af-dask-sw1-local")["SWITCHYARD_ROUTING"] == "local"
    assert "SWITCHYARD_CACHE_RING_FILE" not in env("af-dask-sw1-local")
    assert by_name["af-dask-sw1-ring"]["spec"]["replicas"] == 3
    assert env("af-dask-sw1-ring")["SWITCHYARD_ROUTING"] == "hashed"
    assert env("af-dask-sw1-ring")["SWITCHYARD_CACHE_RING_FILE"] == "/etc/switchyard/routing/ring"
    assert env("af-dask-sw2")["SWITCHYARD_ROUTING"] == "hashed"
    assert env("af-dask-sw3")["SWITCHYARD_CACHE_ENDPOINT"] == "root://af-xc-sw3.ns.svc:1094"
    assert env("af-dask-sw3")["SWITCHYARD_ROUTING"] == "local"
    # the two Deployments of sw1 select disjoint pods
    local_sel = by_name["af-dask-sw1-local"]["spec"]["selector"]["matchLabels"]
    ring_sel = by_name["af-dask-sw1-ring"]["spec"]["selector"]["matchLabels"]
    assert local_sel["switchyard.dev/routing"] != ring_sel["switchyard.dev/routing"]
    for dep in (by_name["af-dask-sw1-local"], by_name["af-dask-sw1-ring"]):
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert all(pod_labels[k] == v for k, v in dep["spec"]["selector"]["matchLabels"].items())
    # a ramp in progress grows both in proportion
    ramp = build_fleet("af-dask", "ns", spec, data, helper_image="img:1",
                       counts={"sw1": 5, "sw2": 0, "sw3": 1})
    counts = {o["metadata"]["name"]: o["spec"]["replicas"] for o in ramp if o["kind"] == "Deployment"}
    assert counts["af-dask-sw1-local"] + counts["af-dask-sw1-ring"] == 5
    assert counts["af-dask-sw1-local"] == 3


def test_planned_split_switches_are_realised_with_the_planned_counts():
    children = build_children("af", FACILITY, *inline_plans("af", FACILITY, the_plan()))
    data = FleetPlan.model_validate(children[1]["status"]["plan"])
    spec = WorkerFleetSpec.model_validate(children[1]["spec"])
    objs = build_fleet("af-dask", "ns", spec, data, helper_image="img:1")
    ring = {}
    for dep in objs:
        env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        switch = dep["metadata"]["labels"]["switchyard.dev/switch"]
        if env["SWITCHYARD_ROUTING"] == "hashed":
            ring[switch] = ring.get(switch, 0) + dep["spec"]["replicas"]
    expected = {sw: (n if sw not in data.cache_switches else min(n, data.hashed.get(sw, 0)))
                for sw, n in data.workers.items()}
    assert ring == {sw: n for sw, n in expected.items() if n}


def cache_pod(spec_patch: dict | None = None) -> dict:
    """The pod template of a cache host, for a pool with two data disks."""
    spec = XCachePoolSpec.model_validate({
        "facilityRef": {"name": "af"}, "origin": {"host": "origin.example.org"},
        "storage": {"dataPaths": ["/mnt/nvme0", "/mnt/nvme1"], "metaPath": "/mnt/meta"}, **(spec_patch or {})})
    sts = next(o for o in build_pool("af-xc", spec, {"sw1": ["n1"]}, "switchyard.dev/switch", "op:1")
               if o["kind"] == "StatefulSet")
    return sts["spec"]["template"]["spec"]


def containers(pod: dict) -> dict[str, dict]:
    return {c["name"]: c for c in [*pod["initContainers"], *pod["containers"]]}


def test_cache_pod_least_privilege():
    pod = cache_pod()
    assert pod["automountServiceAccountToken"] is False
    # Host networking and host paths stay (docs/admin-guide.md: why); nothing else of the host.
    assert pod["hostNetwork"] is True and not any(pod.get(k) for k in ("hostPID", "hostIPC"))
    by_name = containers(pod)
    assert sorted(by_name) == ["exporter", "prepare", "xrootd"]
    for name, c in by_name.items():
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and not sc.get("privileged"), name
        assert sc["capabilities"]["drop"] == ["ALL"], name
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert "runAsGroup" in sc and "runAsUser" in sc, name
    # xrootd: OSG's xrootd user by default, no capability; prepare: root with CHOWN alone; exporter: 65532.
    xrootd, prepare, exporter = (by_name[n]["securityContext"] for n in ("xrootd", "prepare", "exporter"))
    assert (xrootd["runAsUser"], xrootd["runAsGroup"], xrootd["runAsNonRoot"]) == (10940, 10940, True)
    assert "add" not in xrootd["capabilities"] and by_name["xrootd"]["command"] == ["xrootd"]
    assert "-R" not in by_name["xrootd"]["args"]
    assert prepare["capabilities"]["add"] == ["CHOWN"] and (prepare["runAsUser"], prepare["runAsGroup"]) == (0, 0)
    assert prepare["readOnlyRootFilesystem"] is True
    assert (exporter["runAsUser"], exporter["runAsGroup"], exporter["readOnlyRootFilesystem"]) == (65532, 65532, True)
    assert "add" not in exporter["capabilities"]


def test_cache_pod_shares_its_process_namespace_so_sigterm_ends_xrootd():
    """xrootd sets no SIGTERM handler, so as its container's PID 1 it ignored SIGTERM (seen: run as PID 1 of a
    PID namespace it outlived `kill -TERM`; as any other process it died of it) and a deleted cache pod held
    its node for the whole grace period. Under the pod's pause process it is not PID 1. The running
    containers have distinct users, so seeing each other's processes lets none read another's memory,
    environment or root through /proc."""
    pod = cache_pod()
    assert pod["shareProcessNamespace"] is True and pod["terminationGracePeriodSeconds"] == 60
    users = [c["securityContext"]["runAsUser"] for c in pod["containers"]]
    assert len(set(users)) == len(users) and 0 not in users


def test_cache_pod_runs_xrootd_as_the_pools_xrootd_user():
    pod = cache_pod({"xrootdUser": {"uid": 1094, "gid": 2000}})
    by_name = containers(pod)
    sc = by_name["xrootd"]["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"]) == (1094, 2000)
    args = by_name["prepare"]["args"]
    assert args[:5] == ["prepare-cache", "--uid", "1094", "--gid", "2000"]


def test_cache_prepare_step_checks_every_disk_and_makes_xrootds_directories():
    pod = cache_pod()
    prepare = containers(pod)["prepare"]
    assert prepare["name"] == PREPARE_CONTAINER  # the container whose report the operator reads
    assert prepare["image"] == "op:1" and "command" not in prepare  # the operator image's entrypoint: switchyard
    args = prepare["args"]
    pairs = list(zip(args[5::2], args[6::2]))
    assert [p for f, p in pairs if f == "--disk"] == ["/mnt/meta", "/mnt/nvme0", "/mnt/nvme1"]
    assert [p for f, p in pairs if f == "--dir"] == ["/mnt/meta/namespace", "/mnt/meta/meta", "/mnt/nvme0", "/mnt/nvme1"]
    assert "--allow-root-disk" not in args
    assert sorted(m["mountPath"] for m in prepare["volumeMounts"]) == ["/mnt/meta", "/mnt/nvme0", "/mnt/nvme1"]
    # The kubelet creates no missing disk path on the root disk.
    assert {v["hostPath"]["type"] for v in pod["volumes"] if "hostPath" in v} == {"Directory"}


def test_cache_on_the_root_disk_on_purpose():
    pod = cache_pod({"storage": {"dataPaths": ["/mnt/nvme0"], "allowRootDisk": True}})
    assert containers(pod)["prepare"]["args"][-1] == "--allow-root-disk"
    assert {v["hostPath"]["type"] for v in pod["volumes"] if "hostPath" in v} == {"DirectoryOrCreate"}


def test_cache_pdb_lets_a_drain_evict_unhealthy_caches():
    spec = XCachePoolSpec.model_validate({"facilityRef": {"name": "af"}, "origin": {"host": "o.example.org"}})
    pdb = next(o for o in build_pool("af-xc", spec, {"sw1": ["n1"]}, "switchyard.dev/switch", "op:1")
               if o["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" and pdb["spec"]["maxUnavailable"] == 1


def test_xrootd_user_bounds():
    import pydantic
    import pytest

    base = {"facilityRef": {"name": "af"}, "origin": {"host": "o.example.org"}}
    assert XCachePoolSpec.model_validate(base).xrootd_user.uid == 10940
    for bad in ({"uid": 0}, {"gid": 0}, {"uid": 2**31}, {"uid": -1}):
        with pytest.raises(pydantic.ValidationError):
            XCachePoolSpec.model_validate({**base, "xrootdUser": bad})
    # the exporter's uid: the pod's containers share one process namespace
    with pytest.raises(pydantic.ValidationError, match="uid 65532 is the cache pod's exporter's"):
        XCachePoolSpec.model_validate({**base, "xrootdUser": {"uid": 65532, "gid": 1094}})
    assert XCachePoolSpec.model_validate({**base, "xrootdUser": {"uid": 1094, "gid": 65532}})


def test_a_re_plan_that_only_changes_the_ring_changes_the_configmap_not_the_deployments():
    """Caches lost, added or reweighted (and a switch gaining its first cache) reach ring readers through
    the fleet's routing ConfigMap: the Deployments stay byte for byte, so no worker restarts."""
    from switchyard.builders.workerfleet import ROUTING_DIR, build_routing_config

    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 14,
                                           "dask": {"schedulerAddress": "tcp://s.example:8786"}})
    base = {"facility": "af", "workers": {"sw1": 10, "sw2": 2, "sw3": 2}, "hashed": {"sw1": 3, "sw2": 2},
            "pool": "af-xc", "cacheSwitches": ["sw1", "sw3"], "routing": {"sw1": "hashed", "sw2": "hashed"}}
    rings = [({"sw1-c-0": 0.5, "sw1-c-1": 0.25, "sw3-c-0": 0.5}, ["sw1", "sw3"]),
             ({"sw1-c-0": 0.5, "sw3-c-0": 1.5}, ["sw1", "sw3"]),                     # one lost, one reweighted
             ({"sw1-c-0": 0.5, "sw3-c-0": 1.5, "sw4-c-0": 1.0}, ["sw1", "sw3", "sw4"])]  # one added, a new switch
    addresses = {"sw1-c-0": "10.0.1.5", "sw1-c-1": "10.0.1.6", "sw3-c-0": "10.0.3.5", "sw4-c-0": "10.0.4.5"}
    deployments, configs = [], []
    for ring, switches in rings:
        plan = FleetPlan.model_validate({**base, "cacheRing": ring, "cacheSwitches": switches})
        deployments.append(json.dumps(build_fleet("af-dask", "ns", spec, plan, helper_image="img:1"), sort_keys=True))
        configs.append(build_routing_config("af-dask", plan, addresses))
    assert deployments[0] == deployments[1] == deployments[2]
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == 3
    assert configs[1]["data"]["ring"].splitlines()[1:] == ["sw1-c-0@root://10.0.1.5:1094=0.5",
                                                           "sw3-c-0@root://10.0.3.5:1094=1.5"]
    assert {c["metadata"]["name"] for c in configs} == {"af-dask-routing"}
    # every worker mounts the ConfigMap as a directory (no subPath: the kubelet refreshes it)
    for dep in json.loads(deployments[0]):
        pod = dep["spec"]["template"]["spec"]
        assert {"name": "routing", "configMap": {"name": "af-dask-routing"}} in pod["volumes"]
        assert {"name": "routing", "mountPath": ROUTING_DIR, "readOnly": True} in pod["containers"][0]["volumeMounts"]
    # neither the ring nor an address is in the template
    assert "SWITCHYARD_CACHE_RING\"" not in deployments[0] and "10.0.1.5" not in deployments[0]


def test_the_hot_list_is_a_key_of_its_own_only_while_the_pool_lists_hot_files():
    """No hot file: the ConfigMap of before hot files existed, byte for byte (nothing running changes)."""
    from switchyard.builders.workerfleet import build_routing_config

    plan = FleetPlan.model_validate({"facility": "af", "workers": {"sw1": 2}, "pool": "af-xc", "cacheSwitches": ["sw1"],
                                     "routing": {"sw1": "hashed"}, "hashed": {"sw1": 2},
                                     "cacheRing": {"sw1-c-0": 1.0, "sw1-c-1": 1.0}})
    addresses = {"sw1-c-0": "10.0.1.5", "sw1-c-1": "10.0.1.6"}
    today = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": build_routing_config("f", plan, addresses)["metadata"],
             "data": {"ring": "# rendezvous-sha256-v1 ring of XCachePool af-xc: node@root://address:port=weight, one "
                              "per line\nsw1-c-0@root://10.0.1.5:1094=1\nsw1-c-1@root://10.0.1.6:1094=1\n",
                      "switches": "sw1\n"}}
    assert json.dumps(build_routing_config("f", plan, addresses), sort_keys=True) == json.dumps(today, sort_keys=True)
    assert build_routing_config("f", plan, addresses, ()) == today
    hot = build_routing_config("f", plan, addresses, [{"path": "/store/z.root", "replicas": 2},
                                                      {"path": "/store/a.root", "replicas": 3},
                                                      {"path": "/store/z.root", "replicas": 5}])
    assert {k: v for k, v in hot["data"].items() if k != "hot"} == today["data"]
    lines = hot["data"]["hot"].splitlines()
    assert lines[0].startswith("# rendezvous-sha256-v1 hot files of XCachePool af-xc: replicas path, one per line")
    assert lines[1:] == ["3 /store/a.root", "5 /store/z.root"]  # by path; a path listed twice: its most replicas


def test_a_fleet_without_a_pool_gets_no_routing_configmap_nor_mount():
    from switchyard.builders.workerfleet import build_routing_config

    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 2,
                                           "dask": {"schedulerAddress": "tcp://s.example:8786"}})
    plan = FleetPlan.model_validate({"facility": "af", "workers": {"sw1": 2}})
    assert build_routing_config("f", plan, {}) is None
    (dep,) = build_fleet("f", "ns", spec, plan, helper_image="img:1")
    assert "volumes" not in dep["spec"]["template"]["spec"]


def routed_fleet(env=(), engine=None, jitter=0):
    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 2, "cores": 2, "memoryGiB": 3,
                                           "image": "ghcr.io/site/coffea-dask:2026.3", "env": list(env),
                                           "rampUp": {"jitterSeconds": jitter},
                                           **(engine or {"dask": {"schedulerAddress": "tcp://s.example:8786"}})})
    plan = FleetPlan.model_validate({"facility": "af", "workers": {"sw1": 2}, "pool": "af-xc",
                                     "cacheSwitches": ["sw1"], "routing": {"sw1": "local"}})
    (dep,) = build_fleet("f", "ns", spec, plan, helper_image="op:1")
    return dep["spec"]["template"]["spec"]


def test_workers_of_a_pool_get_the_routing_client_copied_from_the_operator_image_and_checked_in_their_own():
    from switchyard.builders.workerfleet import ROUTING_CLIENT_DIR

    pod = routed_fleet()
    copy, check = pod["initContainers"]
    worker = pod["containers"][0]
    # the copy: the operator's image, an argument list (no shell) writing into the emptyDir
    assert copy["image"] == "op:1" and copy["args"] == ["copy-routing", ROUTING_CLIENT_DIR] and "command" not in copy
    assert copy["volumeMounts"] == [{"name": "routing-client", "mountPath": ROUTING_CLIENT_DIR}]
    # the check: the worker's image and user, the copy read-only on its PYTHONPATH, its verdict as its message
    assert check["image"] == worker["image"] == "ghcr.io/site/coffea-dask:2026.3"
    assert check["command"] == ["python3", "-m", "switchyard.routing.check"] and "args" not in check
    assert check["volumeMounts"] == [{"name": "routing-client", "mountPath": ROUTING_CLIENT_DIR, "readOnly": True}]
    assert {"name": "PYTHONPATH", "value": ROUTING_CLIENT_DIR} in check["env"]
    assert check["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert check["securityContext"]["runAsUser"] == worker["securityContext"]["runAsUser"]
    for c in (copy, check):
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["resources"]["requests"] == c["resources"]["limits"]
    # the check runs with the worker's cpu and memory (the pod asks no more), the copy with a little
    assert {k: check["resources"]["requests"][k] for k in ("cpu", "memory")} == worker["resources"]["requests"]
    assert copy["resources"]["requests"]["cpu"] == "100m"
    # the worker: the copy first on PYTHONPATH, mounted read-only, the preload as before
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env["PYTHONPATH"] == ROUTING_CLIENT_DIR
    assert {"name": "routing-client", "mountPath": ROUTING_CLIENT_DIR, "readOnly": True} in worker["volumeMounts"]
    assert {"name": "routing-client", "emptyDir": {"sizeLimit": "16Mi"}} in pod["volumes"]
    assert "--preload" in worker["args"]


def test_a_fleets_own_pythonpath_follows_the_routing_client_and_is_set_once():
    from switchyard.builders.workerfleet import ROUTING_CLIENT_DIR

    pod = routed_fleet(env=[{"name": "PYTHONPATH", "value": "/srv/analysis"}, {"name": "X509_CERT_DIR", "value": "/c"}])
    for container in (pod["containers"][0], pod["initContainers"][1]):
        names = [e["name"] for e in container["env"]]
        assert names.count("PYTHONPATH") == 1 and "X509_CERT_DIR" in names, container["name"]
        assert {"name": "PYTHONPATH", "value": f"{ROUTING_CLIENT_DIR}:/srv/analysis"} in container["env"]


def test_routing_containers_come_after_the_jitter_and_taskvine_workers_get_them_too():
    pod = routed_fleet(jitter=10)
    assert [c["name"] for c in pod["initContainers"]] == ["jitter", "routing-copy", "routing-check"]
    vine = routed_fleet(engine={"taskvine": {"managerHost": "manager.example", "managerPort": 9123}})
    assert [c["name"] for c in vine["initContainers"]] == ["routing-copy", "routing-check"]
    env = {e["name"]: e.get("value") for e in vine["containers"][0]["env"]}
    assert env["PYTHONPATH"] == "/opt/switchyard-routing" and "--preload" not in vine["containers"][0]["args"]


def test_a_fleet_without_a_pool_gets_no_routing_client():
    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 2,
                                           "env": [{"name": "PYTHONPATH", "value": "/srv/a"}],
                                           "dask": {"schedulerAddress": "tcp://s.example:8786"}})
    (dep,) = build_fleet("f", "ns", spec, FleetPlan.model_validate({"facility": "af", "workers": {"sw1": 2}}),
                         helper_image="img:1")
    pod = dep["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["jitter"] and "volumes" not in pod
    assert {"name": "PYTHONPATH", "value": "/srv/a"} in pod["containers"][0]["env"]
