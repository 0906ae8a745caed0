"""CachePrestage: its model's refusals, its Job, its desired state and its handler's reads."""

from __future__ import annotations

import pytest
from test_pod_security import violations

from switchyard import conditions as cond
from switchyard.api import reasons
from switchyard.api.analysisfacility import Network
from switchyard.api.prestage import MAX_INLINE_URLS, CachePrestageSpec
from switchyard.api.xcachepool import DEFAULT_XCACHE_IMAGE
from switchyard.builders.prestage import PRESTAGE_LABEL, build_prestage, urls_config_name
from switchyard.handlers.indexes import fleets_reading
from switchyard.builders.workerfleet import routing_config_name
from switchyard.desired import validate
from switchyard.desired.prestage import JobState, desired_prestage, ring_source
from switchyard.handlers import prestage as handler
from switchyard.policy.imagepolicy import ImagePolicy
from switchyard.policy.settings import Settings
from switchyard.prestage import Progress

URLS = ["root://origin.example.org//store/a.root", "root://origin.example.org:1094//store/b.root"]


def spec(**extra) -> dict:
    return {"poolRef": {"name": "pool"}, "urls": URLS, "wanShare": 0.5, **extra}


def pool(**extra) -> dict:
    return {"metadata": {"name": "pool"},
            "spec": {"facilityRef": {"name": "af"}, "origin": {"host": "origin.example.org"},
                     "image": "registry.example.org/switchyard-xcache:0.1.0", "xrootdUser": {"uid": 1094, "gid": 1094},
                     **extra}}


FACILITY = {"metadata": {"name": "af"}, "spec": {"network": {"wanGbps": 40, "switches": [{"name": "s1",
                                                                                         "uplinkGbps": 100}]}}}


# ------------------------------------------------------------------ the model
@pytest.mark.parametrize("wire, fragment", [
    (spec(wanShare=0), "wanShare"),
    (spec(wanShare=1.5), "wanShare"),
    ({**spec(), "urlsFrom": {"configMap": "list", "key": "urls"}}, "exactly one of urls and urlsFrom"),
    ({"poolRef": {"name": "pool"}, "wanShare": 0.5}, "exactly one of urls and urlsFrom"),
    (spec(urls=[]), "urls"),
    (spec(urls=["https://origin/store/a.root"]), "urls"),
    (spec(urls=["root://origin//store/a b.root"]), "urls"),          # a space would split the line in two
    (spec(urls=["root://origin//a\nroot://other//b"]), "urls"),     # nor may a line break smuggle a second URL
    (spec(urls=[URLS[0]] * (MAX_INLINE_URLS + 1)), "urls"),
    (spec(parallel=0), "parallel"),
    ({**spec(), "urls": None, "urlsFrom": {"configMap": "List", "key": "urls"}}, "configMap"),
])
def test_the_model_refuses(wire, fragment):
    model, error = validate(CachePrestageSpec, {k: v for k, v in wire.items() if v is not None})
    assert model is None and fragment in error


def test_the_model_takes_a_list_or_a_configmap_key():
    assert validate(CachePrestageSpec, spec())[0].urls == URLS
    taken, _ = validate(CachePrestageSpec, {"poolRef": {"name": "pool"}, "wanShare": 1,
                                            "urlsFrom": {"configMap": "dataset.v1", "key": "urls.txt"}})
    assert taken.urls_from.key == "urls.txt" and taken.parallel == 4


# ------------------------------------------------------------------ the builder
def _children(**extra):
    model, _ = validate(CachePrestageSpec, spec(**extra))
    return build_prestage("warm", "ns", model, pool="pool", pool_port=1094, origin_mode="fixed", ring_fleet="fleet",
                          image="registry.example.org/switchyard-xcache:0.1.0", gbps=20.0, uid=1094)


