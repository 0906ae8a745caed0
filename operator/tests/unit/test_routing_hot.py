"""Hot files through the routing client: the hot list beside the ring file, each reader's pick, failover kept."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from test_routing_ring_file import ADDRESS, FILES, RING, Clock, KubeletVolume, hosts, ring_text

from switchyard.planner import hashing
from switchyard.routing import HASH_RULE, HOT_KEY, HotFile, RingFile, Router, RoutingError, parse_hot

HOT = FILES[3]


def hot_text(hot: dict[str, int]) -> str:
    return "# a comment\n" + "".join(f"{k} {path}\n" for path, k in sorted(hot.items()))


@pytest.fixture
def volume(tmp_path):
    v = KubeletVolume(tmp_path / "routing")
    v.publish({"ring": ring_text(RING)})
    return v


def env_of(volume: KubeletVolume, reader: str) -> dict[str, str]:
    return {"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": HASH_RULE,
            "SWITCHYARD_CACHE_RING_FILE": str(volume.root / "ring"), "HOSTNAME": reader}


def test_the_hot_list_format():
    assert parse_hot("# hot files\n\n3 /store/a.root\n  2   /store/b.root  \n16 /x\n") == \
        {"/store/a.root": 3, "/store/b.root": 2, "/x": 16}
    assert parse_hot("") == {} and parse_hot("# none\n") == {}
    for bad in ("1 /store/a.root", "x /store/a.root", "3 store/a.root", "3", "3 /a b", "-2 /a", "2 /a\n3 /a"):
        with pytest.raises(RoutingError):
            parse_hot(bad)


def test_without_a_hot_list_every_order_is_the_rings(volume):
    router = Router.from_env(env_of(volume, "f-sw1-abc-1"))
    assert router.hot_file is not None and router.hot_file.path == str(volume.root / HOT_KEY)
    for path in FILES:
        assert hosts(router, path) == [ADDRESS[n] for n in hashing.order(path, RING)]


def test_readers_spread_a_hot_file_over_its_first_caches_and_keep_the_rings_failover(volume):
    volume.publish({"ring": ring_text(RING), HOT_KEY: hot_text({HOT: 2})})
    ordered = [ADDRESS[n] for n in hashing.order(HOT, RING)]
    firsts = set()
    for i in range(64):
        reader = f"f-sw{i % 2}-5d8f9c7b-{i:05d}"
        router = Router.from_env(env_of(volume, reader))
        got = hosts(router, HOT)
        assert got == [ADDRESS[n] for n in hashing.hot_order(HOT, RING, reader, 2)]
        assert set(got[:2]) == set(ordered[:2]) and got[2:] == ordered[2:]
        firsts.add(got[0])
        for path in FILES[:50]:  # every other file: the ring's order
            if path != HOT:
                assert hosts(router, path) == [ADDRESS[n] for n in hashing.order(path, RING)]
    assert firsts == set(ordered[:2])  # more than one home


def test_the_reader_is_named_by_switchyard_reader_then_hostname(volume):
    env = env_of(volume, "pod-a")
    assert Router.from_env(env).reader == "pod-a"
    assert Router.from_env({**env, "SWITCHYARD_READER": "me"}).reader == "me"
    assert Router.from_env({k: v for k, v in env.items() if k != "HOSTNAME"}).reader  # the host's name


def test_the_hot_list_is_re_read_like_the_ring_and_its_absence_or_a_bad_one_is_no_hot_file(volume, caplog):
    clock = Clock()
    reader = next(f"r{i}" for i in range(100) if hashing.reader_pick(f"r{i}", HOT, 3) != 0)
    router = Router("hashed", ring_file=RingFile(str(volume.root / "ring"), clock=clock),
                    hot_file=HotFile(str(volume.root / HOT_KEY), recheck=5.0, clock=clock), reader=reader)
    ring_order = [ADDRESS[n] for n in hashing.order(HOT, RING)]
    assert hosts(router, HOT) == ring_order
    caplog.set_level(logging.INFO, "switchyard.routing")
    volume.publish({"ring": ring_text(RING), HOT_KEY: hot_text({HOT: 3})})
    clock.now += 4.9
    assert hosts(router, HOT) == ring_order  # within the recheck interval
    clock.now += 0.2
    spread = hosts(router, HOT)
    assert spread != ring_order and spread == [ADDRESS[n] for n in hashing.hot_order(HOT, RING, reader, 3)]
    volume.publish({"ring": ring_text(RING), HOT_KEY: "3 /store/a.root\nthree /store/b.root\n"})
    for _ in range(3):
        clock.now += 5.0
        assert hosts(router, HOT) == ring_order
    volume.publish({"ring": ring_text(RING), HOT_KEY: hot_text({HOT: 3})})
    clock.now += 5.0
    assert hosts(router, HOT) == spread
    volume.publish({"ring": ring_text(RING)})  # the list emptied: the ConfigMap lost its key
    clock.now += 5.0
    assert hosts(router, HOT) == ring_order
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "line 2 'three /store/b.root'" in warnings[0], warnings


def test_an_explicit_hot_file_and_none_without_a_ring_file(tmp_path, volume):
    elsewhere = tmp_path / "hot.txt"
    elsewhere.write_text(hot_text({HOT: 3}))
    router = Router.from_env({**env_of(volume, "r"), "SWITCHYARD_CACHE_HOT_FILE": str(elsewhere)})
    assert router.hot_file.current() == {HOT: 3}
    inline = Router.from_env({"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_CACHE_RING": "root://a:1094=1"})
    assert inline.hot_file is None


def test_switchyard_route_spreads_a_hot_file_by_reader(volume):
    volume.publish({"ring": ring_text(RING), HOT_KEY: hot_text({HOT: 3})})
    url = "root://origin.example.org/" + HOT
    firsts = set()
    for reader in ("a", "b", "c", "d", "e", "f"):
        env = {**env_of(volume, "ignored"), "SWITCHYARD_READER": reader, "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-m", "switchyard.cli", "route", "--all", url], env=env,
                             capture_output=True, text=True, timeout=60, check=True).stdout.split()
        assert [u.split("//")[1].split(":")[0] for u in out] == \
            [ADDRESS[n] for n in hashing.hot_order(HOT, RING, reader, 3)]
        firsts.add(out[0])
    assert len(firsts) > 1


def test_the_hot_list_a_fleet_builder_writes_is_what_the_client_reads(tmp_path):
    from switchyard.api.plans import FleetPlan
    from switchyard.builders.workerfleet import build_routing_config, cache_env

    plan = FleetPlan(facility="af", workers={"sw1": 2}, hashed={"sw1": 2}, pool="af-xc", cache_switches=["sw1", "sw2"],
                     routing={"sw1": "hashed"}, cache_ring=RING)
    config = build_routing_config("f", plan, ADDRESS, [{"path": HOT, "replicas": 3}, {"path": FILES[9], "replicas": 2}])
    env = {e["name"]: e["value"] for e in cache_env(plan, "ns", "sw1", "hashed")}
    assert env["SWITCHYARD_CACHE_RING_FILE"] == "/etc/switchyard/routing/ring"  # the hot list: .../hot beside it
    assert "SWITCHYARD_CACHE_HOT_FILE" not in env and "SWITCHYARD_READER" not in env  # the template is unchanged
    volume = KubeletVolume(tmp_path / "routing")
    volume.publish(config["data"])
    router = Router.from_env({**env, "SWITCHYARD_CACHE_RING_FILE": str(volume.root / "ring"), "HOSTNAME": "f-sw1-x"})
    assert router.hot_file.current() == {HOT: 3, FILES[9]: 2}
    assert hosts(router, HOT) == [ADDRESS[n] for n in hashing.hot_order(HOT, RING, "f-sw1-x", 3)]


def test_the_operators_index_of_hot_files_forgets_a_list_that_emptied():
    """kopf keeps an object's indexed value when its index function returns None: an emptied list must drop."""
    from kopf._core.engines.indexing import OperatorIndexer

    from switchyard.handlers.indexes import hot_files_index, hot_files_of

    def pool(hot):
        return {"metadata": {"namespace": "ns", "name": "af-xc"}, "status": {"hotFiles": hot} if hot else {}}

    indexer, key = OperatorIndexer(), ("ns", "af-xc", "uid")
    indexer.replace(key, hot_files_index(body=pool([{"path": HOT, "replicas": 3}])))
    assert hot_files_of(indexer.index, "ns", "af-xc") == [{"path": HOT, "replicas": 3}]
    assert hot_files_of(indexer.index, "ns", None) == [] and hot_files_of(indexer.index, "ns", "other") == []
    indexer.replace(key, hot_files_index(body=pool([])))
    assert hot_files_of(indexer.index, "ns", "af-xc") == []
