"""Every status decision of every kind, through its pure desired-state function (no cluster)."""

from __future__ import annotations

import copy
import dataclasses
import pathlib

import pytest
import yaml

from switchyard.observe.cachedisk import HostDisk, UnmountedDisk
from switchyard.desired import Outcome
from switchyard.desired.facility import desired_facility
from switchyard.desired.workerfleet import FleetIntent, desired_fleet, fleet_intent
from switchyard.desired.xcachepool import DiskRead, desired_pool
from switchyard.policy.hostpaths import HostPathPolicy
from switchyard.policy.imagepolicy import ImagePolicy
from switchyard.policy.settings import Settings
from switchyard.topology import load_topology

REPO = pathlib.Path(__file__).resolve().parents[3]
NODES = load_topology(yaml.safe_load((REPO / "e2e" / "topologies" / "mini.yaml").read_text()), "mini").node_infos()
SETTINGS = Settings()
LOCKED = Settings(images=ImagePolicy.parse("ghcr.io/site/"))


def facility_spec(workers: int = 4) -> dict:
    return {
        "network": {"switches": [{"name": "rack-a", "uplinkGbps": 80}, {"name": "rack-b", "uplinkGbps": 80},
                                 {"name": "rack-c", "uplinkGbps": 40}]},
        "routing": "local",
        "cachePools": [{"name": "xcache", "origin": {"host": "origin.example.org"},
                        "resources": {"cpu": "2", "memory": "12Gi"}}],
        "fleets": [{"name": "dask", "replicas": workers, "cores": 2, "memoryGiB": 4, "readGbps": 1,
                    "dask": {"schedulerAddress": "tcp://scheduler.example.org:8786"}}],
    }


def reason(outcome: Outcome) -> tuple[bool | None, str]:
    return outcome.states["Ready"].status, outcome.states["Ready"].reason


def ready(obj: dict, degraded: bool = False) -> dict:
    return {**obj, "status": {**obj.get("status", {}), "conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready"},
        {"type": "Degraded", "status": "True" if degraded else "False", "reason": "X" if degraded else "Healthy"}]}}


def planned_facility(workers: int = 4) -> Outcome:
    out = desired_facility("af", facility_spec(workers), None, NODES, [], [], SETTINGS)
    assert out.converges
    return out


def child(out: Outcome, kind: str) -> dict:
    return next(c for c in out.children if c["kind"] == kind)


# ------------------------------------------------------------------ AnalysisFacility
def test_facility_invalid_spec_keeps_the_last_plan_and_touches_nothing():
    spec = facility_spec()
    spec["targetGbps"] = "fast"
    out = desired_facility("af", spec, {"workers": 7, "plan": {"predictedGbps": 1}, "other": 1}, NODES, [], [], SETTINGS)
    assert reason(out) == (False, "InvalidSpec") and not out.converges
    assert out.status == {"workers": 7, "plan": {"predictedGbps": 1}}


def test_facility_keeps_the_drift_streaks_in_status_for_the_drift_check_to_write():
    drift = {"pending": [{"switch": "rack-a", "direction": "serve", "toward": "Drift", "since": "2026-11-26T11:00:00Z"}]}
    spec = facility_spec()
    spec["targetGbps"] = "fast"
    held = desired_facility("af", spec, {"workers": 7, "drift": drift}, NODES, [], [], SETTINGS)
    assert held.status == {"workers": 7, "drift": drift}         # a held write does not drop them
    planned = desired_facility("af", facility_spec(), {"workers": 7, "drift": drift}, NODES, [], [], SETTINGS)
    assert planned.converges and planned.status["drift"] == drift and planned.status["workers"] != 7
    assert "drift" not in planned_facility().status


def test_facility_refuses_images_and_host_paths_outside_the_admins_lists():
    assert reason(desired_facility("af", facility_spec(), None, NODES, [], [], LOCKED)) == (False, "ImageNotAllowed")
    paths = Settings(host_paths=HostPathPolicy.parse("/nvme/"))
    out = desired_facility("af", facility_spec(), None, NODES, [], [], paths)
    assert reason(out) == (False, "HostPathNotAllowed") and not out.converges


def test_facility_with_no_possible_plan_is_degraded_only_when_it_runs_children():
    no_nvme = [dataclasses.replace(n, labels={k: v for k, v in n.labels.items() if k != "switchyard.dev/nvme"})
               for n in NODES]
    fresh = desired_facility("af", facility_spec(), None, no_nvme, [], [], SETTINGS)
    assert reason(fresh) == (False, "NoEligibleCacheNodes") and fresh.states["Degraded"].status is False
    running = desired_facility("af", facility_spec(), None, no_nvme, [{"kind": "XCachePool", "metadata": {"name": "af-xcache"}}],
                               [], SETTINGS)
    assert running.states["Degraded"].status is True and not running.converges


