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
