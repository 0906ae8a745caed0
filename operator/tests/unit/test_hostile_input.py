"""Hostile input, class by class, where the check is pure: the models (the CRD's own patterns and
CEL rules, evaluated offline), the host-path policy, the plan contract, names and message text."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import re

import yaml

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from switchyard.policy import hostpaths
from switchyard.api import KINDS, AnalysisFacilitySpec, WorkerFleetSpec, XCachePoolSpec
from switchyard.api.base import OBJECT_NAME_MAX, OBJECT_NAME_PATTERN
from switchyard.api.plans import FleetPlan, PoolPlan, decode
from switchyard.api.s3staging import Bucket, External
from switchyard.builders.common import child_name
from switchyard.builders.facility import pool_object_name
from switchyard import conditions as cond
from switchyard import planner
from switchyard.api.units import MIN_GBPS
from switchyard.conditions import printable
from switchyard.desired.facility import desired_facility, facility_states
from switchyard.desired import awaiting
from switchyard.policy.settings import Settings
from switchyard.desired.facility import plan_with_attached as _plan
from switchyard.planner import FleetRequest, PoolRequest, Unsatisfiable, solver
from switchyard.cli.render import render
from switchyard.topology import NodeInfo, snapshot
from switchyard.topology import load_topology


REPO = pathlib.Path(__file__).resolve().parents[3]


def pool(**storage) -> dict:
    return {"facilityRef": {"name": "af"}, "origin": {"host": "origin.example.org"}, "storage": storage}


# ------------------------------------------------------------------ 1. host paths
@pytest.mark.parametrize("path", ["/mnt/../etc", "//etc", "/mnt/nvme0/.", "/mnt/nvme0/", "/mnt/./x", "/mnt//x",
                                  "/mnt/.hidden", "/..", "/", "relative/path", "/mnt/x y", "/mnt/$(id)", "/mnt/x\n"])
def test_paths_that_alias_another_are_refused_by_the_schema(path):
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate(pool(dataPaths=[path]))
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate(pool(metaPath=path))


@pytest.mark.parametrize("data, meta", [(["/mnt/a", "/mnt/a/b"], "/mnt/m"), (["/mnt/m/x"], "/mnt/m"),
                                        (["/mnt/a"], "/mnt/a/meta"), (["/mnt/a"], "/mnt/a"), (["/mnt/a", "/mnt/a"], "/mnt/m")])
def test_disks_inside_one_another_are_refused(data, meta):
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate(pool(dataPaths=data, metaPath=meta))


@pytest.mark.parametrize("path", ["/etc", "/proc", "/var/run", "/var/lib/kubelet/pods", "/mnt", "/mntx/evil",
                                  "/dataset/x", "/root/.ssh", "/dev/sda", "/sys/fs/cgroup", "/srv"])
def test_well_formed_paths_outside_the_default_allowlist_are_refused(path):
    policy = hostpaths.HostPathPolicy()
    assert not policy.allows(path)
    refusal = hostpaths.refusal([path, "/mnt/nvme0"], policy)
    assert refusal["Ready"].reason == "HostPathNotAllowed" and path in refusal["Ready"].message
    assert "/mnt/nvme0," not in refusal["Ready"].message  # only the offending path is named


@pytest.mark.parametrize("path", ["/mnt/nvme0", "/data/cache/disk1", "/srv/xcache-meta"])
def test_paths_below_an_allowed_directory_pass(path):
    assert hostpaths.HostPathPolicy().allows(path)
    assert hostpaths.refusal([path], hostpaths.HostPathPolicy()) is None


def test_the_admins_list_is_normalised_and_never_admits_the_root():
    policy = hostpaths.HostPathPolicy.parse(" /nvme// , /, relative, /scratch/./cache ")
    assert policy.prefixes == ("/nvme/", "/scratch/cache/")
    assert policy.allows("/nvme/0") and not policy.allows("/nvme") and not policy.allows("/nvmex/0")
    assert not policy.allows("/nvme/../etc") and not policy.allows("/nvme//0")
    assert hostpaths.HostPathPolicy.parse("").prefixes == ()  # set but empty: nothing allowed
    assert hostpaths.HostPathPolicy.parse(None).prefixes == hostpaths.DEFAULT_PREFIXES


# ------------------------------------------------------------------ 2. names
def test_switch_names_that_fold_alike_give_distinct_child_names():
    names = {child_name("af-xc", s) for s in ("rack-1", "rack.1", "rack_1", "Rack-1", "RACK.1")}
    assert len(names) == 5
    assert child_name("af-xc", "rack-1") == "af-xc-rack-1"  # names that need no folding are unchanged


# Kubernetes' own name rules (apimachinery's validation), and what the controllers append.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
REVISION_HASH = 10   # the controller-revision-hash label is '<statefulset>-<hash>', the hash up to 10 characters
SWITCHYARD_KINDS = {k.kind: k for k in KINDS}


def subdomain(name: str) -> bool:
    return 0 < len(name) <= 253 and all(DNS1123_LABEL.match(part) for part in name.split("."))


def name_problems(obj: dict) -> list[str]:
    """What the API server (or the child's controller) refuses in `obj`'s name and label values."""
    kind, name, spec = obj["kind"], obj["metadata"]["name"], obj.get("spec") or {}
    out = []
    if kind in SWITCHYARD_KINDS:
        if len(name) > OBJECT_NAME_MAX or not re.match(OBJECT_NAME_PATTERN, name):
            out.append("its own CRD's metadata.name rule")
        try:
            SWITCHYARD_KINDS[kind].spec.model_validate(spec)
        except ValidationError as exc:
            out.append(f"its own spec: {exc}")
    elif kind == "Service":
        if len(name) > 63 or not DNS1035_LABEL.match(name):
            out.append("a Service name is a DNS-1035 label")
    elif not subdomain(name):
        out.append("a DNS-1123 subdomain")
    if kind == "StatefulSet":
        last_pod = f"{name}-{max(spec['replicas'] - 1, 0)}"
        if len(last_pod) > 63 or not DNS1123_LABEL.match(last_pod):
            out.append("its pods' names are their host names (DNS-1123 labels)")
        if len(name) + 1 + REVISION_HASH > 63:
            out.append("its controller-revision-hash label value")
    label_sets = [obj["metadata"].get("labels") or {}, (spec.get("selector") or {}).get("matchLabels") or {},
                  ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {},
                  (spec.get("podSelector") or {}).get("matchLabels") or {}]
    label_sets += [(peer.get("podSelector") or {}).get("matchLabels") or {}
                   for rule in spec.get("ingress") or () for peer in rule.get("from") or ()]
    if kind == "Service":
        label_sets.append(spec.get("selector") or {})
    for values in label_sets:
        out += [f"label {k}={v!r}" for k, v in values.items() if len(v) > 63 or not LABEL_VALUE.match(v)]
    return [f"{kind} {name}: {why}" for why in out]


def _name(first: str, middle: str, last: str, length: int):
    """A name of exactly `length` characters from the three alphabets."""
    if length == 1:
        return st.sampled_from(sorted(set(first) & set(last)))
    return st.tuples(st.sampled_from(first), st.text(middle, min_size=length - 2, max_size=length - 2),
                     st.sampled_from(last)).map("".join)


LOWER, DIGITS = "abcdefghijklmnopqrstuvwxyz", "0123456789"
# Each name field at its schema's limit (most examples) or near it.
facility_names = st.sampled_from([OBJECT_NAME_MAX, OBJECT_NAME_MAX - 1, 1]).flatmap(
    lambda n: _name(LOWER, LOWER + DIGITS + "-", LOWER + DIGITS, n))
dns_labels = st.sampled_from([40, 40, 39, 1]).flatmap(
    lambda n: _name(LOWER + DIGITS, LOWER + DIGITS + "-", LOWER + DIGITS, n))
switch_names = st.sampled_from([63, 63, 62, 1]).flatmap(
    lambda n: _name(LOWER + LOWER.upper() + DIGITS, LOWER + LOWER.upper() + DIGITS + "-_.", LOWER + DIGITS, n))


def long_facility(name: str, pools: list[str], fleets: list[str], switches: list[str]) -> tuple[dict, list]:
    """A facility using every name field, and nodes (two cache hosts, two worker nodes) on each switch."""
    nodes = [NodeInfo(name=f"n{s}-{kind}-{i}", labels={"switchyard.dev/switch": sw, "switchyard.dev/nvme": "2"}
                      if kind == "cache" else {"switchyard.dev/switch": sw}, nic_gbps=25, cpu_millis=32000,
                      memory_bytes=128 * 2**30, pods=110)
             for s, sw in enumerate(switches) for kind in ("cache", "worker") for i in range(2)]
    spec = {
        "network": {"switches": [{"name": sw, "uplinkGbps": 40} for sw in switches]},
        "routing": "auto",
        "cachePools": [{"name": p, "origin": {"host": "origin.example.org"}, "resources": {"cpu": "2", "memory": "12Gi"}}
                       for p in pools],
        "fleets": [{"name": f, "replicas": 6, "cores": 2, "memoryGiB": 4, "pool": pools[i % len(pools)],
                    "dask": {"createScheduler": True}} for i, f in enumerate(fleets)],
        "staging": {"embedded": {}, "buckets": [{"name": "scratch"}]},
    }
    return {"apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility", "metadata": {"name": name},
            "spec": spec}, nodes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(facility=facility_names, pools=st.lists(dns_labels, min_size=1, max_size=2, unique=True),
       fleets=st.lists(dns_labels, min_size=1, max_size=2, unique=True),
       switches=st.lists(switch_names, min_size=1, max_size=3, unique_by=str.lower))
def test_every_name_the_schema_admits_gives_children_their_own_schemas_and_kubernetes_admit(
        facility, pools, fleets, switches):
    doc, nodes = long_facility(facility, pools, fleets, switches)
    AnalysisFacilitySpec.model_validate(doc["spec"])  # the input is one the API server admits
    objects = render(doc, nodes)
    kinds = {o["kind"] for o in objects}
    assert {"XCachePool", "WorkerFleet", "S3Staging", "StatefulSet", "Deployment", "Service"} <= kinds
    assert not [p for o in objects for p in name_problems(o)]
    keys = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys))  # no two children fold to one name


@pytest.mark.parametrize("obj, why", [
    ({"kind": "XCachePool", "metadata": {"name": "a" * 41}, "spec": {}}, "metadata.name rule"),
    ({"kind": "Service", "metadata": {"name": "1abc"}}, "DNS-1035"),
    ({"kind": "StatefulSet", "metadata": {"name": "a" * 53}, "spec": {"replicas": 1}}, "controller-revision-hash"),
    ({"kind": "Deployment", "metadata": {"name": "a", "labels": {"x": "b" * 64}}}, "label x"),
])
def test_the_name_rules_refuse_what_kubernetes_refuses(obj, why):
    assert any(why in p for p in name_problems(obj)), name_problems(obj)


def test_inline_children_fit_their_own_kinds_names():
    # (the cut the API server refused: '<facility>-<pool>' at 52 characters, the kinds' own limit 40)
    name = pool_object_name("f" * 40, "p" * 40)
    assert len(name) == OBJECT_NAME_MAX and re.match(OBJECT_NAME_PATTERN, name)
    assert pool_object_name("f" * 40, "p" * 40) != pool_object_name("f" * 40, "p" * 39 + "q")
    assert pool_object_name("af", "xc") == "af-xc"


# ------------------------------------------------------------------ 3. forged or malformed plans
@pytest.mark.parametrize("raw, field", [
    ({"facility": "af", "hosts": {"sw1": "node"}}, "hosts"),
    ({"facility": "af", "hosts": {"sw1": [1]}}, "hosts"),
    ({"facility": "af", "switchLabel": 7}, "switchLabel"),
    ({"facility": "af", "hosts": {"sw1": ["../../etc"]}}, "hosts"),
    ({"facility": "af", "bogus": 1}, "bogus"),
    ({"hosts": {}}, "facility"),
    ("not an object", "plan"),
])
def test_a_malformed_pool_plan_is_reported_with_its_field(raw, field):
    plan, why = decode(PoolPlan, {"plan": raw}, "af")
    assert plan is None and why.startswith("status.plan") and field in why


@pytest.mark.parametrize("raw, field", [
    ({"facility": "af", "workers": {"sw1": -3}}, "workers"),
    ({"facility": "af", "workers": {"sw1": "many"}}, "workers"),
    ({"facility": "af", "routing": {"sw1": "everywhere"}}, "routing"),
    ({"facility": "af", "poolPort": 70000}, "poolPort"),
    ({"facility": "af", "unplaced": -1}, "unplaced"),
    ({"facility": "af", "problem": {"reason": "bad reason\n", "message": ""}}, "problem"),
])
def test_a_malformed_fleet_plan_is_reported_with_its_field(raw, field):
    plan, why = decode(FleetPlan, {"plan": raw}, "af")
    assert plan is None and field in why


def test_a_plan_of_another_facility_or_none_means_waiting():
    assert decode(PoolPlan, {"plan": {"facility": "other"}}, "af") == (None, "")
    assert decode(PoolPlan, {}, "af") == (None, "")
    assert decode(PoolPlan, None, "af") == (None, "")
    plan, why = decode(PoolPlan, {"plan": {"facility": "af", "hosts": {"sw1": ["n1"]}}}, "af")
    assert why == "" and plan.hosts == {"sw1": ["n1"]}


# ------------------------------------------------------------------ 4. crashes and silence
@pytest.mark.parametrize("env", ["POD_NAME", "POD_IP", "SWITCHYARD_CACHE_ENDPOINT", "SWITCHYARD_X", "AWS_ACCESS_KEY_ID",
                                 "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"])
def test_env_that_shadows_the_operators_is_refused(env):
    with pytest.raises(ValidationError, match="env must not set"):
        WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "taskvine": {"managerHost": "m"},
                                        "env": [{"name": env, "value": "x"}]})


@pytest.mark.parametrize("memory", [1e-12, 0.001, 0.06])
def test_worker_memory_below_64_mib_is_refused(memory):
    with pytest.raises(ValidationError, match="memoryGiB"):
        WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "taskvine": {"managerHost": "m"},
                                        "memoryGiB": memory})


@pytest.mark.parametrize("memory", ["0.5", "1", "1Ki", "512Mi"])
def test_cache_memory_below_its_ram_is_refused(memory):
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate({**pool(), "resources": {"memory": memory}})


# ------------------------------------------------------------------ 5. one team's fleet
TOPOLOGY = {"switches": [{"name": "sw1", "uplinkGbps": 100, "nodes": [
    {"name": "n", "count": 4, "cpu": 16, "memoryGiB": 64, "nicGbps": 25, "nvmeDisks": 2}]}]}
FACILITY = AnalysisFacilitySpec.model_validate({
    "network": {"switches": [{"name": "sw1", "uplinkGbps": 100}]},
    "cachePools": [{"name": "xc", "origin": {"host": "o.example"}, "resources": {"cpu": "2", "memory": "12Gi"}}],
    "fleets": [{"name": "dask", "replicas": 4, "cores": 1, "memoryGiB": 2, "dask": {"createScheduler": True}}],
})


def team(name: str, **spec) -> tuple[dict, WorkerFleetSpec]:
    body = {"facilityRef": {"name": "af"}, "replicas": 2, "taskvine": {"managerHost": "m"}, **spec}
    return {"metadata": {"name": name}, "spec": body}, WorkerFleetSpec.model_validate(body)


def test_a_standalone_fleet_the_facility_cannot_place_is_refused_alone():
    topology = snapshot(load_topology(TOPOLOGY, "t").node_infos(), FACILITY.network)
    fleets = [team("good"), team("nopool", pool="missing"), team("huge", cores=64), team("fat", memoryGiB=1000)]
    plan, refused = _plan(topology, FACILITY, fleets, None)
    assert sorted(refused) == ["fat", "huge", "nopool"]
    assert refused["nopool"][0] == "UnknownPool" and refused["huge"][0] == "NoNodeFitsWorker"
    assert sum(plan.placement.workers["good"].values()) == 2 and sum(plan.placement.workers["dask"].values()) == 4


def greedy_scene(**greedy):
    """The e2e facility (mini topology, 6 dask workers) with a team's fleet of 2 running, and a greedy fleet."""
    spec = AnalysisFacilitySpec.model_validate({**mini_facility(6), "routing": "local"})
    topology = snapshot(MINI_NODES, spec.network)
    running, _ = _plan(topology, spec, [team("good")], None)
    body = {"replicas": 100_000, "cores": 8, "memoryGiB": 1, "readGbps": 0.1, **greedy}
    return spec, topology, running, team("greedy", **body)


def kept(plan, fleets=("dask", "good")) -> tuple:
    p = plan.placement
    return ({f: dict(p.workers[f]) for f in fleets}, {f: dict(p.hashed.get(f, {})) for f in fleets}, dict(p.caches))


def test_a_newcomer_beyond_capacity_gets_what_remains_and_moves_nothing_that_runs():
    spec, topology, running, greedy = greedy_scene()
    pools = [PoolRequest(p.name, p) for p in spec.cache_pools]
    fleets = [FleetRequest("dask", spec.fleets[0]), FleetRequest("good", team("good")[1]), FleetRequest("greedy", greedy[1])]
    # The hostile input: the whole re-plan would move the running workers (and drop cache hosts) for the newcomer.
    assert kept(solver._replan(topology, pools, fleets, spec.routing, running.placement)) != kept(running)
    plan, refused = _plan(topology, spec, [team("good"), greedy], running.placement)
    assert not refused and kept(plan) == kept(running)
    placed = sum(plan.placement.workers["greedy"].values())
    assert placed > 0 and plan.unplaced == {"greedy": 100_000 - placed}
    # What it got is all that remains: one worker more stays unplaced, and nothing moves for it.
    spec_more = team("greedy", replicas=placed + 1, cores=8, memoryGiB=1, readGbps=0.1)
    again, _ = _plan(topology, spec, [team("good"), spec_more], plan.placement)
    assert again.unplaced == {"greedy": 1} and again.placement == plan.placement


def test_a_running_fleet_that_grows_beyond_capacity_keeps_its_workers_where_they_are():
    spec, topology, running, _ = greedy_scene()
    grown = spec.model_copy(update={"fleets": [spec.fleets[0].model_copy(update={"replicas": 100_000, "cores": 8})]})
    plan, _ = _plan(topology, grown, [team("good")], running.placement)
    for switch, n in running.placement.workers["dask"].items():
        assert plan.placement.workers["dask"][switch] >= n
    assert kept(plan, ("good",)) == kept(running, ("good",))
    assert sum(plan.placement.workers["dask"].values()) + plan.unplaced["dask"] == 100_000


def test_when_everything_fits_the_re_plan_is_the_planners_own():
    spec, topology, running, _ = greedy_scene()
    pools = [PoolRequest(p.name, p) for p in spec.cache_pools]
    small = team("small", replicas=3)
    fleets = [FleetRequest("dask", spec.fleets[0]), FleetRequest("good", team("good")[1]), FleetRequest("small", small[1])]
    assert planner.plan(topology, pools, fleets, spec.routing, current=running.placement) == \
        solver._replan(topology, pools, fleets, spec.routing, running.placement)


def test_an_attached_fleet_never_holds_the_facilitys_ready():
    own = [{"kind": "XCachePool", "metadata": {"name": "af-xc", "generation": 1},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}}]
    short = {"kind": "WorkerFleet", "metadata": {"name": "greedy", "generation": 1}, "status": {
        "observedGeneration": 1, "conditions": [{"type": "Ready", "status": "False", "reason": "InsufficientCapacity"}]}}
    new = {"kind": "WorkerFleet", "metadata": {"name": "new", "generation": 1}}
    problems = [("WorkersUnplaced", "fleet greedy: 99000 worker(s) fit no node")]
    states = facility_states(own, problems, [short, new])
    assert states["Ready"].status and states["Degraded"].reason == "WorkersUnplaced"
    sick = {**short, "status": {**short["status"], "conditions": [{"type": "Degraded", "status": "True"}]}}
    assert facility_states(own, [], [sick])["Degraded"].reason == "ChildDegraded"
    # its own children still hold it
    assert not facility_states(own + [new], [], [])["Ready"].status


