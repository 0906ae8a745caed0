"""Hostile input, by class, against the live cluster and a running operator.

Each class: host paths, another facility's objects, forged plans, crashes and
silence, one team's object against the shared facility, values the consumer
would refuse, harmful updates, and the scheduler pod that must survive a
resync. Every case ends refused at the API, or answered with a reason;
nothing running is harmed, and the operator's log holds no traceback.
"""

from __future__ import annotations

import copy
import time

import pytest

import localcluster
from facilities import facility
from support import CLUSTER_NAME, condition, ready_condition, wait_for, wait_ready
from switchyard.apply import ApiError

pytestmark = pytest.mark.e2e


def in_ns(obj: dict, ns: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = ns
    return obj


def create(kube, obj: dict) -> dict:
    """POST as kubectl create does, with strict field validation."""
    from switchyard.apply import RESOURCES
    res = RESOURCES[obj["kind"]]
    return kube.request("POST", res.path(obj["metadata"]["namespace"]), obj, query={"fieldValidation": "Strict"})


def refused(kube, obj: dict) -> str:
    """The API server's refusal message for `obj` (the test fails if it is accepted)."""
    try:
        create(kube, obj)
    except ApiError as exc:
        assert exc.status == 422, exc
        return exc.message
    raise AssertionError(f"accepted: {obj['metadata']['name']}")


def answered(kube, ns: str, kind: str, name: str, reason: str, timeout: float = 90) -> dict:
    def check():
        obj = kube.get(kind, ns, name)
        cond = ready_condition(obj) if obj and obj.get("status") else {}
        if cond.get("status") == "False" and cond.get("reason") == reason \
                and cond.get("observedGeneration") == obj["metadata"]["generation"]:
            return cond
        return None
    return wait_for(check, timeout=timeout, what=f"{kind} {name} Ready=False {reason}")


def snapshot(kube, ns: str, prefix: str) -> dict:
    """UID and generation (or data) of every object whose name starts with `prefix`."""
    out = {}
    for kind in ("XCachePool", "WorkerFleet", "StatefulSet", "Deployment", "PodDisruptionBudget"):
        for o in kube.list(kind, ns):
            if o["metadata"]["name"].startswith(prefix):
                out[f"{kind}/{o['metadata']['name']}"] = (o["metadata"]["uid"], o["metadata"]["generation"])
    for kind in ("ConfigMap", "Service"):
        for o in kube.list(kind, ns):
            if o["metadata"]["name"].startswith(prefix):
                out[f"{kind}/{o['metadata']['name']}"] = (o["metadata"]["uid"], o.get("data"), (o.get("spec") or {}).get("ports"))
    return out


def with_storage(name: str, data_paths: list[str], meta_path: str = "/mnt/xcache-meta") -> dict:
    obj = facility(name, workers=2)
    obj["spec"]["cachePools"][0]["storage"] = {"dataPaths": data_paths, "metaPath": meta_path}
    return obj


# ------------------------------------------------------------------ 1. host paths
ALIASING_PATHS = ["/mnt/../etc", "//etc", "/mnt/nvme0/.", "/mnt/nvme0/", "/mnt/./nvme0", "/mnt//nvme0",
                  "/mnt/.hidden", "/../proc", "/root/.ssh"]
OUTSIDE_ALLOWLIST = ["/etc", "/proc", "/var/run", "/var/lib/kubelet/pods", "/mnt", "/mntx/evil", "/root/ssh",
                     "/dev", "/sys/fs/cgroup"]


def test_host_paths_are_refused_or_answered_and_nothing_is_rendered(cluster, operator, namespace):
    kube = cluster.kube
    for i, path in enumerate(ALIASING_PATHS):
        message = refused(kube, in_ns(with_storage(f"alias-{i}", [path]), namespace))
        assert "dataPaths" in message, message
    # Paths nested in one another alias the same disk.
    assert "inside" in refused(kube, in_ns(with_storage("nest-a", ["/mnt/a", "/mnt/a/b"]), namespace))
    assert "inside" in refused(kube, in_ns(with_storage("nest-b", ["/mnt/meta/x"], "/mnt/meta"), namespace))
    # Well-formed paths outside the admin's allowlist: Ready=False, nothing rendered.
    for i, path in enumerate(OUTSIDE_ALLOWLIST):
        create(kube, in_ns(with_storage(f"outside-{i}", [path], "/srv/xcache-meta"), namespace))
        cond = answered(kube, namespace, "AnalysisFacility", f"outside-{i}", "HostPathNotAllowed")
        assert path in cond["message"]
    assert not [c for c in kube.list("ConfigMap", namespace) if c["metadata"]["name"].startswith("outside-")]
    assert not kube.list("XCachePool", namespace)


def test_a_bad_update_leaves_the_running_facility_exactly_as_it_was(cluster, operator, namespace):
    kube = cluster.kube
    kube.apply(in_ns(facility("run", workers=3), namespace))
    wait_ready(cluster, namespace, "run")
    before = snapshot(kube, namespace, "run-")
    assert any(k.startswith("ConfigMap/") for k in before)
    updates = [
        ("HostPathNotAllowed", lambda s: s["cachePools"][0]["storage"].update(dataPaths=["/etc"])),
        ("HostPathNotAllowed", lambda s: s["cachePools"][0]["storage"].update(metaPath="/var/lib/kubelet/pods")),
        ("InvalidSpec", lambda s: s["cachePools"][0]["origin"].update(host="ab:1094:")),
    ]
    for reason, mutate in updates:
        obj = kube.get("AnalysisFacility", namespace, "run")
        mutate(obj["spec"])
        kube.request("PUT", f"/apis/switchyard.dev/v1alpha1/namespaces/{namespace}/analysisfacilities/run", obj)
        answered(kube, namespace, "AnalysisFacility", "run", reason)
        assert snapshot(kube, namespace, "run-") == before, reason
    # A pool's own update to /etc (an admin editing the child) is refused the same way.
    pool = kube.get("XCachePool", namespace, "run-xcache")
    pool["spec"]["storage"]["dataPaths"] = ["/proc"]
    kube.request("PUT", f"/apis/switchyard.dev/v1alpha1/namespaces/{namespace}/xcachepools/run-xcache", pool)
    time.sleep(4)  # the facility re-applies its own spec; neither write renders /proc
    for cm in kube.list("ConfigMap", namespace):
        assert "/proc" not in str(cm.get("data")), cm["metadata"]["name"]


# ------------------------------------------------------------------ 2. objects of another facility
def test_a_facility_never_takes_over_another_facilitys_children(cluster, operator, namespace):
    kube = cluster.kube
    first = facility("a-b", workers=2)
    first["spec"]["cachePools"][0]["name"] = "c"
    first["spec"]["fleets"][0]["pool"] = "c"
    kube.apply(in_ns(first, namespace))
    wait_ready(cluster, namespace, "a-b")
    before = snapshot(kube, namespace, "a-b-c")
    assert "Service/a-b-c" in before
    # 'a' + 'b-c' names the same XCachePool 'a-b-c'.
    second = facility("a", workers=2)
    second["spec"]["cachePools"][0]["name"] = "b-c"
    second["spec"]["fleets"][0]["pool"] = "b-c"
    kube.apply(in_ns(second, namespace))
    cond = answered(kube, namespace, "AnalysisFacility", "a", "ChildNameTaken")
    assert "a-b-c" in cond["message"]
    time.sleep(6)  # a few reconciles of both
    assert snapshot(kube, namespace, "a-b-c") == before
    assert ready_condition(kube.get("AnalysisFacility", namespace, "a-b"))["status"] == "True"
    # An object nobody owns is not taken either, and never pruned.
    kube.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mine-xcache", "namespace": namespace,
                "labels": {"switchyard.dev/owner-uid": "forged"}},
                "spec": {"ports": [{"port": 1}], "selector": {"app": "mine"}}})
    kube.apply(in_ns(facility("mine", workers=1), namespace))
    answered(kube, namespace, "XCachePool", "mine-xcache", "ChildNameTaken")
    assert kube.get("Service", namespace, "mine-xcache")["spec"]["ports"][0]["port"] == 1