def test_a_planner_fault_is_planning_failed_not_a_crash(monkeypatch):
    from switchyard.desired import facility

    def broken(*_, **__):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr(facility.planner, "plan", broken)
    out = desired_facility("af", facility_spec(), None, NODES, [], [], SETTINGS)
    assert reason(out) == (False, "PlanningFailed") and not out.converges
    assert out.errors and "ZeroDivisionError" in out.errors[0]


def test_facility_waits_for_children_it_has_not_seen_and_is_ready_when_all_are():
    out = planned_facility()
    assert reason(out) == (False, "ChildrenNotReady")
    assert {c["kind"] for c in out.children} == {"XCachePool", "WorkerFleet"}
    assert all("plan" in c["status"] for c in out.children)
    observed = [ready(copy.deepcopy(c)) for c in out.children]
    assert reason(desired_facility("af", facility_spec(), None, NODES, observed, [], SETTINGS)) == (True, "Ready")
    observed[0] = ready(observed[0], degraded=True)
    again = desired_facility("af", facility_spec(), None, NODES, observed, [], SETTINGS)
    assert again.states["Degraded"].reason == "ChildDegraded"


def test_after_the_write_a_child_given_a_new_spec_is_not_ready_until_it_has_seen_it():
    """The post-write judgement (the handler passes what the API server answered, desired judges it)."""
    observed = [ready({**copy.deepcopy(c), "metadata": {**c["metadata"], "generation": 1}}) for c in
                planned_facility().children]
    for c in observed:
        c["status"]["observedGeneration"] = 1
    out = desired_facility("af", facility_spec(workers=5), None, NODES, observed, [], SETTINGS)
    assert reason(out) == (True, "Ready")                       # as they were read before the write
    assert reason(Outcome(out.status, out.states_after_write(observed))) == (True, "Ready")
    bumped = [{**c, "metadata": {**c["metadata"], "generation": 2}} if c["kind"] == "WorkerFleet" else c
              for c in observed]
    after = out.states_after_write(bumped)                      # the fleet's new spec, not yet observed
    assert (after["Ready"].status, after["Ready"].reason) == (False, "ChildrenNotReady")
    assert "WorkerFleet af-dask" in after["Ready"].message and "XCachePool" not in after["Ready"].message
    unseen = out.states_after_write([c for c in observed if c["kind"] == "XCachePool"])   # a child not answered
    assert unseen["Ready"].reason == "ChildrenNotReady" and "WorkerFleet af-dask" in unseen["Ready"].message
    assert out.states_after_write(observed)["Degraded"] == out.states["Degraded"]   # the plan's problems kept


def test_not_ready_nodes_and_unplaced_workers_are_degraded_with_their_reason():
    lost = [dataclasses.replace(n, not_ready_since="2026-01-01T00:00:00Z") if n.name.startswith("rack-a-worker") else n
            for n in NODES]
    out = desired_facility("af", facility_spec(), None, lost, [], [], SETTINGS)
    assert out.states["Degraded"].reason == "NodesNotReady"
    assert "rack-a-worker" in out.states["Degraded"].message
    crowded = desired_facility("af", facility_spec(workers=5000), None, NODES, [], [], SETTINGS)
    assert crowded.states["Degraded"].reason == "WorkersUnplaced"


def test_attached_fleets_get_plans_and_a_bad_one_is_refused_alone():
    def team(name, **spec):
        return {"kind": "WorkerFleet", "metadata": {"name": name, "ownerReferences": []},
                "spec": {"facilityRef": {"name": "af"}, "replicas": 2, "taskvine": {"managerHost": "m"}, **spec}}
    observed = [ready(copy.deepcopy(c)) for c in planned_facility().children]
    attached = [ready(team("good")), team("nopool", pool="missing"), team("invalid", cores=0)]
    out = desired_facility("af", facility_spec(), None, NODES, observed, attached, SETTINGS)
    plans = dict(out.fleet_plans)
    assert sorted(plans) == ["good", "nopool"]  # an invalid fleet answers for itself
    assert plans["nopool"].problem.reason == "UnknownPool" and sum(plans["good"].workers.values()) == 2
    assert reason(out) == (True, "Ready")


# ------------------------------------------------------------------ XCachePool
def pool_child() -> dict:
    return child(planned_facility(), "XCachePool")


def pool(spec_patch: dict | None = None, status: dict | None = None, workloads=None, settings=SETTINGS, **kw) -> Outcome:
    c = pool_child()
    spec = {**c["spec"], **(spec_patch or {})}
    return desired_pool("af-xcache", "ns", spec, c["status"] if status is None else status, workloads or {}, NODES,
                        settings, **kw)


def test_pool_refusals_render_nothing():
    assert reason(pool({"origin": {"mode": "fixed"}})) == (False, "InvalidSpec")
    assert reason(pool(settings=LOCKED)) == (False, "ImageNotAllowed")
    assert reason(pool({"storage": {"dataPaths": ["/etc"]}})) == (False, "HostPathNotAllowed")
    for out in (pool(settings=LOCKED), pool({"storage": {"dataPaths": ["/etc"]}})):
        assert not out.converges