def test_what_fails_without_any_standalone_fleet_is_the_facilitys():
    topology = snapshot(load_topology(TOPOLOGY, "t").node_infos(), FACILITY.network)
    too_big = FACILITY.model_copy(update={"fleets": [FACILITY.fleets[0].model_copy(update={"cores": 64})]})
    with pytest.raises(Unsatisfiable):
        _plan(topology, too_big, [team("good")], None)


# ------------------------------------------------------------------ 6. values the consumer refuses
@pytest.mark.parametrize("address", ["tcp://s.example:99999", "tcp://s.example:0", "tcp://s.example:65536",
                                     "tcp://s..example:8786", "tcp://-s.example:8786", "tcp://s.example:08786"])
def test_scheduler_addresses_with_impossible_ports_or_names_are_refused(address):
    with pytest.raises(ValidationError):
        WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "dask": {"schedulerAddress": address}})


@pytest.mark.parametrize("host", ["origin.example.org:1094", "ab:1094:", "a:b", ":::", "origin..example", "-origin",
                                  "o" * 64 + ".example"])
def test_origin_hosts_with_ports_or_bad_labels_are_refused(host):
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate({**pool(), "origin": {"host": host}})


@pytest.mark.parametrize("host", ["origin.example.org", "10.0.0.1", "::1", "fe80::1", "2001:db8::8:800:200c:417a"])
def test_dns_names_and_ip_addresses_pass(host):
    XCachePoolSpec.model_validate({**pool(), "origin": {"host": host}})