# ------------------------------------------------------------------ 3. forged placement
def test_a_user_cannot_steer_placement_or_crash_a_child_through_its_plan(cluster, operator, namespace):
    kube = cluster.kube
    kube.apply(in_ns(facility("pl", workers=4), namespace))
    wait_ready(cluster, namespace, "pl")
    before = snapshot(kube, namespace, "pl-")
    forged = {"facility": "pl", "switchLabel": "kubernetes.io/hostname", "hosts": {"rack-a": ["victim"]}}
    # The old channel, an annotation, is ignored; status sent with the object is dropped by the API server.
    for kind, name in (("XCachePool", "pl-xcache"), ("WorkerFleet", "pl-dask")):
        kube.annotate(kind, namespace, name, {"switchyard.dev/plan": '{"hosts": {"rack-a": ["victim"]}, "switchLabel": 1}'})
        obj = kube.get(kind, namespace, name)
        obj["status"] = {**obj.get("status", {}), "plan": forged}
        kube.request("PUT", f"/apis/switchyard.dev/v1alpha1/namespaces/{namespace}/{kind.lower()}s/{name}", obj)
        assert kube.get(kind, namespace, name)["status"]["plan"] != forged
    # A wrongly typed plan is refused by the schema even on the status subresource.
    with pytest.raises(ApiError) as info:
        kube.apply_status("XCachePool", namespace, "pl-xcache", {"plan": {"facility": "pl", "hosts": {"rack-a": "x"}}},
                          manager="intruder")
    # (server-side apply reports a value of the wrong type as 500 "failed to create typed patch object")
    assert info.value.status in (422, 500) and "status.plan.hosts" in info.value.message
    time.sleep(4)
    assert snapshot(kube, namespace, "pl-") == before
    assert all(ready_condition(kube.get(k, namespace, n))["status"] == "True"
               for k, n in (("XCachePool", "pl-xcache"), ("WorkerFleet", "pl-dask")))