def test_the_job_reads_the_list_through_the_fleets_ring_at_the_pace():
    config, job = _children()
    assert config["metadata"]["name"] == urls_config_name("warm") and config["data"]["urls"] == "".join(
        f"{u}\n" for u in URLS)
    pod = job["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["switchyard", "prestage", "--urls", "/etc/switchyard/prestage/urls", "--gbps",
                                    "20", "--parallel", "4", "--metrics-port", "9934"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SWITCHYARD_ROUTING"] == "hashed" and env["SWITCHYARD_CACHE_RING_FILE"] == "/etc/switchyard/routing/ring"
    assert env["SWITCHYARD_CACHE_ENDPOINT"] == "root://pool.ns.svc:1094"
    assert env["SWITCHYARD_CACHE_HOT_FILE"] == "/dev/null"  # every file to its home, whatever the pod's name
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["routing"]["configMap"]["name"] == routing_config_name("fleet")
    assert "emptyDir" in volumes["journal"] and pod["spec"]["restartPolicy"] == "OnFailure"
    assert job["metadata"]["labels"][PRESTAGE_LABEL] == "warm" == pod["metadata"]["labels"][PRESTAGE_LABEL]


def test_the_jobs_memory_limit_grows_with_the_files_read_at_once():
    limit = lambda parallel: _children(parallel=parallel)[1]["spec"]["template"]["spec"]["containers"][0][  # noqa: E731
        "resources"]["limits"]["memory"]
    assert limit(4) == "320Mi" and limit(64) == "1280Mi"


def test_the_jobs_pod_is_least_privilege():
    _, job = _children()
    assert violations(job["spec"]["template"]) == []
    assert job["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_a_list_in_a_configmap_is_mounted_from_it_and_a_changed_spec_is_a_new_job():
    model, _ = validate(CachePrestageSpec, {"poolRef": {"name": "pool"}, "wanShare": 0.5,
                                            "urlsFrom": {"configMap": "dataset", "key": "big.txt"}})
    [job] = build_prestage("warm", "ns", model, pool="pool", pool_port=1094, origin_mode="fixed", ring_fleet="fleet",
                           image="i", gbps=20.0, uid=1094)
    urls = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "urls")
    assert urls["configMap"] == {"name": "dataset", "items": [{"key": "big.txt", "path": "urls"}]}
    assert _children()[1]["metadata"]["name"] == _children()[1]["metadata"]["name"]  # deterministic
    assert _children(parallel=8)[1]["metadata"]["name"] != _children()[1]["metadata"]["name"]


# ------------------------------------------------------------------ desired state
def decide(before=None, spec_raw=None, **world):
    args = {"pool": pool(), "facility": FACILITY, "ring_fleets": ["fleet"], "job": None, "progress": None,
            "settings": Settings(), **world}
    return desired_prestage("warm", "ns", spec_raw or spec(), before, **args)


def test_what_a_prestage_waits_for():
    assert decide(spec_raw={"poolRef": {"name": "pool"}}).states["Ready"].reason == reasons.INVALID_SPEC
    waiting = decide(ring_fleets=[])
    assert waiting.states["Ready"].reason == reasons.AWAITING_RING and waiting.states["Progressing"].status
    assert waiting.children is None  # a Job already running is left as it is
    osg = decide(pool=pool(image=DEFAULT_XCACHE_IMAGE))
    assert osg.states["Ready"].reason == reasons.INVALID_SPEC and "spec.image" in osg.states["Ready"].message
    assert decide(pool=pool(image=DEFAULT_XCACHE_IMAGE), spec_raw=spec(image="site.example.org/xc:1")).converges
    refused = decide(settings=Settings(images=ImagePolicy.parse("trusted.example.org/")))
    assert refused.states["Ready"].reason == reasons.IMAGE_NOT_ALLOWED and refused.children is None


@pytest.mark.parametrize("image", [DEFAULT_XCACHE_IMAGE, "hub.opensciencegrid.org/opensciencegrid/xcache:24-release",
                                   "hub.opensciencegrid.org/opensciencegrid/xcache@sha256:" + "0" * 64,
                                   "opensciencegrid/xcache:23-release", "docker.io/opensciencegrid/xcache"])
def test_osgs_image_is_refused_at_any_tag_or_digest(image):
    refused = decide(pool=pool(image=image))
    assert refused.states["Ready"].reason == reasons.INVALID_SPEC and refused.children is None


def test_a_pool_on_an_image_named_like_osgs_is_not_refused():
    assert decide(pool=pool(image="registry.example.org/opensciencegrid/xcache-switchyard:1")).converges


def test_a_scitokens_pool_is_refused_at_once():
    tls = {"mode": "scitokens", "issuers": ["https://tokens.example.org"],
           "tlsSecret": "pool-tls"}
    refused = decide(pool=pool(auth=tls))
    assert refused.states["Ready"].reason == reasons.INVALID_SPEC and "SciToken" in refused.states["Ready"].message
    assert refused.children is None and not refused.states["Progressing"].status


@pytest.mark.parametrize("world, reason", [
    ({"pool": None}, reasons.POOL_NOT_FOUND),
    ({"pool": pool(xrootdUser={"uid": -1})}, reasons.POOL_INVALID),
    ({"facility": None}, reasons.FACILITY_NOT_FOUND),
    ({"facility": {"spec": {"network": {"wanGbps": -1, "switches": []}}}}, reasons.FACILITY_INVALID),
])
def test_a_prestage_without_its_pool_or_facility_has_no_job(world, reason):
    # A Job running at the WAN share for a pool that is gone is waste: no children, so it is pruned.
    before = {"job": "warm-fetch-1", "ringFrom": "fleet", "files": {"total": 2, "done": 1, "failed": 0, "remaining": 1}}
    outcome = decide(before=before, job=JobState("warm-fetch-1"), progress=Progress(1, 0, 1, 5, 5), **world)
    assert outcome.states["Ready"].reason == reason
    assert outcome.converges and outcome.children == []
    assert "job" not in outcome.status and "ringFrom" not in outcome.status  # the status names no Job it prunes
    assert outcome.status["files"] == before["files"]


def test_a_job_running_while_the_ring_is_gone_is_still_reported():
    before = {"job": "warm-fetch-1", "ringFrom": "fleet"}
    waiting = decide(before=before, ring_fleets=[], job=JobState("warm-fetch-1"), progress=Progress(1, 0, 2, 10, 20))
    assert waiting.children is None and waiting.states["Ready"].reason == reasons.AWAITING_RING
    assert waiting.status["job"] == "warm-fetch-1" and waiting.status["ringFrom"] == "fleet"
    assert waiting.status["files"]["done"] == 1 and "1/3 files" in waiting.states["Ready"].message
    assert waiting.progress == Progress(1, 0, 2, 10, 20)  # its metrics too
    ended = decide(before=before, ring_fleets=[], job=JobState("warm-fetch-1", succeeded=True),
                   progress=Progress(3, 0, 0, 30, 0))
    assert ended.states["Ready"].status is True and ended.status["job"] == "warm-fetch-1"
    refused = decide(before=before, job=JobState("warm-fetch-1"), progress=Progress(1, 0, 2, 10, 20),
                     settings=Settings(images=ImagePolicy.parse("trusted.example.org/")))
    assert refused.status["job"] == "warm-fetch-1" and refused.status["files"]["done"] == 1


def test_the_wan_capacity_is_the_facilitys_model_default_when_unset():
    facility = {"spec": {"network": {"switches": [{"name": "s1", "uplinkGbps": 100}]}}}
    assert decide(facility=facility).gbps == 0.5 * Network.model_fields["wan_gbps"].default


def test_the_pace_is_the_share_of_the_facilitys_wan():
    outcome = decide()
    assert outcome.gbps == 20.0 and outcome.status["gbps"] == 20.0 and outcome.status["ringFrom"] == "fleet"
    assert outcome.states["Ready"].reason == reasons.PRESTAGING


def test_progress_running_done_and_failed():
    job = decide().job_name
    running = decide(job=JobState(job), progress=Progress(3, 0, 9, 300, 900))
    assert running.status["files"] == {"total": 12, "done": 3, "failed": 0, "remaining": 9}
    assert "3/12 files" in running.states["Ready"].message and running.states["Progressing"].status
    done = decide(job=JobState(job, succeeded=True), progress=Progress(12, 0, 0, 1200, 0))
    assert done.states["Ready"].status is True and done.states["Degraded"].status is False
    failed = decide(job=JobState(job, failed=True, failed_message="BackoffLimitExceeded"),
                    progress=Progress(11, 1, 0, 1100, 0, ("root://o//x: xrdcp exit 54",)))
    assert failed.states["Ready"].reason == reasons.PRESTAGE_FAILED and failed.states["Degraded"].status is True
    assert failed.status["failedUrls"] == ["root://o//x: xrdcp exit 54"]


def test_without_a_read_the_status_keeps_its_figures():
    before = {"files": {"total": 2, "done": 1, "failed": 0, "remaining": 1}, "bytes": {"done": 5, "remaining": 5}}
    assert decide(before=before).status["files"] == before["files"]


def test_the_ring_source_stays_while_its_fleet_reads_through_the_pool():
    assert ring_source(["a", "b"], {"ringFrom": "b"}) == "b"
    assert ring_source(["a"], {"ringFrom": "b"}) == "a"
    assert ring_source([], None) is None


# ------------------------------------------------------------------ the handler's reads
def test_progress_is_read_from_the_running_pod_else_from_the_ended_runs_report(monkeypatch):
    text = ("switchyard_prestage_runner_files{state=\"done\"} 2\nswitchyard_prestage_runner_files{state=\"failed\"} 0\n"
            "switchyard_prestage_runner_files{state=\"remaining\"} 1\nswitchyard_prestage_runner_bytes{state=\"done\"} 20\n"
            "switchyard_prestage_runner_bytes{state=\"remaining\"} 10\n")
    asked = []
    monkeypatch.setattr(handler, "metrics_text", lambda address, port: asked.append((address, port)) or text)
    running = {"metadata": {"creationTimestamp": "2026-01-01T00:00:02Z"}, "status": {"phase": "Running", "podIP": "10.1.0.5"}}
    assert handler.read_progress([running]) == Progress(2, 0, 1, 20, 10) and asked == [("10.1.0.5", 9934)]
    ended = {"metadata": {"creationTimestamp": "2026-01-01T00:00:01Z"}, "status": {"phase": "Succeeded",
             "containerStatuses": [{"state": {"terminated": {"message": Progress(3, 0, 0, 30, 0).report()}}}]}}
    assert handler.read_progress([ended]) == Progress(3, 0, 0, 30, 0)
    monkeypatch.setattr(handler, "metrics_text", lambda address, port: None)  # the runner does not answer
    assert handler.read_progress([running, ended]) == Progress(3, 0, 0, 30, 0)


def test_the_jobs_state_from_its_conditions_and_its_pods():
    job = {"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Failed", "status": "True",
                                                                "reason": "BackoffLimitExceeded"}]}}
    pods = [{"status": {"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}}]
    assert handler._job_state(job, pods) == JobState("j", failed=True, failed_message="BackoffLimitExceeded",
                                                     pod_waiting="ErrImagePull")
    complete = {"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert handler._job_state(complete, []).succeeded


# Plans as the facility writes them: every fleet's carries the pool's whole cacheRing; `hashed` counts the
# workers reading through it, per switch (examples/facility.yaml on e2e/topologies/mini.yaml: {} everywhere).
RING = {"node-a": 1.0, "node-b": 1.0}
RING_PLAN = {"pool": "pool", "cacheRing": RING, "hashed": {"s1": 2}, "routing": {"s1": "hashed"}}
LOCAL_PLAN = {"pool": "pool", "cacheRing": RING, "hashed": {}, "routing": {"s1": "local"}}


def test_only_fleets_with_ring_readers_give_a_prestage_its_ring():
    fleet = lambda name, plan: {"metadata": {"name": name, "namespace": "ns"}, "status": {"plan": plan}}  # noqa: E731
    index = {"u": [fleet("a-local", LOCAL_PLAN), fleet("b-ring", RING_PLAN),
                   fleet("c-none-hashed", {**RING_PLAN, "hashed": {"s1": 0}})]}
    assert fleets_reading(index, "ns", "pool", ring_only=True) == ["b-ring"]
    assert fleets_reading(index, "ns", "pool") == ["a-local", "b-ring", "c-none-hashed"]
    assert fleets_reading({"u": [fleet("a-local", LOCAL_PLAN)]}, "ns", "pool", ring_only=True) == []


class FakeKube:
    def __init__(self, objects: dict, jobs: list, pods: list) -> None:
        self.objects, self.jobs, self.pods = objects, jobs, pods

    def get(self, kind, namespace, name):
        return self.objects.get((kind, name))

    def list(self, kind, namespace=None, selector=None, **_):
        return {"Job": self.jobs, "Pod": self.pods}[kind]


def test_the_reconcile_applies_the_job_and_reports_the_runners_progress(monkeypatch):
    body = {"kind": "CachePrestage", "metadata": {"namespace": "ns", "name": "warm", "uid": "u", "generation": 1},
            "spec": spec(), "status": {}}
    fake = FakeKube({("XCachePool", "pool"): pool(), ("AnalysisFacility", "af"): FACILITY}, [], [])
    applied, written = [], []
    monkeypatch.setattr(handler, "kube", lambda: fake)
    monkeypatch.setattr(handler, "current", lambda: Settings())
    monkeypatch.setattr(handler, "converge", lambda body, children, kinds, logger: applied.append(children))
    monkeypatch.setattr(handler, "write_status", lambda kind, body, status, states, logger: written.append((status, states)))
    index = {"uid": [{"metadata": {"name": "fleet", "namespace": "ns"}, "status": {"plan": RING_PLAN}},
                     # a fleet whose readers all read their switch's caches: its ring is no ring they read
                     {"metadata": {"name": "a-local-fleet", "namespace": "ns"}, "status": {"plan": LOCAL_PLAN}}]}
    assert handler.reconcile(body, None, fleet_index=index) == handler.RUNNING_SECONDS
    [children] = applied
    job = children[-1]["metadata"]["name"]
    assert written[-1][0]["job"] == job and written[-1][1]["Ready"].reason == reasons.PRESTAGING
    assert written[-1][0]["ringFrom"] == "fleet"

    # The Job ran to its end (an operator restarted meanwhile finds it by status.job): Ready from its report.
    body["status"] = {"job": job}
    fake.jobs = [{"metadata": {"name": job}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}]
    fake.pods = [{"metadata": {"labels": {"job-name": job}, "creationTimestamp": "t"}, "status": {
        "phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {
            "message": Progress(2, 0, 0, 20, 0).report()}}}]}}]
    assert handler.reconcile(body, None, fleet_index=index) == handler.SETTLED_SECONDS
    status, states = written[-1]
    assert states["Ready"] == cond.ready(states["Ready"].message)["Ready"] and status["files"]["done"] == 2
    assert applied[-1][-1]["metadata"]["name"] == job  # the same Job: nothing of it changes
