"""Rendezvous hashing: the documented rule, its spread, and its stability when caches come and go."""

from __future__ import annotations

import hashlib
import math
import struct

import pytest

from switchyard.planner import hashing

PATHS = [f"/store/data/Run2024/file{i:05d}.root" for i in range(6000)]


def from_the_docstring(path: str, ring: dict[str, float]) -> list[str]:
    """The module docstring's rule, written out again from the text alone."""
    scores = {}
    for cache, weight in ring.items():
        if weight <= 0:
            continue
        digest = hashlib.sha256(cache.encode("utf-8") + b"\x00" + path.encode("utf-8")).digest()
        (h,) = struct.unpack(">Q", digest[:8])
        u = ((h >> 11) + 0.5) / 2**53
        scores[cache] = -weight / math.log(u)
    return sorted(scores, key=lambda c: (-scores[c], c))


@pytest.mark.parametrize("ring", [
    {"c0": 1.0, "c1": 1.0, "c2": 1.0},
    {"sw1-cache-0": 0.5, "sw1-cache-1": 0.25, "sw2-cache-0": 0.25, "idle": 0.0},
    {"ünïcode-host": 2.0, "plain": 1.0},
])
def test_the_code_follows_the_documented_rule(ring):
    for path in PATHS[:300] + ["/ümlaut/ß.root", ""]:
        assert hashing.order(path, ring) == from_the_docstring(path, ring)
        assert hashing.home(path, ring) == from_the_docstring(path, ring)[0]


def test_the_order_lists_every_cache_of_positive_weight_once():
    ring = {"a": 1, "b": 3, "c": 0, "d": 2}
    for path in PATHS[:50]:
        assert sorted(hashing.order(path, ring)) == ["a", "b", "d"]
    assert hashing.home("/x", {}) is None
    assert hashing.order("/x", ["a", "b"]) == hashing.order("/x", {"a": 1, "b": 1})


def test_files_spread_in_proportion_to_the_weights():
    ring = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    homes = [hashing.home(p, ring) for p in PATHS]
    for cache, weight in ring.items():
        assert homes.count(cache) / len(PATHS) == pytest.approx(weight / 10, abs=0.02)


def test_adding_a_cache_only_takes_files_to_the_new_cache():
    before = {"a": 1.0, "b": 1.0, "c": 2.0}
    after = {**before, "new": 1.0}
    moved = [(hashing.home(p, before), hashing.home(p, after)) for p in PATHS]
    changed = [(old, new) for old, new in moved if old != new]
    assert all(new == "new" for _, new in changed)
    assert len(changed) / len(PATHS) == pytest.approx(1 / 5, abs=0.02)


def test_losing_a_cache_only_moves_its_files_each_to_its_second_choice():
    ring = {"a": 1.0, "b": 2.0, "c": 1.0, "d": 1.0}
    survivors = {c: w for c, w in ring.items() if c != "b"}
    for path in PATHS[:2000]:
        order = hashing.order(path, ring)
        if order[0] == "b":
            assert hashing.home(path, survivors) == order[1]
        else:
            assert hashing.home(path, survivors) == order[0]


# Hot files (steps 5-7): a worked example other implementations can check against, then the rule's properties.
EXAMPLE_RING = {"sw1-c-0": 1.0, "sw1-c-1": 1.0, "sw2-c-0": 2.0, "sw3-c-0": 1.0}
EXAMPLE_PATH = "/store/data/Run2024/hot.root"


def test_the_worked_example_of_the_hot_file_rule():
    assert hashing.order(EXAMPLE_PATH, EXAMPLE_RING) == ["sw2-c-0", "sw3-c-0", "sw1-c-1", "sw1-c-0"]
    # reader: (first 8 bytes of step 6's digest, g mod 3, its order for replicas 3)
    example = {
        "reader-a": ("1806389fb2e756e3", 1, ["sw3-c-0", "sw2-c-0", "sw1-c-1", "sw1-c-0"]),
        "reader-b": ("3178168802199d37", 2, ["sw1-c-1", "sw2-c-0", "sw3-c-0", "sw1-c-0"]),
        "reader-e": ("b5f994c03a78124e", 0, ["sw2-c-0", "sw3-c-0", "sw1-c-1", "sw1-c-0"]),
    }
    for reader, (g, pick, order) in example.items():
        digest = hashlib.sha256(b"reader\x00" + reader.encode() + b"\x00" + EXAMPLE_PATH.encode()).hexdigest()
        assert digest[:16] == g and int(g, 16) % 3 == pick
        assert hashing.reader_pick(reader, EXAMPLE_PATH, 3) == pick
        assert hashing.hot_order(EXAMPLE_PATH, EXAMPLE_RING, reader, 3) == order