@pytest.mark.parametrize("name", ["a..b", "a.-b", "a-.b", "192.168.1.1", "xn--abc", "sthree-x", "amzn-s3-demo-x",
                                  "x-s3alias", "x--ol-s3", "x.mrap", "x--x-s3", "x--table-s3", "UPPER", "ab", "-ab"])
def test_bucket_names_s3_forbids_are_refused(name):
    with pytest.raises(ValidationError):
        Bucket(name=name)


@pytest.mark.parametrize("url", ["https://s3.example.org:65536", "https://s3.example.org:0", "https://s3..example.org",
                                 "https://s3.example.org/path"])
def test_s3_urls_with_impossible_ports_are_refused(url):
    with pytest.raises(ValidationError):
        External(url=url, credentials_secret="k")


@pytest.mark.parametrize("image", ["ghcr.io/site/../evil/x:1", "ghcr.io//x:1", "ghcr.io/site-/x:1", "ghcr.io/-site/x",
                                   "ghcr.io/site/./x", "ghcr.io/Site/x", "ghcr.io/site/x:", "ghcr.io/site/x@sha256:abc",
                                   "ghcr.io:99999/x", "x;rm", "ghcr.io/site/x:1 2"])
def test_image_references_outside_the_distribution_grammar_are_refused(image):
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate({**pool(), "image": image})