def test_pool_tls_secret_must_exist_and_be_a_tls_secret():
    auth = {"auth": {"mode": "scitokens", "issuers": ["https://t.example"], "tlsSecret": "tls"}}
    assert reason(pool(auth, secrets={"tls": None})) == (False, "TLSSecretNotFound")
    assert reason(pool(auth, secrets={"tls": {"type": "Opaque", "data": {"x": "eQ=="}}})) == (False, "TLSSecretInvalid")
    good = {"type": "kubernetes.io/tls", "data": {"tls.crt": "Yw==", "tls.key": "aw=="}}
    assert pool(auth, secrets={"tls": good}).converges
    assert pool(auth, secrets={}).converges  # not readable (RBAC): not judged


def test_pool_plan_missing_foreign_or_malformed():
    assert reason(pool(status={})) == (False, "AwaitingPlan")
    assert reason(pool(status={"plan": {"facility": "other"}})) == (False, "AwaitingPlan")
    bad = pool(status={"plan": {"facility": "af", "hosts": {"rack-a": "x"}}})
    assert reason(bad) == (False, "InvalidPlan") and "status.plan.hosts" in bad.states["Ready"].message


def test_pool_readiness_and_degradation():
    hosts = pool_child()["status"]["plan"]["hosts"]
    counts = {sw: len(h) for sw, h in hosts.items()}
    starting = pool()
    assert reason(starting) == (False, "HostsStarting") and starting.converges
    all_ready = {sw: {"desired": n, "current": n, "ready": n} for sw, n in counts.items()}
    assert reason(pool(workloads=all_ready)) == (True, "Ready")
    lagging = {**all_ready, "rack-a": {"desired": counts["rack-a"], "current": counts["rack-a"], "ready": 0}}
    out = pool(workloads=lagging)
    assert out.states["Degraded"].reason == "HostsNotReady" and out.events[0][:2] == ("Warning", "HostsNotReady")
    full = DiskRead({"usedPercent": 99}, (HostDisk("rack-a-cache-0", "rack-a", 99, 100, 0.95),))
    assert pool(workloads=all_ready, disk=full).states["Degraded"].reason == "SpacePastHighWatermark"
    was = {**pool_child()["status"], "conditions": [{"type": "Degraded", "status": "True", "reason": "HostsNotReady"}]}
    assert pool(status=was, workloads=all_ready).events == (
        ("Normal", "Recovered", "No longer degraded: every planned host is ready and below its high water mark"),)


def test_a_disk_not_mounted_degrades_the_pool_naming_host_and_path():
    hosts = pool_child()["status"]["plan"]["hosts"]
    counts = {sw: len(h) for sw, h in hosts.items()}
    host = hosts["rack-a"][0]
    # That host's cache does not start; every other host serves.
    workloads = {sw: {"desired": n, "current": n, "ready": n - (sw == "rack-a")} for sw, n in counts.items()}
    unmounted = (UnmountedDisk(host, "/mnt/nvme0"), UnmountedDisk("not-a-planned-host", "/mnt/nvme0"))
    out = pool(workloads=workloads, unmounted=unmounted)
    degraded = out.states["Degraded"]
    assert (degraded.status, degraded.reason) == (True, "DiskNotMounted")
    assert f"{host}:/mnt/nvme0" in degraded.message and "not-a-planned-host" not in degraded.message
    assert out.events == (("Warning", "DiskNotMounted", degraded.message),)
    assert out.status["readyHosts"] == sum(counts.values()) - 1 and out.converges
    # Reported once; a second path on the same host is news, and is reported again.
    was = {**pool_child()["status"], "conditions": [{"type": "Degraded", "status": "True", **{
        "reason": degraded.reason, "message": degraded.message}}]}
    assert pool(status=was, workloads=workloads, unmounted=unmounted).events == ()
    more = pool(status=was, workloads=workloads, unmounted=(*unmounted, UnmountedDisk(host, "/mnt/xcache-meta")))
    assert [e[1] for e in more.events] == ["DiskNotMounted"] and f"{host}:/mnt/xcache-meta" in more.events[0][2]
    # Mounted and started: recovered.
    all_ready = {sw: {"desired": n, "current": n, "ready": n} for sw, n in counts.items()}
    assert pool(status=was, workloads=all_ready).events[0][:2] == ("Normal", "Recovered")


# ------------------------------------------------------------------ WorkerFleet
def fleet_child() -> dict:
    return child(planned_facility(), "WorkerFleet")


def intent(spec_patch: dict | None = None, status: dict | None = None, settings=SETTINGS, **kw):
    c = fleet_child()
    return fleet_intent("af-dask", "ns", {**c["spec"], **(spec_patch or {})}, c["status"] if status is None else status,
                        settings, **kw)


