"""The routing client: a worker's root:// URLs → the cache the plan names, by the planner's own rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from switchyard.api.plans import FleetPlan
from switchyard.builders.workerfleet import build_routing_config, cache_env
from switchyard.planner import hashing
from switchyard.routing import HASH_RULE, Router, RoutingError, file_path, parse_ring
from switchyard.routing.rule import hashing as routing_hashing

RING = {"sw1-c-0": 1.0, "sw1-c-1": 2.0, "sw2-c-0": 0.5, "sw3-c-0": 1.5, "idle": 0.0}
PORT = 1094


def hashed_env(ring=RING, **extra) -> dict[str, str]:
    return {
        "SWITCHYARD_ROUTING": "hashed",
        "SWITCHYARD_CACHE_ENDPOINT": "root://af-xc.ns.svc:1094",
        "SWITCHYARD_HASH_RULE": HASH_RULE,
        "SWITCHYARD_CACHE_RING": ",".join(f"root://{h}:{PORT}={w:g}" for h, w in sorted(ring.items())),
        **extra,
    }


LOCAL_ENV = {"SWITCHYARD_ROUTING": "local", "SWITCHYARD_CACHE_ENDPOINT": "root://af-xc-sw1.ns.svc:1094"}
FILES = [f"/store/data/Run2024{c}/NANOAOD/{i:05d}.root" for c in "ABC" for i in range(1000)]


def test_routing_loads_the_planners_rule_file_not_a_copy():
    assert Path(routing_hashing().__file__).resolve() == Path(hashing.__file__).resolve()


@pytest.mark.parametrize("url_form", ["root://origin.example.org/{}", "root://origin.example.org:1094//{}",
                                      "root://user@origin.example.org:2094/{}?authz=abc"])
def test_hashed_routing_is_the_planners_choice_for_every_file(url_form):
    router = Router.from_env(hashed_env())
    for path in FILES:
        url = url_form.format(path.lstrip("/"))
        order = hashing.order(path, RING)
        got = router.candidates(url)
        assert [u.split("//")[1].split("@")[-1].split(":")[0] for u in got] == order
        user, query = ("user@", "?authz=abc") if "user@" in url_form else ("", "")
        assert got[0] == f"root://{user}{hashing.home(path, RING)}:{PORT}/{path}{query}"


def test_the_spread_over_the_ring_follows_the_weights():
    router = Router.from_env(hashed_env())
    homes = [router.route("root://origin/" + p).split("//")[1].split(":")[0] for p in FILES]
    total = sum(RING.values())
    for host, weight in RING.items():
        assert homes.count(host) / len(FILES) == pytest.approx(weight / total, abs=0.03)


def test_failover_is_the_next_cache_of_the_ring_and_losing_one_moves_only_its_files():
    full = Router.from_env(hashed_env())
    without = {h: w for h, w in RING.items() if h != "sw1-c-1"}
    smaller = Router.from_env(hashed_env(without))
    moved = 0
    for path in FILES:
        before, after = full.candidates("root://o/" + path), smaller.candidates("root://o/" + path)
        assert len(before) == 4 and len(set(before)) == 4  # every cache of weight > 0, once
        if "sw1-c-1:" in before[0]:
            moved += 1
            assert after[0] == before[1]  # the failover the client used is where the file now lives
        else:
            assert after[0] == before[0]
        assert after == [u for u in before if "sw1-c-1:" not in u]
    assert moved > 0


def test_local_routing_reads_through_the_switch_endpoint():
    router = Router.from_env(LOCAL_ENV)
    assert router.candidates("root://origin.example.org//store/a.root") == ["root://af-xc-sw1.ns.svc:1094//store/a.root"]
    assert router.route("roots://origin:1095/store/a.root?x=1") == "roots://af-xc-sw1.ns.svc:1094//store/a.root?x=1"
    # a routed URL routes to itself
    assert router.route(router.route("root://o//a")) == router.route("root://o//a")


def test_hashed_routing_without_a_ring_uses_the_pool_endpoint():
    env = {"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_CACHE_ENDPOINT": "root://af-xc.ns.svc:1094"}
    assert Router.from_env(env).candidates("root://o//f") == ["root://af-xc.ns.svc:1094//f"]


@pytest.mark.parametrize("url", [
    "/local/file.root", "file:///local/file.root", "s3://bucket/key", "https://host/file.root",
    "root://cache:1094//root://origin:1094//store/a.root",  # a forwarding-proxy URL already names its cache
    "root://host", "root://host//",
])
def test_urls_that_are_not_routed_stay(url):
    assert Router.from_env(LOCAL_ENV).candidates(url) == [url]


def test_without_routing_every_url_stays():
    router = Router.from_env({"PATH": "/bin"})
    assert not router.active and router.route("root://origin//store/a.root") == "root://origin//store/a.root"


def test_file_path_is_the_path_the_server_sees():
    assert file_path("root://o//store/a.root") == file_path("root://o:1094/store/a.root") == "/store/a.root"
    assert file_path("root://o//store/a.root?authz=t") == "/store/a.root"
    assert file_path("http://o/store/a.root") is None


@pytest.mark.parametrize("env, message", [
    ({"SWITCHYARD_ROUTING": "nearest", "SWITCHYARD_CACHE_ENDPOINT": "root://c:1094"}, "SWITCHYARD_ROUTING: 'nearest'"),
    ({"SWITCHYARD_ROUTING": "local"}, "SWITCHYARD_CACHE_ENDPOINT is not set"),
    ({"SWITCHYARD_ROUTING": "local", "SWITCHYARD_CACHE_ENDPOINT": "http://c:1094"}, "SWITCHYARD_CACHE_ENDPOINT: 'http://c:1094'"),
    ({"SWITCHYARD_ROUTING": "local", "SWITCHYARD_CACHE_ENDPOINT": "root://c:port"}, "SWITCHYARD_CACHE_ENDPOINT"),
    ({"SWITCHYARD_ROUTING": "local", "SWITCHYARD_CACHE_ENDPOINT": "root://c:1094//store"}, "not a root://host[:port] URL"),
    (hashed_env(SWITCHYARD_CACHE_RING="root://a:1094"), "has no '=weight'"),
    (hashed_env(SWITCHYARD_CACHE_RING="root://a:1094=heavy"), "'heavy', not a number"),
    (hashed_env(SWITCHYARD_CACHE_RING="root://a:1094=-1"), "finite number >= 0"),
    (hashed_env(SWITCHYARD_CACHE_RING="root://a:1094=nan"), "finite number >= 0"),
    (hashed_env(SWITCHYARD_CACHE_RING="root://a:1094=0"), "no cache of weight > 0"),
    (hashed_env(SWITCHYARD_CACHE_RING="root://a:1094=1,root://a:1095=1"), "'a' is listed twice"),
    (hashed_env(SWITCHYARD_CACHE_RING="a:1094=1"), "SWITCHYARD_CACHE_RING: 'a:1094'"),
    (hashed_env(SWITCHYARD_HASH_RULE="maglev-v2"), "SWITCHYARD_HASH_RULE: 'maglev-v2'"),
])
def test_a_malformed_environment_is_a_clear_error(env, message):
    with pytest.raises(RoutingError, match=message.replace("[", r"\[").replace("]", r"\]").replace("?", r"\?")):
        Router.from_env(env)


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "switchyard.cli", "route", *args], capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "/usr/bin"), **env}, timeout=60, check=False)


def test_the_cli_prints_the_routed_url_and_the_failover_order():
    env = hashed_env()
    path = FILES[7]
    one = run_cli("root://origin.example.org/" + path, "/tmp/local", env=env)
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == [f"root://{hashing.home(path, RING)}:{PORT}/{path}", "/tmp/local"]
    every = run_cli("--all", "root://origin.example.org/" + path, env=env)
    assert every.stdout.splitlines() == [f"root://{h}:{PORT}/{path}" for h in hashing.order(path, RING)]


def test_the_cli_on_a_malformed_environment_says_what_is_wrong_without_a_traceback():
    bad = run_cli("root://o//f", env=hashed_env(SWITCHYARD_CACHE_RING="root://a:1094=heavy"))
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == "switchyard route: SWITCHYARD_CACHE_RING: the weight of 'root://a:1094' is 'heavy', not a number"


def test_routing_imports_neither_kopf_nor_kubernetes_nor_the_solver():
    code = ("import sys, switchyard.routing as r; r.route('root://o//f', %r); "
            "print(sorted(m for m in ('kopf', 'kubernetes', 'scipy', 'highspy', 'pydantic', 'switchyard.planner') "
            "if m in sys.modules))") % (hashed_env(),)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("routing, hashed", [("local", {}), ("hashed", {"sw1": 2})])
def test_the_environment_and_ring_file_a_fleet_builder_writes_are_what_the_client_reads(routing, hashed, tmp_path):
    from test_routing_ring_file import KubeletVolume

    plan = FleetPlan(facility="af", workers={"sw1": 2}, hashed=hashed, pool="af-xc", pool_port=2094,
                     cache_switches=["sw1", "sw2"], routing={"sw1": routing},
                     cache_ring={"sw1-c-0": 1.0, "sw2-c-0": 2.5, "sw2-c-1": 0.0})
    env = {e["name"]: e["value"] for e in cache_env(plan, "ns", "sw1", routing)}
    assert "SWITCHYARD_CACHE_RING" not in env  # the ring is in the ConfigMap, never in the template
    config = build_routing_config("f", plan, {"sw1-c-0": "10.0.1.5", "sw2-c-0": "fd00::7"})
    volume = KubeletVolume(tmp_path / "routing")
    volume.publish(config["data"])
    assert config["data"]["switches"] == "sw1\nsw2\n"
    if routing == "hashed":
        assert env["SWITCHYARD_CACHE_RING_FILE"] == "/etc/switchyard/routing/ring"
        env["SWITCHYARD_CACHE_RING_FILE"] = str(volume.root / "ring")  # where this test mounts it
    router = Router.from_env(env)
    assert router.routing == routing
    if routing == "local":
        assert router.route("root://o//f") == env["SWITCHYARD_CACHE_ENDPOINT"] + "//f"
    else:
        ring = router.current_ring()
        assert [(c.name, c.address) for c in ring] == [("sw1-c-0", "10.0.1.5:2094"), ("sw2-c-0", "[fd00::7]:2094"),
                                                       ("sw2-c-1", "sw2-c-1:2094")]  # no InternalIP: its node name
        address = {c.name: c.address for c in ring}
        assert router.route("root://o//f") == f"root://{address[hashing.home('/f', plan.cache_ring)]}//f"
        assert "# sw2-c-1: no InternalIP, named by its node name" in config["data"]["ring"]


def test_ring_parsing_keeps_ports_and_weights():
    ring = parse_ring(" root://a:1094=1 , roots://b=2.5,")
    assert [(c.name, c.address, c.weight) for c in ring] == [("a", "a:1094", 1.0), ("b", "b", 2.5)]


def test_a_pool_of_forwarding_proxies_is_given_the_origin_url_in_the_path():
    router = Router.from_env({**hashed_env(), "SWITCHYARD_CACHE_ORIGIN_MODE": "forward"})
    path = FILES[3]
    got = router.candidates(f"root://origin.example.org:1094/{path}?authz=t")
    assert got == [f"root://{h}:{PORT}//root://origin.example.org:1094/{path}?authz=t" for h in hashing.order(path, RING)]
    assert router.route(got[0]) == got[0]  # a routed URL stays
    local = Router.from_env({**LOCAL_ENV, "SWITCHYARD_CACHE_ORIGIN_MODE": "forward"})
    assert local.route("root://o//f") == "root://af-xc-sw1.ns.svc:1094//root://o//f"
    with pytest.raises(RoutingError, match="SWITCHYARD_CACHE_ORIGIN_MODE: 'redirect' is not 'fixed' or 'forward'"):
        Router.from_env({**LOCAL_ENV, "SWITCHYARD_CACHE_ORIGIN_MODE": "redirect"})


@pytest.mark.parametrize("mode", ["fixed", "forward"])
def test_the_facility_tells_its_fleets_the_pools_origin_mode(mode):
    from switchyard.api import AnalysisFacilitySpec
    from switchyard.desired.facility import fleet_plan
    from switchyard.planner import FleetRequest, PoolRequest, plan
    from switchyard.topology import TopologyFile, snapshot

    origin = {"host": "origin.example.org"} if mode == "fixed" else {"mode": "forward"}
    spec = AnalysisFacilitySpec.model_validate({
        "network": {"switches": [{"name": "sw1", "uplinkGbps": 80}]},
        "cachePools": [{"name": "xc", "origin": origin}],
        "fleets": [{"name": "dask", "replicas": 2, "dask": {"schedulerAddress": "tcp://s:8786"}}]})
    topology = TopologyFile.model_validate({"switches": [{"name": "sw1", "uplinkGbps": 80, "nodes": [
        {"name": "c", "count": 1, "nvmeDisks": 2, "nicGbps": 50}, {"name": "w", "count": 1, "cpu": 64}]}]})
    result = plan(snapshot(topology.node_infos(), spec.network), [PoolRequest(p.name, p) for p in spec.cache_pools],
                  [FleetRequest(f.name, f) for f in spec.fleets], spec.routing)
    fleet = fleet_plan("af", spec, result, "dask", None)
    assert fleet.pool_origin_mode == mode
    env = {e["name"]: e["value"] for e in cache_env(fleet, "ns", "sw1")}
    assert env["SWITCHYARD_CACHE_ORIGIN_MODE"] == mode
    assert Router.from_env(env).origin_mode == mode


def test_the_rule_loads_once_for_threads_that_route_at_the_same_time(tmp_path, monkeypatch):
    # A rule file slow to run: every thread must get it whole, none the half-run module.
    import sys
    import threading

    from switchyard.routing import rule

    slow = tmp_path / "hashing.py"
    slow.write_text("import time\ntime.sleep(0.3)\n\ndef order(path, weights):\n    return sorted(weights)\n")
    monkeypatch.setattr(rule, "_SOURCE", slow)
    monkeypatch.setattr(rule, "_loaded", None)
    monkeypatch.delitem(sys.modules, rule._PLANNER_MODULE, raising=False)
    monkeypatch.delitem(sys.modules, rule._STANDALONE, raising=False)
    results, errors = [], []

    def route():
        try:
            results.append(rule.hashing().order("/f", {"b": 1, "a": 1}))
        except Exception as exc:   # noqa: BLE001 - the failure under test
            errors.append(exc)

    threads = [threading.Thread(target=route) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [["a", "b"]] * 8
    sys.modules.pop(rule._STANDALONE, None)