# ------------------------------------------------------------------ 4 and 5. crashes, silence, one team's fleet
def team_fleet(ns: str, name: str, **spec) -> dict:
    return {"apiVersion": "switchyard.dev/v1alpha1", "kind": "WorkerFleet", "metadata": {"name": name, "namespace": ns},
            "spec": {"facilityRef": {"name": "shared"}, "replicas": 2, "cores": 1, "memoryGiB": 1, "readGbps": 0.5,
                     "taskvine": {"managerHost": "manager.example.org"}, **spec}}


def test_one_teams_fleet_never_takes_down_the_shared_facility(cluster, operator, namespace):
    kube = cluster.kube
    kube.apply(in_ns(facility("shared", workers=2), namespace))
    wait_ready(cluster, namespace, "shared")
    kube.apply(team_fleet(namespace, "good"))
    wait_for(lambda: ready_condition(kube.get("WorkerFleet", namespace, "good")).get("status") == "True",
             timeout=90, what="the good team fleet Ready")
    kube.apply(team_fleet(namespace, "nopool", pool="missing"))
    kube.apply(team_fleet(namespace, "huge", cores=256))
    answered(kube, namespace, "WorkerFleet", "nopool", "UnknownPool")
    answered(kube, namespace, "WorkerFleet", "huge", "NoNodeFitsWorker")
    time.sleep(4)
    assert ready_condition(kube.get("AnalysisFacility", namespace, "shared"))["status"] == "True"
    assert ready_condition(kube.get("WorkerFleet", namespace, "good"))["status"] == "True"
    # Refused at the API: shadowing an operator variable, sub-64 MiB memory.
    assert "env" in refused(kube, team_fleet(namespace, "shadow", env=[{"name": "POD_NAME", "value": "x"}]))
    assert "env" in refused(kube, team_fleet(namespace, "shadow2", env=[{"name": "SWITCHYARD_CACHE_ENDPOINT", "value": "x"}]))
    assert "memoryGiB" in refused(kube, team_fleet(namespace, "tiny", memoryGiB=1e-9))
    # Garbage in kopf's state annotations: the object is still answered.
    kube.annotate("WorkerFleet", namespace, "good", {"switchyard.dev/last-handled-configuration": "{not json",
                                                      "switchyard.dev/WorkerFleet-create": "[1, 2"})
    kube.request("PATCH", f"/apis/switchyard.dev/v1alpha1/namespaces/{namespace}/workerfleets/good",
                 {"spec": {"replicas": 3}}, content_type="application/merge-patch+json")
    wait_for(lambda: (kube.get("WorkerFleet", namespace, "good").get("status") or {}).get("readyReplicas") == 3,
             timeout=90, what="the fleet with garbage kopf state scaled")