def test_fleet_refusals_and_waits():
    assert reason(intent({"cores": 0})) == (False, "InvalidSpec")
    assert reason(intent(settings=LOCKED)) == (False, "ImageNotAllowed")
    assert reason(intent(status={"plan": {"facility": "af", "workers": {"rack-a": -1}}})) == (False, "InvalidPlan")
    refused = intent(status={"plan": {"facility": "af", "problem": {"reason": "UnknownPool", "message": "no"}}})
    assert reason(refused) == (False, "UnknownPool") and not refused.wake_facility
    waiting = intent(status={})
    assert reason(waiting) == (False, "AwaitingPlan") and waiting.wake_facility
    assert reason(intent({"staging": "stage"})) == (False, "AwaitingStaging")
    assert reason(intent({"staging": "stage"}, staging={"spec": {"external": {}}})) == (False, "AwaitingStaging")


def test_fleet_with_staging_gets_its_environment():
    staging = {"spec": {"external": {"url": "https://s3.example.org", "credentialsSecret": "keys"},
                        "buckets": [{"name": "ntuples"}]}}
    got = intent({"staging": "stage"}, staging=staging)
    assert isinstance(got, FleetIntent)
    assert {"name": "SWITCHYARD_S3_BUCKET", "value": "ntuples"} in got.staging_env


def fleet(counts=None, workloads=None, **kw) -> Outcome:
    got = intent(**kw)
    assert isinstance(got, FleetIntent)
    return desired_fleet("af-dask", "ns", got, got.plan.workers if counts is None else counts, workloads or {}, SETTINGS)


def test_fleet_status_decisions():
    planned = fleet_child()["status"]["plan"]["workers"]
    rescaled = intent({"replicas": 9})
    assert isinstance(rescaled, FleetIntent) and rescaled.wake_facility
    assert reason(desired_fleet("af-dask", "ns", rescaled, rescaled.plan.workers, {}, SETTINGS)) == (False, "AwaitingPlan")
    ramping = fleet(counts={sw: 0 for sw in planned})
    assert reason(ramping) == (False, "RampingUp") and 0.25 <= ramping.retry_seconds <= 1
    assert reason(fleet()) == (False, "WorkersStarting")
    all_ready = {sw: {"desired": n, "current": n, "ready": n} for sw, n in planned.items()}
    assert reason(fleet(workloads=all_ready)) == (True, "Ready")
    short = {**fleet_child()["status"]["plan"], "workers": {"rack-a": 2}, "unplaced": 2}
    assert reason(fleet(status={"plan": short}, workloads=all_ready)) == (False, "InsufficientCapacity")


# ------------------------------------------------------------------ every status write goes through its model
def test_status_writes_are_checked_by_the_kinds_status_model():
    from pydantic import ValidationError

    from switchyard.handlers.status import next_status
    body = {"metadata": {"generation": 3}, "status": {}}
    out = planned_facility()
    written = next_status("AnalysisFacility", body, out.status, out.states, "2026-01-01T00:00:00Z")
    assert written["observedGeneration"] == 3 and written["plan"]["predictedGbps"] == out.status["plan"]["predictedGbps"]
    assert next_status("AnalysisFacility", {**body, "status": written}, out.status, out.states, "later") is None
    for bad in ({"workers": "many"}, {"notAField": 1}, {"plan": {"switches": "x"}}):
        with pytest.raises(ValidationError):
            next_status("AnalysisFacility", body, bad, out.states, "2026-01-01T00:00:00Z")
    # Only what the reconcile set is written: no defaults of other fields (status.plan stays the facility's).
    assert set(next_status("XCachePool", body, {}, out.states, "t")) == {"observedGeneration", "conditions"}


def test_a_status_compares_equal_to_what_the_api_server_stored_with_its_defaults():
    from switchyard.handlers.status import next_status
    states = planned_facility().states
    body = {"metadata": {"generation": 1}, "status": {}}
    first = next_status("XCachePool", body, {"switches": [{"switch": "rack-a", "desired": 2, "ready": 2}]}, states, "t")
    # The server fills SwitchCount.started's default (0) in what it stores: no second write for it.
    assert first["switches"] == [{"switch": "rack-a", "desired": 2, "started": 0, "ready": 2}]
    assert next_status("XCachePool", {**body, "status": first},
                       {"switches": [{"switch": "rack-a", "desired": 2, "ready": 2}]}, states, "t") is None


def test_a_child_given_a_new_spec_is_not_ready_until_it_has_seen_it():
    from switchyard.desired.facility import children_state
    child = ready({"kind": "WorkerFleet", "metadata": {"name": "af-dask", "generation": 2}, "status": {"observedGeneration": 1}})
    assert children_state([child])["Ready"].reason == "ChildrenNotReady"
    child["status"]["observedGeneration"] = 2
    assert children_state([child])["Ready"].status is True