@pytest.mark.parametrize("image", ["hub.opensciencegrid.org/opensciencegrid/xcache:23-release", "localhost:5000/x",
                                   "python:3.12", "ghcr.io/a/b_c/d--e:v1.0", "x@sha256:" + "a" * 64])
def test_real_image_references_pass(image):
    XCachePoolSpec.model_validate({**pool(), "image": image})


@pytest.mark.parametrize("issuer", ["https://t.example:70000", "https://t.example:0", "https://t..example"])
def test_token_issuers_with_impossible_ports_are_refused(issuer):
    with pytest.raises(ValidationError):
        XCachePoolSpec.model_validate({**pool(), "auth": {"mode": "scitokens", "issuers": [issuer], "tlsSecret": "t"}})


@pytest.mark.parametrize("text", ["line one\nline two", "bell\x07", "esc\x1b[31mred", "cr\roverwrite", "nul\x00",
                                  "ls\u2028ps\u2029", "c1\x85"])
def test_messages_are_one_printable_line(text):
    out = printable(text)
    assert "\n" not in out and "\r" not in out and all(ch >= " " and ch != "\x7f" for ch in out)
    assert not any("\x80" <= ch < "\xa0" or ch in "\u2028\u2029" for ch in out)


def test_messages_are_cut_to_a_bounded_length():
    assert len(printable("x" * 10000)) <= 2048