# ------------------------------------------------------------------ 6. values the consumer would refuse
def test_values_valid_for_the_schema_but_not_the_consumer_are_refused(cluster, operator, namespace):
    kube = cluster.kube

    def fac(name, mutate):
        obj = in_ns(facility(name, workers=1), namespace)
        mutate(obj["spec"])
        return obj
    cases = [
        ("port-high", lambda s: s["fleets"][0]["dask"].update(schedulerAddress="tcp://sched.example.org:99999")),
        ("port-zero", lambda s: s["fleets"][0]["dask"].update(schedulerAddress="tcp://sched.example.org:0")),
        ("issuer-port", lambda s: s["cachePools"][0].update(auth={"mode": "scitokens", "issuers": ["https://t.example:70000"],
                                                                  "tlsSecret": "tls"})),
        ("image-dots", lambda s: s["cachePools"][0].update(image="ghcr.io/site/../evil/xcache:1")),
        ("image-dash", lambda s: s["cachePools"][0].update(image="ghcr.io/site-/xcache:1")),
        ("image-empty", lambda s: s["cachePools"][0].update(image="ghcr.io//xcache:1")),
        ("s3-dots", lambda s: s.update(staging={"external": {"url": "https://s3.example.org", "credentialsSecret": "k"},
                                                "buckets": [{"name": "a..b"}]})),
        ("s3-ip", lambda s: s.update(staging={"external": {"url": "https://s3.example.org", "credentialsSecret": "k"},
                                              "buckets": [{"name": "192.168.1.1"}]})),
        ("s3-prefix", lambda s: s.update(staging={"external": {"url": "https://s3.example.org", "credentialsSecret": "k"},
                                                  "buckets": [{"name": "xn--bucket"}]})),
        ("s3-suffix", lambda s: s.update(staging={"external": {"url": "https://s3.example.org", "credentialsSecret": "k"},
                                                  "buckets": [{"name": "data-s3alias"}]})),
        ("s3-url-port", lambda s: s.update(staging={"external": {"url": "https://s3.example.org:65536", "credentialsSecret": "k"}})),
    ]
    for name, mutate in cases:
        refused(kube, fac(name, mutate))
    for name in ("dotted.name", "9starts-with-digit", "x" * 41):
        refused(kube, in_ns(facility(name, workers=1), namespace))
    # An origin host with an embedded port: the schema's pattern admits IPv6 literals, the model refuses it.
    refused(kube, fac("origin-name-port", lambda s: s["cachePools"][0]["origin"].update(host="origin.example.org:1094")))
    create(kube, fac("origin-port", lambda s: s["cachePools"][0]["origin"].update(host="ab:1094:")))
    answered(kube, namespace, "AnalysisFacility", "origin-port", "InvalidSpec")
    # A TLS Secret that is missing, or not a TLS Secret.
    kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "opaque", "namespace": namespace},
                "type": "Opaque", "stringData": {"x": "y"}})
    for name, secret, reason in (("tls-missing", "nope", "TLSSecretNotFound"), ("tls-opaque", "opaque", "TLSSecretInvalid")):
        create(kube, fac(name, lambda s, secret=secret: s["cachePools"][0].update(
            auth={"mode": "scitokens", "issuers": ["https://tokens.example.org"], "tlsSecret": secret})))
        answered(kube, namespace, "XCachePool", f"{name}-xcache", reason)


