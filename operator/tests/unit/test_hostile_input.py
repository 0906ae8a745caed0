"""Hostile input, class by class, where the check is pure: the models (the CRD's own patterns and
CEL rules, evaluated offline), the host-path policy, the plan contract, names and message text."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from switchyard import hostpaths
from switchyard.api import AnalysisFacilitySpec, WorkerFleetSpec, XCachePoolSpec
from switchyard.api.plans import FleetPlan, PoolPlan, decode
from switchyard.api.s3staging import Bucket, External
from switchyard.builders.common import child_name
from switchyard.conditions import printable
from switchyard.desired.facility import plan_with_attached as _plan
from switchyard.planner import Unsatisfiable
from switchyard.topology import snapshot
from switchyard.topology import load_topology


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