def from_the_hot_docstring(path: str, ring: dict[str, float], reader: str, replicas: int) -> list[str]:
    ordered = from_the_docstring(path, ring)
    n = min(replicas, len(ordered))
    if n < 2:
        return ordered
    digest = hashlib.sha256(b"reader\x00" + reader.encode("utf-8") + b"\x00" + path.encode("utf-8")).digest()
    (g,) = struct.unpack(">Q", digest[:8])
    first = ordered[g % n]
    return [first] + [c for c in ordered[:n] if c != first] + ordered[n:]


@pytest.mark.parametrize("replicas", [2, 3, 4, 9])
def test_the_hot_code_follows_the_documented_rule(replicas):
    for i, path in enumerate(PATHS[:200] + ["/ümlaut/ß.root"]):
        reader = f"f-sw{i % 5}-ab12c-{i:05d}"
        assert hashing.hot_order(path, EXAMPLE_RING, reader, replicas) == \
            from_the_hot_docstring(path, EXAMPLE_RING, reader, replicas)


@pytest.mark.parametrize("replicas", [2, 3, 5])
def test_readers_spread_near_uniformly_over_a_hot_files_first_caches(replicas):
    ring = {f"c{i}": 1.0 + i % 3 for i in range(6)}
    readers = [f"f-sw{i % 4}-5d8f9c7b-{i:05d}" for i in range(6000)]
    for path in (EXAMPLE_PATH, PATHS[7]):
        top = hashing.order(path, ring)[:replicas]
        firsts = [hashing.hot_order(path, ring, r, replicas)[0] for r in readers]
        assert set(firsts) == set(top)
        for cache in top:  # 1/replicas each; 6000 readers: a standard deviation below 0.007
            assert firsts.count(cache) / len(readers) == pytest.approx(1 / replicas, abs=0.025)


def test_a_hot_readers_order_keeps_every_cache_and_the_failover_past_its_pick():
    for i, path in enumerate(PATHS[:300]):
        ordered = hashing.order(path, EXAMPLE_RING)
        got = hashing.hot_order(path, EXAMPLE_RING, f"r{i}", 3)
        assert sorted(got) == sorted(ordered) and got[3:] == ordered[3:] and set(got[:3]) == set(ordered[:3])
        assert [c for c in got[1:3]] == [c for c in ordered[:3] if c != got[0]]


def test_replicas_cap_at_the_ring_and_below_two_the_order_is_the_rings():
    ring = {"a": 1.0, "b": 1.0, "c": 1.0}
    for i, path in enumerate(PATHS[:200]):
        reader = f"r{i}"
        assert hashing.hot_order(path, ring, reader, 16) == hashing.hot_order(path, ring, reader, 3)
        assert hashing.hot_order(path, ring, reader, 1) == hashing.order(path, ring)
        assert hashing.hot_order(path, {"a": 1.0}, reader, 4) == ["a"]
    assert hashing.hot_order("/x", {}, "r", 3) == []
    firsts = {hashing.hot_order(EXAMPLE_PATH, ring, f"r{i}", 16)[0] for i in range(200)}
    assert firsts == set(ring)  # every cache of the ring is a home, none beyond it


def test_the_hot_rule_is_deterministic_and_each_reader_keeps_its_pick():
    for i, path in enumerate(PATHS[:100]):
        reader = f"f-sw1-{i}"
        first = hashing.hot_order(path, EXAMPLE_RING, reader, 3)
        assert all(hashing.hot_order(path, dict(reversed(EXAMPLE_RING.items())), reader, 3) == first for _ in range(3))
        # a larger k picks among more of the file's top caches, the first ones still among them
        assert hashing.hot_order(path, EXAMPLE_RING, reader, 4)[0] in hashing.order(path, EXAMPLE_RING)[:4]