def test_the_facility_status_sets_the_plan_against_its_target_in_the_words_plan_prints():
    """4 workers reading 1 Gbps each against the default 200 Gbps target: the status says how far short and why."""
    plan = planned_facility(4).status["plan"]
    assert plan["target"] == ("target 200 Gbps, predicted 4 Gbps (196 short): the workers' demand binds "
                              "(4 workers read 4 Gbps): raise the fleets' replicas or readGbps "
                              "(about 196 more workers at 1 Gbps each)")
    spec = {**facility_spec(4), "targetGbps": 2}
    assert desired_facility("af", spec, None, NODES, [], [], SETTINGS).status["plan"]["target"] == \
        "target 2 Gbps: met (predicted 4 Gbps)"


def test_fleet_routing_configmap_names_cache_hosts_by_internal_ip_or_says_it_could_not():
    import dataclasses as dc

    from switchyard.topology import node_info

    got = intent()
    assert isinstance(got, FleetIntent) and got.plan.pool and got.plan.cache_ring
    hosts = sorted(got.plan.cache_ring)
    nodes = [node_info({"metadata": {"name": host}, "status": {"addresses": [
        {"type": "Hostname", "address": host}, {"type": "InternalIP", "address": f"10.0.0.{i + 5}"},
        {"type": "InternalIP", "address": f"fd00::{i + 5}"}]}}) for i, host in enumerate(hosts)]
    assert nodes[0].internal_ips == ("10.0.0.5", "fd00::5") and nodes[0].address == "10.0.0.5"
    out = desired_fleet("af-dask", "ns", got, got.plan.workers, {}, SETTINGS, nodes)
    (config,) = [c for c in out.children if c["kind"] == "ConfigMap"]
    entries = [line for line in config["data"]["ring"].splitlines() if not line.startswith("#")]
    assert entries == [f"{h}@root://10.0.0.{i + 5}:{got.plan.pool_port}={got.plan.cache_ring[h]:g}"
                       for i, h in enumerate(hosts)]
    assert out.unaddressed == ()
    # a node without an InternalIP: named by its node name, and said
    bare = [dc.replace(nodes[0], internal_ips=()), *nodes[1:]]
    out = desired_fleet("af-dask", "ns", got, got.plan.workers, {}, SETTINGS, bare)
    (config,) = [c for c in out.children if c["kind"] == "ConfigMap"]
    assert f"root://{hosts[0]}:{got.plan.pool_port}=" in config["data"]["ring"]
    assert out.unaddressed == (hosts[0],)
    assert f"# {hosts[0]}: no InternalIP, named by its node name" in config["data"]["ring"]


# ------------------------------------------------------------------ can the fleet's image route its reads?
def check_pod(name: str, image: str, run: dict | None, last: dict | None = None) -> dict:
    """A worker pod as the API server lists it, its routing-check init container in state `run`."""
    status = {"name": "routing-check", "state": {"terminated": run} if run else {"running": {}},
              "lastState": {"terminated": last} if last else {}}
    return {"metadata": {"name": name},
            "spec": {"initContainers": [{"name": "routing-copy", "image": "op:1"},
                                        {"name": "routing-check", "image": image}]},
            "status": {"initContainerStatuses": [{"name": "routing-copy", "state": {"terminated": {"exitCode": 0}}},
                                                 status]}}


LACKS = ("RoutingUnavailable: Python 3.12.7 lacks fsspec-xrootd (ModuleNotFoundError: No module named "
         "'fsspec_xrootd'); reads go to the origin")
ROUTES = "RoutingReady: Python 3.12.7 reads root:// through the caches with fsspec-xrootd"


def test_the_routing_verdict_is_read_from_the_check_containers_of_the_current_image():
    from switchyard.desired.workerfleet import routing_verdict

    image = "ghcr.io/dask/dask:2024.12.1-py3.12"
    ok = check_pod("w-1", image, {"exitCode": 0, "message": ROUTES})
    bad = check_pod("w-2", image, {"exitCode": 0, "message": LACKS})
    assert routing_verdict([ok], image) == {"image": image, "routes": True, "message": ROUTES.split(": ", 1)[1]}
    # one pod that cannot route is enough to say so
    assert routing_verdict([ok, bad], image) == {"image": image, "routes": False, "message": LACKS.split(": ", 1)[1]}
    # pods of another image, or whose check has not finished, say nothing
    assert routing_verdict([check_pod("w-0", "old:1", {"exitCode": 0, "message": LACKS})], image) is None
    assert routing_verdict([check_pod("w-3", image, None)], image) is None
    # a check that succeeded without a verdict (a simulated node's) says nothing either
    assert routing_verdict([check_pod("w-6", image, {"exitCode": 0, "reason": "Completed"})], image) is None
    assert routing_verdict([], image) is None
    # a check that could not run (no python3 in the image) is no verdict: the kubelet's error is named
    start = check_pod("w-4", image, None, last={"exitCode": 128, "reason": "StartError", "message":
                                                 'exec: "python3": executable file not found in $PATH'})
    got = routing_verdict([start], image)
    assert got["routes"] is False and "StartError" in got["message"] and "python3" in got["message"]
    crashed = check_pod("w-5", image, {"exitCode": 1, "reason": "Error", "message": "Traceback...\nSyntaxError: x"})
    assert routing_verdict([crashed], image)["message"] == "its routing check gave no verdict (Error: SyntaxError: x)"