def test_user_text_in_messages_is_one_printable_line(cluster, operator, namespace):
    kube = cluster.kube
    obj = in_ns(facility("echo", workers=1), namespace)
    second = copy.deepcopy(obj["spec"]["cachePools"][0])
    second["name"] = "other"
    obj["spec"]["cachePools"].append(second)
    for pool in obj["spec"]["cachePools"]:
        pool["origin"]["host"] = "ab:cd"  # passes the schema, refused by the model: two errors, one message
    create(kube, obj)
    cond = answered(kube, namespace, "AnalysisFacility", "echo", "InvalidSpec")
    assert "; " in cond["message"] and all(ch >= " " for ch in cond["message"]), cond["message"]
    events = [e for e in kube.list("Event", namespace) if e["involvedObject"].get("name") == "echo"]
    assert events and all(all(ch >= " " for ch in e.get("message", "")) for e in events)


# ------------------------------------------------------------------ 7. names at their limits, degenerate numbers
LONG_SWITCH_LABEL = "e2e.switchyard.dev/long-switch"
# Switch names at the 63 characters a label value holds: one as it is, one a child name must fold (case, '_', '.').
LONG_SWITCHES = {"rack-a": "a" * 62 + "1", "rack-b": "Rack_B." + "b" * 55 + "2", "rack-c": "c" * 63}


def test_names_at_every_schema_limit_reconcile_to_ready_or_are_refused_at_the_api(cluster, operator, namespace):
    kube = cluster.kube
    for node in kube.list("Node"):
        rack = node["metadata"]["labels"].get("switchyard.dev/switch")
        if rack in LONG_SWITCHES:
            cluster.kubectl("label", "node", node["metadata"]["name"], f"{LONG_SWITCH_LABEL}={LONG_SWITCHES[rack]}",
                            "--overwrite")
    try:
        name = "f" + "a" * 38 + "z"                      # 40: metadata.name's limit
        obj = in_ns(facility(name, workers=6), namespace)
        spec = obj["spec"]
        spec["network"]["switchLabel"] = LONG_SWITCH_LABEL
        spec["network"]["switches"] = [{"name": sw, "uplinkGbps": 80} for sw in LONG_SWITCHES.values()]
        pool = "9" + "p" * 39                             # 40: a pool name's limit (DNS-1123: may start with a digit)
        spec["cachePools"][0]["name"] = pool
        spec["fleets"][0].update(name="0" + "w" * 39, pool=pool, dask={"createScheduler": True})
        second = copy.deepcopy(spec["fleets"][0])
        second.update(name="0" + "w" * 38 + "x", replicas=2)  # shares the first 39 characters
        spec["fleets"].append(second)
        kube.apply(obj)
        wait_ready(cluster, namespace, name, timeout=240)
        children = [o for kind in ("XCachePool", "WorkerFleet", "StatefulSet", "Deployment", "Service", "ConfigMap",
                                   "PodDisruptionBudget") for o in kube.list(kind, namespace)]
        own = [o for o in children if o["kind"] in ("XCachePool", "WorkerFleet")]
        assert len(own) == 3 and all(len(o["metadata"]["name"]) <= 40 for o in own), [o["metadata"]["name"] for o in own]
        assert all(ready_condition(o)["status"] == "True" for o in own)
        # every switch has its cache StatefulSet and each fleet its Deployments, all Ready
        sets = [o for o in children if o["kind"] == "StatefulSet"]
        assert len(sets) == 3 and all((o.get("status") or {}).get("readyReplicas") == o["spec"]["replicas"] for o in sets)
        workers = sum(o["spec"]["replicas"] for o in children if o["kind"] == "Deployment"
                      and o["metadata"]["labels"].get("app.kubernetes.io/component") == "worker")
        assert workers == 8
        # One more character anywhere is refused at the API, naming the field.
        longer = in_ns(facility(name + "y", workers=1), namespace)
        assert "metadata.name" in refused(kube, longer)
        for field, mutate in (("cachePools[0].name", lambda s: s["cachePools"][0].update(name="p" * 41)),
                              ("fleets[0].name", lambda s: s["fleets"][0].update(name="w" * 41)),
                              ("switches[0].name", lambda s: s["network"]["switches"][0].update(name="s" * 64))):
            bad = in_ns(facility("too-long", workers=1), namespace)
            mutate(bad["spec"])
            assert field in refused(kube, bad)
    finally:
        for node in kube.list("Node"):
            if LONG_SWITCH_LABEL in node["metadata"]["labels"]:
                cluster.kubectl("label", "node", node["metadata"]["name"], f"{LONG_SWITCH_LABEL}-")


