"""The ring through a file the kubelet refreshes: re-read on change, last good ring kept, names hashed not addresses."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from switchyard.planner import hashing
from switchyard.routing import HASH_RULE, RingFile, Router, RoutingError, hooks, parse_ring, ring_entry

FILES = [f"/store/data/Run2024D/NANOAOD/{i:05d}.root" for i in range(600)]
RING = {"sw1-c-0": 1.0, "sw1-c-1": 2.0, "sw2-c-0": 1.5}
ADDRESS = {"sw1-c-0": "10.0.1.5", "sw1-c-1": "10.0.1.6", "sw2-c-0": "10.0.2.5"}


class KubeletVolume:
    """A ConfigMap volume as the kubelet writes it (its AtomicWriter): the data in a timestamped
    directory, `..data` a symlink to it, each key a symlink `key -> ..data/key`; an update writes a new
    directory and renames a fresh symlink over `..data`, so readers see the old files or the new, whole."""

    def __init__(self, root: Path) -> None:
        self.root, self.generation = root, 0
        root.mkdir(parents=True, exist_ok=True)

    def publish(self, data: dict[str, str]) -> None:
        self.generation += 1
        stamp = f"..2026_11_26_08_00_00.{self.generation}"
        (self.root / stamp).mkdir()
        for key, text in data.items():
            (self.root / stamp / key).write_text(text)
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        os.symlink(stamp, self.root / "..data_tmp")
        os.rename(self.root / "..data_tmp", self.root / "..data")  # the atomic swap
        for key in data:
            if not (self.root / key).is_symlink():
                os.symlink(f"..data/{key}", self.root / key)
        if old:
            for path in (self.root / old).iterdir():
                path.unlink()
            (self.root / old).rmdir()


def ring_text(ring: dict[str, float], port: int = 1094) -> str:
    return "# a comment\n" + "".join(ring_entry(n, f"{ADDRESS[n]}:{port}", w) + "\n" for n, w in sorted(ring.items()))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def hosts(router: Router, path: str) -> list[str]:
    return [u.split("//")[1].split(":")[0] for u in router.candidates("root://origin.example.org/" + path)]


@pytest.fixture
def volume(tmp_path):
    v = KubeletVolume(tmp_path / "routing")
    v.publish({"ring": ring_text(RING)})
    return v


def test_entries_name_the_node_and_the_rule_hashes_the_name_not_the_address():
    ring = parse_ring("sw1-c-0@root://10.0.1.5:1094=1\nsw2-c-0@root://[fd00::5]:1094=2.5, root://plain:1094=1")
    assert [(c.name, c.address, c.weight) for c in ring] == [
        ("sw1-c-0", "10.0.1.5:1094", 1.0), ("sw2-c-0", "[fd00::5]:1094", 2.5), ("plain", "plain:1094", 1.0)]
    before = Router("hashed", ring=parse_ring(ring_text(RING)))
    ADDRESS_MOVED = {**ADDRESS, "sw1-c-1": "10.9.9.9"}
    after = Router("hashed", ring=parse_ring("".join(
        ring_entry(n, f"{ADDRESS_MOVED[n]}:1094", w) + "\n" for n, w in sorted(RING.items()))))
    for path in FILES:
        names = hashing.order(path, RING)
        assert hosts(before, path) == [ADDRESS[n] for n in names]
        assert hosts(after, path) == [ADDRESS_MOVED[n] for n in names]  # the address moved, no file did
    assert ring_entry("sw1-c-0", "10.0.1.5:1094", 1.5) == "sw1-c-0@root://10.0.1.5:1094=1.5"
    assert ring_entry("sw1-c-0", "sw1-c-0:1094", 1) == "root://sw1-c-0:1094=1"  # named by its host
    with pytest.raises(RoutingError, match="'Bad_Name' in .* is not a cache host's node name"):
        parse_ring("Bad_Name@root://10.0.0.1:1094=1")
    with pytest.raises(RoutingError, match="cache 'a' is listed twice"):
        parse_ring("a@root://10.0.0.1=1\na@root://10.0.0.2=1")


def test_new_reads_follow_the_rewritten_file_after_the_recheck_interval(volume):
    clock = Clock()
    router = Router("hashed", endpoint="root://af-xc.ns.svc:1094",
                    ring_file=RingFile(str(volume.root / "ring"), recheck=5.0, clock=clock))
    before = {p: hosts(router, p)[0] for p in FILES}
    assert before == {p: ADDRESS[hashing.home(p, RING)] for p in FILES}

    smaller = {n: w for n, w in RING.items() if n != "sw1-c-1"}
    volume.publish({"ring": ring_text(smaller)})
    clock.now += 4.9  # within the interval: not even a stat
    assert {p: hosts(router, p)[0] for p in FILES} == before
    clock.now += 0.2
    after = {p: hosts(router, p)[0] for p in FILES}
    assert after == {p: ADDRESS[hashing.home(p, smaller)] for p in FILES}
    moved = {p for p in FILES if after[p] != before[p]}
    assert moved == {p for p in FILES if before[p] == ADDRESS["sw1-c-1"]} and moved  # only its files moved

    reweighted = {**smaller, "sw2-c-0": 6.0}
    volume.publish({"ring": ring_text(reweighted)})
    clock.now += 5.0
    assert {p: hosts(router, p)[0] for p in FILES} == {p: ADDRESS[hashing.home(p, reweighted)] for p in FILES}


def test_a_missing_or_malformed_file_keeps_the_last_good_ring_and_says_so_once(volume, caplog):
    clock = Clock()
    ring_file = RingFile(str(volume.root / "ring"), recheck=1.0, clock=clock)
    good = ring_file.current()
    assert [c.name for c in good] == sorted(RING)
    caplog.set_level(logging.WARNING, "switchyard.routing")
    volume.publish({"ring": "sw1-c-0@root://10.0.1.5:1094=heavy\n"})
    for _ in range(3):
        clock.now += 1.0
        assert ring_file.current() == good
    volume.publish({"other": "x"})  # the key is gone: the path dangles
    for _ in range(3):
        clock.now += 1.0
        assert ring_file.current() == good
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "the weight of 'root://10.0.1.5:1094' is 'heavy'" in warnings[0] and "FileNotFoundError" in warnings[1]
    assert all("keeping the last good ring (sw1-c-0,sw1-c-1,sw2-c-0)" in w for w in warnings)
    volume.publish({"ring": ring_text({"sw2-c-0": 1.0})})
    clock.now += 1.0
    assert [c.name for c in ring_file.current()] == ["sw2-c-0"]


def test_the_file_wins_over_the_variable_which_stands_until_the_file_parses(tmp_path):
    env = {"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": HASH_RULE,
           "SWITCHYARD_CACHE_ENDPOINT": "root://af-xc.ns.svc:1094",
           "SWITCHYARD_CACHE_RING": "root://from-env:1094=1",
           "SWITCHYARD_CACHE_RING_FILE": str(tmp_path / "routing" / "ring")}
    missing = Router.from_env(env)
    assert hosts(missing, FILES[0]) == ["from-env"]
    volume = KubeletVolume(tmp_path / "routing")
    volume.publish({"ring": ring_text(RING)})
    both = Router.from_env(env)
    assert hosts(both, FILES[0]) == [ADDRESS[n] for n in hashing.order(FILES[0], RING)]
    # only the variable: as before, for clients outside Kubernetes
    outside = Router.from_env({k: v for k, v in env.items() if k != "SWITCHYARD_CACHE_RING_FILE"})
    assert hosts(outside, FILES[0]) == ["from-env"]
    # a file of no cache (a pool without hosts yet) reads through the pool's Service
    volume.publish({"ring": "# no cache\n"})
    assert hosts(Router.from_env({k: v for k, v in env.items() if k != "SWITCHYARD_CACHE_RING"}), FILES[0]) == \
        ["af-xc.ns.svc"]


def test_a_read_in_progress_keeps_its_failover_order_when_the_ring_changes(volume):
    clock = Clock()
    router = Router("hashed", ring_file=RingFile(str(volume.root / "ring"), recheck=1.0, clock=clock))
    path = next(p for p in FILES if hashing.order(p, RING)[1] == "sw2-c-0")
    url = "root://origin.example.org/" + path
    old = router.candidates(url)
    tried = []

    def attempt(candidate: str) -> str:
        tried.append(candidate)
        if len(tried) == 1:  # the home cache fails while the ring loses sw2-c-0
            volume.publish({"ring": ring_text({n: w for n, w in RING.items() if n != "sw2-c-0"})})
            clock.now += 1.0
            assert "10.0.2.5" not in " ".join(router.candidates(url))  # a new read would not try it
            raise ConnectionError("connection refused")
        return candidate

    assert hooks._in_order(url, router.candidates(url), attempt) == old[1]
    assert tried == old[:2] and "10.0.2.5" in tried[1]