# ------------------------------------------------------------------ 7. a child the API server refuses
def test_a_child_the_api_server_refuses_is_said_on_the_object_not_only_retried(monkeypatch):
    from switchyard.apply import ApiError
    from switchyard.handlers import converge as conv
    calls = []

    def answer(status):
        def sync(*args, **kwargs):
            calls.append(status)
            raise ApiError(status, "Invalid" if status == 422 else "ServiceUnavailable",
                           'XCachePool.switchyard.dev "af-' + "p" * 45 + '" is invalid: metadata.name: Too long')
        return sync
    monkeypatch.setattr(conv, "kube", lambda: None)
    body = {"kind": "AnalysisFacility", "metadata": {"uid": "uid-refused", "namespace": "ns", "name": "af"}}
    child = {"apiVersion": "switchyard.dev/v1alpha1", "kind": "XCachePool", "metadata": {"name": "af-" + "p" * 45}}
    monkeypatch.setattr(conv, "sync_children", answer(422))
    for _ in range(2):  # not marked applied: the next reconcile writes again, and says it again
        with pytest.raises(conv.Refused) as info:
            conv.converge(body, [child], ("XCachePool",), logging.getLogger("test"))
        ready = info.value.states()["Ready"]
        assert not ready.status and ready.reason == "ChildRefused" and "is invalid: metadata.name" in ready.message
    assert calls == [422, 422]
    # The API server's own trouble is no verdict on the child: retried as before.
    monkeypatch.setattr(conv, "sync_children", answer(503))
    with pytest.raises(ApiError):
        conv.converge(body, [child], ("XCachePool",), logging.getLogger("test"))