def test_capacities_below_a_megabit_are_refused_at_the_api(cluster, operator, namespace):
    kube = cluster.kube
    cases = [("uplinkGbps", lambda s: s["network"]["switches"][0].update(uplinkGbps=5e-324)),
             ("wanGbps", lambda s: s["network"].update(wanGbps=1e-300)),
             ("defaultNicGbps", lambda s: s["network"].update(defaultNicGbps=0.0005)),
             ("serveGbps", lambda s: s["cachePools"][0].update(serveGbps=5e-324)),
             ("readGbps", lambda s: s["fleets"][0].update(readGbps=5e-324))]
    for field, mutate in cases:
        obj = in_ns(facility("tiny", workers=1), namespace)
        mutate(obj["spec"])
        assert field in refused(kube, obj)
    assert "readGbps" in refused(kube, team_fleet(namespace, "tiny", readGbps=5e-324))
    # At the floor, a facility plans every worker where the other switches have room.
    obj = in_ns(facility("floor", workers=6), namespace)
    obj["spec"]["network"]["switches"][0]["uplinkGbps"] = 0.001
    kube.apply(obj)
    wait_ready(cluster, namespace, "floor")
    fleet = kube.get("WorkerFleet", namespace, "floor-dask")
    assert fleet["status"]["readyReplicas"] == 6 and "rack-a" not in fleet["status"]["plan"]["workers"]


def test_xrootd_cannot_run_as_the_exporters_user_at_the_api(cluster, operator, namespace):
    # The cache pod's containers share one process namespace: the same uid could signal or trace the other.
    obj = in_ns(facility("uid", workers=1), namespace)
    obj["spec"]["cachePools"][0]["xrootdUser"] = {"uid": 65532, "gid": 1094}
    assert "uid 65532 is the cache pod's exporter's" in refused(cluster.kube, obj)


def test_a_fleet_or_pool_waiting_for_its_plan_says_why(cluster, operator, namespace):
    kube = cluster.kube
    orphan = team_fleet(namespace, "orphan")
    orphan["spec"]["facilityRef"]["name"] = "nowhere"
    kube.apply(orphan)
    answered(kube, namespace, "WorkerFleet", "orphan", "FacilityNotFound")
    kube.apply({"apiVersion": "switchyard.dev/v1alpha1", "kind": "XCachePool",
                "metadata": {"name": "orphan-pool", "namespace": namespace},
                "spec": {"facilityRef": {"name": "nowhere"}, "origin": {"host": "origin.example.org"},
                         "resources": {"cpu": "2", "memory": "12Gi"}}})
    assert "nothing places this pool" in answered(kube, namespace, "XCachePool", "orphan-pool", "FacilityNotFound")["message"]
    # A facility that is refused (a host path outside the allowlist): a fleet waiting for it names its reason.
    kube.apply(in_ns(with_storage("held", ["/etc"], "/srv/xcache-meta"), namespace))
    waits = team_fleet(namespace, "waits")
    waits["spec"]["facilityRef"]["name"] = "held"
    kube.apply(waits)
    said = answered(kube, namespace, "WorkerFleet", "waits", "FacilityNotReady")["message"]
    assert "AnalysisFacility held is Ready=False HostPathNotAllowed" in said, said