def test_a_fleet_whose_image_cannot_route_is_degraded_with_its_image_and_what_it_lacks():
    got = intent()
    assert isinstance(got, FleetIntent) and got.plan.pool
    from switchyard.builders.workerfleet import worker_image

    image = worker_image(got.spec)
    cannot = {"image": image, "routes": False, "message": LACKS.split(": ", 1)[1]}
    out = desired_fleet("af-dask", "ns", got, got.plan.workers, {}, SETTINGS, routing=cannot)
    degraded = out.states["Degraded"]
    assert (degraded.status, degraded.reason) == (True, "RoutingUnavailable")
    assert image in degraded.message and "fsspec-xrootd" in degraded.message and got.plan.pool in degraded.message
    assert out.status["routing"] == cannot
    from switchyard.api.workerfleet import WorkerFleetStatus

    assert WorkerFleetStatus.model_validate(out.status).routing.routes is False  # what the status write checks
    assert out.events == (("Warning", "RoutingUnavailable", degraded.message),)
    assert out.states["Ready"].reason == "WorkersStarting"  # the workers still start (and read from the origin)
    # already said: no second event
    said = intent(status={**fleet_child()["status"], "conditions": [
        {"type": "Degraded", "status": "True", "reason": "RoutingUnavailable", "message": degraded.message}]})
    assert desired_fleet("af-dask", "ns", said, said.plan.workers, {}, SETTINGS, routing=cannot).events == ()
    # an image that routes, a verdict for another image, no verdict yet: not degraded
    for routing in ({**cannot, "routes": True}, {**cannot, "image": "old:1"}, None):
        out = desired_fleet("af-dask", "ns", got, got.plan.workers, {}, SETTINGS, routing=routing)
        assert out.states["Degraded"].status is False and out.events == (), routing
        assert out.status.get("routing") == (routing if routing and routing["image"] == image else None)


def test_the_status_keeps_a_verdict_only_for_the_current_image():
    from switchyard.builders.workerfleet import worker_image

    got = intent()
    image = worker_image(got.spec)
    known = {"image": image, "routes": True, "message": "x"}
    assert intent(status={**fleet_child()["status"], "routing": known}).known_routing() == known
    assert intent({"image": "site/analysis:2"}, status={**fleet_child()["status"], "routing": known}).known_routing() is None
    assert got.known_routing() is None


def test_the_handler_lists_the_fleets_pods_only_until_its_image_has_a_verdict(monkeypatch):
    from switchyard.builders.workerfleet import worker_image
    from switchyard.handlers import workerfleet as handler
    from switchyard.handlers.memory import FleetMemory

    calls = []
    image = worker_image(intent().spec)

    pods = [check_pod("w-0", image, None)]  # its check still running

    class Kube:
        def list(self, kind, namespace, selector, keep=lambda pod: pod):
            calls.append((kind, namespace, selector))
            return [keep(pod) for pod in pods]

    clock = [100.0]
    monkeypatch.setattr(handler, "kube", Kube)
    monkeypatch.setattr(handler.time, "monotonic", lambda: clock[0])
    kept = FleetMemory("WorkerFleet", "ns", "af-dask")
    got = intent()
    assert handler.read_routing(kept, "ns", "af-dask", got, started=0) is None and calls == []  # no worker yet
    assert handler.read_routing(kept, "ns", "af-dask", got, started=2) is None and len(calls) == 1
    assert calls == [("Pod", "ns", {"switchyard.dev/fleet": "af-dask"})]
    clock[0] += 9  # not again within ROUTING_READ_SECONDS; then at a doubling pace while none is found
    assert handler.read_routing(kept, "ns", "af-dask", got, started=2) is None and len(calls) == 1
    clock[0] += 1
    assert handler.read_routing(kept, "ns", "af-dask", got, started=2) is None and len(calls) == 2
    clock[0] += 19
    assert handler.read_routing(kept, "ns", "af-dask", got, started=2) is None and len(calls) == 2
    pods.append(check_pod("w-1", image, {"exitCode": 0, "message": LACKS}))
    clock[0] += 1
    verdict = handler.read_routing(kept, "ns", "af-dask", got, started=2)
    assert verdict == {"image": image, "routes": False, "message": LACKS.split(": ", 1)[1]} and len(calls) == 3
    # once the status holds the verdict for this image, no more lists
    known = intent(status={**fleet_child()["status"], "routing": verdict})
    clock[0] += 600
    assert handler.read_routing(kept, "ns", "af-dask", known, started=2) == verdict and len(calls) == 3
    # a new image is read at once
    other = intent({"image": "site/analysis:2"}, status={**fleet_child()["status"], "routing": verdict})
    assert handler.read_routing(kept, "ns", "af-dask", other, started=2) is None and len(calls) == 4
    # a fleet without a pool is never listed
    nopool = dataclasses.replace(got, plan=got.plan.model_copy(update={"pool": None}))
    assert handler.read_routing(kept, "ns", "af-dask", nopool, started=2) is None and len(calls) == 4