# ------------------------------------------------------------------ 8. degenerate numbers
MINI_NODES = load_topology(yaml.safe_load((REPO / "e2e" / "topologies" / "mini.yaml").read_text()), "mini").node_infos()


def mini_facility(workers: int = 6) -> dict:
    return {"network": {"switches": [{"name": "rack-a", "uplinkGbps": 80}, {"name": "rack-b", "uplinkGbps": 80},
                                     {"name": "rack-c", "uplinkGbps": 40}]},
            "routing": "auto",
            "cachePools": [{"name": "xcache", "serveGbps": 45, "origin": {"host": "origin.example.org"},
                            "resources": {"cpu": "2", "memory": "12Gi"}}],
            "fleets": [{"name": "dask", "replicas": workers, "cores": 2, "memoryGiB": 4, "readGbps": 1,
                        "dask": {"schedulerAddress": "tcp://scheduler.example.org:8786"}}]}


CAPACITIES = {  # every Gbps the planner divides by or multiplies with, and where it sits in a facility's spec
    "uplinkGbps": lambda s, v: s["network"]["switches"][0].update(uplinkGbps=v),
    "wanGbps": lambda s, v: s["network"].update(wanGbps=v),
    "defaultNicGbps": lambda s, v: s["network"].update(defaultNicGbps=v),
    "serveGbps": lambda s, v: s["cachePools"][0].update(serveGbps=v),
    "readGbps": lambda s, v: s["fleets"][0].update(readGbps=v),
}