# ------------------------------------------------------------------ 9. one team's greed moves nobody
def workloads(kube, ns: str) -> dict:
    """(generation, replicas) of every Deployment and StatefulSet in the namespace."""
    return {f"{kind}/{o['metadata']['name']}": (o["metadata"]["generation"], o["spec"]["replicas"])
            for kind in ("Deployment", "StatefulSet") for o in kube.list(kind, ns)}


def test_a_greedy_newcomer_gets_what_remains_and_moves_no_running_worker(cluster, operator, namespace):
    kube = cluster.kube
    kube.apply(in_ns(facility("shared", workers=6), namespace))
    wait_ready(cluster, namespace, "shared")
    kube.apply(team_fleet(namespace, "good"))
    wait_for(lambda: (kube.get("WorkerFleet", namespace, "good").get("status") or {}).get("readyReplicas") == 2,
             timeout=90, what="the good team fleet's 2 workers ready")
    wait_ready(cluster, namespace, "shared")
    before = workloads(kube, namespace)
    assert sum(n for key, (_, n) in before.items() if key.startswith("Deployment/")) == 8, before
    # 100,000 workers of 8 cores: the whole re-plan would move the running workers and drop cache hosts for them.
    kube.apply(team_fleet(namespace, "greedy", replicas=100_000, cores=8, memoryGiB=1, readGbps=0.1))
    seen = []

    def short():
        facility_now = kube.get("AnalysisFacility", namespace, "shared")
        seen.append((ready_condition(facility_now).get("status"), ready_condition(facility_now).get("reason")))
        greedy = kube.get("WorkerFleet", namespace, "greedy")
        return greedy if ready_condition(greedy).get("reason") == "InsufficientCapacity" else None
    greedy = wait_for(short, timeout=180, interval=0.5, what="the greedy fleet Ready=False InsufficientCapacity")
    placed = sum(s["desired"] for s in greedy["status"]["switches"])
    assert 0 < placed < 100_000 and greedy["status"]["plan"]["unplaced"] == 100_000 - placed
    for _ in range(10):  # a few reconciles of everyone (the e2e operator's timer is a few seconds)
        time.sleep(1.5)
        facility_now = kube.get("AnalysisFacility", namespace, "shared")
        seen.append((ready_condition(facility_now).get("status"), ready_condition(facility_now).get("reason")))
    assert all(status == "True" for status, _ in seen), seen
    degraded = condition(kube.get("AnalysisFacility", namespace, "shared"), "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "WorkersUnplaced" and "fleet greedy" in degraded["message"]
    after = workloads(kube, namespace)
    running = {k: v for k, v in after.items() if "greedy" not in k}
    assert running == before  # no running Deployment or StatefulSet re-specified: same generations, same replicas
    assert ready_condition(kube.get("WorkerFleet", namespace, "good"))["status"] == "True"
    assert ready_condition(kube.get("WorkerFleet", namespace, "shared-dask"))["status"] == "True"


# ------------------------------------------------------------------ 8. the scheduler pod survives resyncs
def test_a_fleets_scheduler_pod_keeps_its_uid_across_resyncs(cluster, operator, namespace):
    kube = cluster.kube
    obj = in_ns(facility("sched", workers=2), namespace)
    obj["spec"]["fleets"][0]["dask"] = {"createScheduler": True}
    kube.apply(obj)
    wait_ready(cluster, namespace, "sched")

    def scheduler_pod():
        pods = [p for p in kube.list("Pod", namespace, {"app.kubernetes.io/component": "scheduler"})
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
        return pods[0] if pods else None
    first = wait_for(scheduler_pod, timeout=90, what="the scheduler pod Running")["metadata"]["uid"]
    time.sleep(25)  # the e2e operator resyncs every 10 s
    assert scheduler_pod()["metadata"]["uid"] == first


def test_operator_log_holds_no_traceback(operator):
    text = (localcluster.CACHE / "e2e-logs" / CLUSTER_NAME / "operator.log").read_text(errors="replace")
    assert "Traceback (most recent call last)" not in text, text[text.index("Traceback"):][:3000]