# ------------------------------------------------------------------ the published hash ring (issue #30 item 2)
def ring_hosts(config: dict) -> list[str]:
    from switchyard.routing import parse_ring

    return [cache.name for cache in parse_ring(config["data"]["ring"], allow_empty=True)]


def test_a_ring_host_without_a_ready_cache_pod_is_out_and_back_when_ready_again():
    from switchyard.desired.xcachepool import hosts_out

    assert hosts_out(["a", "b", "c"], [{"node": "a", "ready": True}, {"node": "b", "ready": False}]) == ("b", "c")
    assert hosts_out(["a", "b"], [{"node": "a", "ready": True}, {"node": "b", "ready": True}]) == ()
    # no planned host serves (a pool starting, every cache down): the planned ring stays
    assert hosts_out(["a", "b"], [{"node": "a", "ready": False}]) == ()
    assert hosts_out(["a"], [{"node": "x", "ready": True}]) == ()


def test_the_fleets_routing_configmap_leaves_out_a_host_whose_cache_pod_is_not_ready():
    got = intent()
    hosts = sorted(got.plan.cache_ring)
    assert len(hosts) >= 2

    def published(pods):
        out = desired_fleet("af-dask", "ns", got, got.plan.workers, {}, SETTINGS, cache_pods=pods)
        return ring_hosts(next(c for c in out.children if c["kind"] == "ConfigMap"))

    all_ready = [{"node": h, "ready": True} for h in hosts]
    assert published(all_ready) == hosts
    down = [{**p, "ready": p["node"] != hosts[0]} for p in all_ready]
    assert published(down) == hosts[1:]
    assert published([p for p in all_ready if p["node"] != hosts[0]]) == hosts[1:]  # its pod deleted
    assert published(()) == hosts                                                     # none read yet


def test_the_pools_hot_files_are_published_beside_the_ring_and_none_leaves_the_configmap_as_it_was():
    got = intent()

    def config(**kw):
        out = desired_fleet("af-dask", "ns", got, got.plan.workers, {}, SETTINGS, **kw)
        return next(c for c in out.children if c["kind"] == "ConfigMap")

    before = config()
    assert set(before["data"]) == {"ring", "switches"}
    assert config(hot_files=[]) == before
    hot = config(hot_files=[{"path": "/store/b.root", "replicas": 2}, {"path": "/store/a.root", "replicas": 3}])
    assert {k: v for k, v in hot["data"].items() if k != "hot"} == before["data"]
    assert hot["data"]["hot"].splitlines()[1:] == ["3 /store/a.root", "2 /store/b.root"]


def test_the_pool_says_which_hosts_are_out_of_the_ring_and_posts_an_event_when_that_changes():
    c = pool_child()
    hosts = sorted(h for hs in c["status"]["plan"]["hosts"].values() for h in hs)
    all_ready = [{"node": h, "ready": True} for h in hosts]
    steady = pool(pods=all_ready)
    assert steady.status["ringOut"] == [] and not [e for e in steady.events if e[1] == "RingChanged"]
    down = [{**p, "ready": p["node"] != hosts[0]} for p in all_ready]
    out = pool(pods=down)
    assert out.status["ringOut"] == [hosts[0]]
    assert [e for e in out.events if e[1] == "RingChanged"] == [
        ("Normal", "RingChanged", f"host(s) {hosts[0]} out of the hash ring (no Ready cache pod)")]
    said = {**c["status"], "ringOut": [hosts[0]]}
    assert not [e for e in pool(status=said, pods=down).events if e[1] == "RingChanged"]
    back = pool(status=said, pods=all_ready)
    assert back.status["ringOut"] == [] and [e for e in back.events if e[1] == "RingChanged"] == [
        ("Normal", "RingChanged", f"host(s) {hosts[0]} back in the hash ring")]


def hot_text(host: str, gbps_by_path: dict[str, float], pool_name: str = "af-xcache") -> str:
    """An exporter's /metrics text with the per-file read rates of one cache host."""
    name = "switchyard_xcache_hot_file_read_bytes_per_second"
    lines = [f"# TYPE {name} gauge"] + [
        f'{name}{{pool="{pool_name}",host="{host}",switch="rack-a",path="{path}"}} {gbps / 8 * 1e9}'
        for path, gbps in gbps_by_path.items()]
    return "\n".join(lines) + "\n"


def hot_pool(texts, status: dict | None = None, **kw) -> Outcome:
    counts = {sw: len(h) for sw, h in pool_child()["status"]["plan"]["hosts"].items()}
    all_ready = {sw: {"desired": n, "current": n, "ready": n} for sw, n in counts.items()}
    disk = None if texts is None else DiskRead({}, (), tuple(texts))
    kw.setdefault("ring", read_through())
    return pool(status=status, workloads=all_ready, disk=disk, **kw)