@pytest.mark.parametrize("field", sorted(CAPACITIES))
@pytest.mark.parametrize("value", [5e-324, 1e-300, 1e-9, 0.000999, 0.0, -1.0])
def test_capacities_below_a_megabit_are_refused_by_the_schema(field, value):
    spec = mini_facility()
    CAPACITIES[field](spec, value)
    with pytest.raises(ValidationError, match=field):
        AnalysisFacilitySpec.model_validate(spec)


@pytest.mark.parametrize("field", sorted(CAPACITIES))
def test_every_capacity_at_its_floor_plans_every_worker(field):
    # (at 5e-324 the uplink's row divided by it: the plan placed none of the fleet's 6 workers and called
    # none unplaced, and the fleet stood AwaitingPlan for good; a serveGbps of 5e-324 never came back)
    spec = mini_facility()
    CAPACITIES[field](spec, MIN_GBPS)
    out = desired_facility("af", spec, None, MINI_NODES, [], [], Settings())
    assert out.converges, out.states["Ready"]
    plan = next(c for c in out.children if c["kind"] == "WorkerFleet")["status"]["plan"]
    assert sum(plan["workers"].values()) + plan.get("unplaced", 0) == 6
    if field == "uplinkGbps":  # the other switches had room: every worker is placed, none behind the floor
        assert sum(plan["workers"].values()) == 6 and "rack-a" not in plan["workers"]


