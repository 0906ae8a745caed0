"""The XCachePool handler's side of the hot files: the texts it already reads, its fleets' ring, the wake."""

from __future__ import annotations

import pytest

from switchyard.handlers import xcachepool as handler
from switchyard.handlers.indexes import ring_read_through
from switchyard.handlers import memory
from switchyard.handlers.memory import PoolMemory
from switchyard.policy.settings import Settings


def fleet(name: str, pool: str | None, ring: dict | None = None, namespace: str = "ns", hashed: int = 4) -> dict:
    plan = {"pool": pool, "cacheRing": ring or {}, "hashed": {"rack-a": hashed}} if pool else {}
    return {"metadata": {"name": name, "namespace": namespace}, "status": {"plan": plan} if plan else {}}


def test_the_disk_read_keeps_the_texts_that_answered_for_the_hot_files(monkeypatch):
    pods = [{"metadata": {"name": f"c{i}", "labels": {}}, "spec": {"nodeName": f"node-{i}"},
             "status": {"podIP": f"10.0.0.{i}"}} for i in range(3)]
    reads = []
    monkeypatch.setattr(handler, "ready_cache_pods", lambda namespace, name: pods)
    monkeypatch.setattr(handler, "read_all", lambda addresses: reads.append(addresses) or ["a 1\n", None, "b 2\n"])
    monkeypatch.setattr(handler, "current", lambda: Settings(disk_read_seconds=60))
    kept = PoolMemory("XCachePool", "ns", "pool")
    read = handler.read_disks(kept, "ns", "pool", 0.95)
    assert read.texts == ("a 1\n", "b 2\n")
    assert handler.read_disks(kept, "ns", "pool", 0.95) is read and len(reads) == 1  # one scrape serves both


def test_the_pools_ring_is_the_one_its_fleets_plans_carry():
    ring = {"node-a": 0.6, "node-b": 0.4}
    index = {"uid-1": [fleet("b-fleet", "pool", ring)], ("ns", "af"): [fleet("a-fleet", "other", {"x": 1.0})],
             "uid-2": [fleet("c-fleet", "pool", {"stale": 1.0}), fleet("z", "pool", {"y": 1.0}, namespace="elsewhere")]}
    assert ring_read_through(index, "ns", "pool") == ring
    assert ring_read_through(index, "ns", "nobody") is None
    assert ring_read_through({"uid": [fleet("w", None)]}, "ns", "pool") is None
    # a fleet whose workers all read their switch's caches: its plan's ring is nobody's (a-local first by name)
    assert ring_read_through({"uid": [fleet("a-local", "pool", {"x": 1.0}, hashed=0)]}, "ns", "pool") is None
    index["uid-3"] = [fleet("a-local", "pool", {"x": 1.0}, hashed=0)]
    assert ring_read_through(index, "ns", "pool") == ring


@pytest.fixture
def woken(monkeypatch):
    calls: list[tuple[str, str, str]] = []
    monkeypatch.setattr(handler, "wake", lambda kind, namespace, name: calls.append((kind, namespace, name)))
    monkeypatch.setattr(memory, "_objects", {})
    return calls


def pool_event(hot: list[dict] | None, uid: str = "u1") -> dict:
    return {"kind": "XCachePool", "metadata": {"namespace": "ns", "name": "pool", "uid": uid},
            "status": {"hotFiles": hot} if hot is not None else {}}


def event(body, type, fleet_index) -> None:
    """A watch event as kopf delivers it: the handler runs only when its filter lets it."""
    if handler.published_moved(body=body, type=type):
        handler.published_changed(body=body, type=type, fleet_index=fleet_index)


def test_a_changed_hot_list_wakes_the_fleets_reading_through_the_pool(woken):
    index = {"uid": [fleet("w1", "pool"), fleet("w2", "pool"), fleet("other", "another-pool")]}
    hot = [{"path": "/store/a.root", "replicas": 2}]
    event(body=pool_event(None), type=None, fleet_index=index)  # kopf's initial listing
    event(body=pool_event([]), type="MODIFIED", fleet_index=index)  # no change
    assert woken == []
    event(body=pool_event(hot), type="MODIFIED", fleet_index=index)
    assert woken == [("WorkerFleet", "ns", "w1"), ("WorkerFleet", "ns", "w2")]
    event(body=pool_event(hot), type="MODIFIED", fleet_index=index)  # another status change
    event(body=pool_event(hot), type="DELETED", fleet_index=index)
    event(body=pool_event([], uid="u2"), type="ADDED", fleet_index=index)  # created again: first seen
    assert len(woken) == 2
    event(body=pool_event(hot, uid="u2"), type="MODIFIED", fleet_index=index)
    assert len(woken) == 4