def read_through() -> dict[str, float]:
    """The pool's ring as a fleet with ring readers publishes it (the facility here reads locally: none)."""
    return dict.fromkeys(sorted(h for hs in pool_child()["status"]["plan"]["hosts"].values() for h in hs), 1.0)


def test_a_pool_host_budget_is_its_planned_cap_and_if_unmeasured_its_weight_share_of_the_rings_caps():
    from switchyard.api import XCachePoolSpec
    from switchyard.desired.hotfiles import HostBudget
    from switchyard.desired.xcachepool import host_budgets

    spec = XCachePoolSpec.model_validate({**pool_child()["spec"], "serveGbps": 40, "serveHeadroom": 0.25})
    slow = [dataclasses.replace(n, nic_gbps=20.0) if n.name == "rack-b-cache-0" else n for n in NODES]
    ring = {"rack-a-cache-0": 0.5, "rack-b-cache-0": 0.25, "rack-c-cache-0": 0.25}
    # caps 30 (40 less 25%), 20 (the NIC), 30: the ring's 80 Gbps split by weight; a measured host's own rates count
    assert host_budgets(spec, ring, slow, measured={"rack-a-cache-0"}) == {
        "rack-a-cache-0": HostBudget(30.0, None),
        "rack-b-cache-0": HostBudget(20.0, 20.0),
        "rack-c-cache-0": HostBudget(30.0, 20.0)}


def test_the_pool_lists_a_hot_file_from_its_exporters_texts_and_says_so():
    text = hot_text("rack-a-cache-0", {"/store/hot.root": 12.0, "/store/cold.root": 0.5})
    out = hot_pool([text, "not a metrics text {"])
    # 12 Gbps >= 0.25 of a 40 Gbps cap: hot; 2 replicas keep each home at 6 <= 0.25 x 40
    assert out.status["hotFiles"] == [{"path": "/store/hot.root", "replicas": 2}]
    assert [e for e in out.events if e[1] == "HotFilesChanged"] == [
        ("Normal", "HotFilesChanged", "hot files (1 listed): added /store/hot.root (x2)")]
    steady = hot_pool([text], status={**pool_child()["status"], "hotFiles": out.status["hotFiles"]})
    assert steady.status["hotFiles"] == out.status["hotFiles"]
    assert not [e for e in steady.events if e[1] == "HotFilesChanged"]


def test_without_an_exporter_text_the_hot_list_stays_as_it_was_and_decays_with_the_load():
    listed = {**pool_child()["status"], "hotFiles": [{"path": "/store/hot.root", "replicas": 3}]}
    for texts in (None, ()):  # not read (simulated nodes), or no exporter answered
        kept = hot_pool(texts, status=listed)
        assert kept.status["hotFiles"] == [{"path": "/store/hot.root", "replicas": 3}]
        assert not [e for e in kept.events if e[1] == "HotFilesChanged"]
    assert pool().status["hotFiles"] == []  # a new pool: empty
    cold = hot_pool([hot_text("rack-a-cache-0", {"/store/hot.root": 0.1})], status=listed)
    assert cold.status["hotFiles"] == []
    assert [e for e in cold.events if e[1] == "HotFilesChanged"] == [
        ("Normal", "HotFilesChanged", "hot files (0 listed): removed /store/hot.root")]


def test_the_hot_files_are_decided_over_the_ring_its_fleets_read_without_the_hosts_out():
    text = hot_text("rack-a-cache-0", {"/store/hot.root": 12.0})
    hosts = sorted(h for hs in pool_child()["status"]["plan"]["hosts"].values() for h in hs)
    assert hot_pool([text], ring={}).status["hotFiles"] == []  # no fleet reads the ring
    only_two = {hosts[0]: 0.5, hosts[1]: 0.5}
    assert hot_pool([text], ring=only_two).status["hotFiles"] == [{"path": "/store/hot.root", "replicas": 2}]
    one_out = [{"node": h, "ready": h != hosts[1]} for h in hosts]
    assert hot_pool([text], ring=only_two, pods=one_out).status["hotFiles"] == []  # a ring of one host


def test_the_hot_files_event_names_files_added_removed_and_replicas_moved_briefly():
    from switchyard.desired.xcachepool import hot_file_events

    before = [{"path": "/a", "replicas": 2}, {"path": "/b", "replicas": 2}, {"path": "/gone", "replicas": 4}]
    after = [{"path": "/a", "replicas": 2}, {"path": "/b", "replicas": 3}, {"path": "/new", "replicas": 2}]
    assert hot_file_events(before, after) == (("Normal", "HotFilesChanged", "hot files (3 listed): added /new (x2); "
                                               "removed /gone; replicas /b x2->x3"),)
    assert hot_file_events(before, before) == () and hot_file_events(None, []) == ()
    many = [{"path": f"/f{i}", "replicas": 2} for i in range(7)]
    assert hot_file_events([], many, shown=2)[0][2] == "hot files (7 listed): added /f0 (x2), /f1 (x2) and 5 more"