@pytest.mark.parametrize("where", ["uplink", "wan", "nic"])
def test_a_topology_built_around_the_schema_is_refused_naming_the_number(where):
    spec = AnalysisFacilitySpec.model_validate(mini_facility())
    topology = snapshot(MINI_NODES, spec.network)
    if where == "uplink":
        topology = dataclasses.replace(topology, switches=(dataclasses.replace(topology.switches[0], uplink_gbps=5e-324),
                                                           *topology.switches[1:]))
    elif where == "wan":
        topology = dataclasses.replace(topology, wan_gbps=float("inf"))
    else:
        first = topology.switches[0]
        topology = dataclasses.replace(topology, switches=(dataclasses.replace(first, hosts=(
            dataclasses.replace(first.hosts[0], nic_gbps=float("nan")), *first.hosts[1:])), *topology.switches[1:]))
    with pytest.raises(Unsatisfiable) as info:
        _plan(topology, spec, [], None)
    assert info.value.reason == "DegenerateCapacity"
    assert {"uplink": "switch rack-a: uplinkGbps is 4.94066e-324", "wan": "WAN", "nic": "its NIC is nan"}[where] \
        in info.value.message


@pytest.mark.parametrize("annotation", ["5e-324", "0.0009", "inf", "nan", "-3", "1e9", "fast"])
def test_a_node_annotation_outside_a_nics_range_is_no_nic_speed(annotation):
    node = dataclasses.replace(MINI_NODES[0], annotations={"switchyard.dev/nic-gbps": annotation}, nic_gbps=25.0)
    assert node.nic("switchyard.dev/nic-gbps") == 25.0
    assert dataclasses.replace(node, annotations={"switchyard.dev/nic-gbps": "0.001"}).nic("switchyard.dev/nic-gbps") == 0.001


def test_a_plan_that_loses_workers_refuses_the_fleet_with_its_numbers(monkeypatch):
    topology = snapshot(load_topology(TOPOLOGY, "t").node_infos(), FACILITY.network)
    real = planner.plan

    def losing(topology, pools, fleets, routing, current=None):
        result = real(topology, pools, fleets, routing, current=current)
        workers = {k: v for k, v in result.placement.workers.items() if k != "lost"}
        return dataclasses.replace(result, placement=dataclasses.replace(result.placement, workers=workers))
    monkeypatch.setattr(planner, "plan", losing)
    plan, refused = _plan(topology, FACILITY, [team("good"), team("lost")], None)
    assert refused["lost"][0] == "PlanIncomplete" and "places 0 and leaves 0 unplaced of its 2" in refused["lost"][1]
    assert sum(plan.placement.workers["good"].values()) == 2
    own = FACILITY.model_copy(update={"fleets": [FACILITY.fleets[0].model_copy(update={"name": "lost"})]})
    with pytest.raises(Unsatisfiable) as info:
        _plan(topology, own, [team("good")], None)
    assert info.value.reason == "PlanIncomplete" and "fleet lost" in info.value.message
    # desired_facility says it on the facility, for its generation
    out = desired_facility("af", own.to_wire(), None, load_topology(TOPOLOGY, "t").node_infos(), [], [], Settings())
    assert out.states["Ready"].reason == "PlanIncomplete" and not out.converges


def _states(reason: str, status: bool = False, progressing: bool = False) -> dict:
    return {"status": {"conditions": [{"type": "Ready", "status": "True" if status else "False", "reason": reason,
                                       "message": "why\nnot"},
                                      {"type": "Progressing", "status": "True" if progressing else "False",
                                       "reason": reason}]}}


def test_a_fleet_waiting_for_its_plan_says_what_its_facility_says():
    waiting = cond.progressing("AwaitingPlan", "waiting for AnalysisFacility af to place this fleet")
    assert awaiting(waiting, "af", None)["Ready"].reason == "FacilityNotFound"
    held = awaiting(waiting, "af", _states("PlanningFailed"))["Ready"]
    assert (held.reason, held.status) == ("FacilityNotReady", False)
    assert "Ready=False PlanningFailed: why; not" in held.message  # one printable line
    moving = awaiting(waiting, "af", _states("ChildrenNotReady", progressing=True))["Ready"]
    assert moving.reason == "AwaitingPlan" and "ChildrenNotReady" in moving.message
    assert "has not reported" in awaiting(waiting, "af", {"status": {}})["Ready"].message
    assert awaiting(waiting, "af", _states("Ready", status=True)) == waiting  # it is about to
    assert "nothing places this pool" in awaiting(waiting, "af", None, "pool")["Ready"].message
    ramping = cond.progressing("RampingUp", "3/6 started")
    assert awaiting(ramping, "af", None) == ramping  # only a wait for a plan is explained
