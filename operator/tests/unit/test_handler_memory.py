"""The handlers' per-object memory (handlers/memory.py): one entry per object, made at first use with its
kind's slots, the same one at every reconcile, dropped when the object is deleted (loop.forget)."""

from __future__ import annotations

import threading

import pytest

from switchyard.handlers import loop, memory


def body(kind: str, uid: str, name: str = "x") -> dict:
    return {"kind": kind, "metadata": {"uid": uid, "namespace": "ns", "name": name}}


@pytest.mark.parametrize("kind, cls", sorted(memory.KINDS.items()))
def test_an_entry_is_made_once_with_its_kinds_slots(kind, cls):
    uid = f"uid-{kind}"
    kept = memory.of(body(kind, uid))
    try:
        assert type(kept) is cls and (kept.kind, kept.namespace, kept.name) == (kind, "ns", "x")
        assert kept.applied.digest is None and memory.of(body(kind, uid), cls) is kept
        other = next(c for c in memory.KINDS.values() if c is not cls)
        with pytest.raises(TypeError):
            memory.of(body(kind, uid), other)
    finally:
        memory.drop(uid)


def test_a_deleted_object_is_forgotten_and_a_new_one_of_its_name_starts_empty():
    old = memory.of(body("WorkerFleet", "uid-old", "fleet"), memory.FleetMemory)
    old.asked, old.unaddressed = {"sw1": 3}, ("node-a",)
    with loop.serialised("uid-old", wait=True):
        pass
    assert loop.forget("uid-old") is old
    assert "uid-old" not in loop._locks and memory.drop("uid-old") is None
    new = memory.of(body("WorkerFleet", "uid-new", "fleet"), memory.FleetMemory)
    try:
        assert new is not old and new.asked is None and new.unaddressed == ()
    finally:
        loop.forget("uid-new")


def test_forget_waits_for_a_reconcile_under_way_before_it_drops_the_memory():
    kept = memory.of(body("XCachePool", "uid-busy"), memory.PoolMemory)
    inside, release, order = threading.Event(), threading.Event(), []

    def reconcile():
        with loop.serialised("uid-busy", wait=True):
            inside.set()
            release.wait(10)
            order.append(("reconcile done", memory.of(body("XCachePool", "uid-busy")) is kept))

    worker = threading.Thread(target=reconcile)
    worker.start()
    assert inside.wait(10)
    forgetting = threading.Thread(target=lambda: order.append(("forgot", loop.forget("uid-busy") is kept)))
    forgetting.start()
    forgetting.join(0.2)
    assert forgetting.is_alive() and order == []   # held back by the reconcile
    release.set()
    worker.join(10)
    forgetting.join(10)
    assert order == [("reconcile done", True), ("forgot", True)]
    assert memory.drop("uid-busy") is None


def test_a_fleets_ramp_is_kept_in_its_memory_and_one_found_under_way_resumes_without_a_burst(monkeypatch):
    from switchyard.api import WorkerFleetSpec
    from switchyard.handlers import workerfleet as handler

    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 40, "cores": 1, "memoryGiB": 1,
                                           "rampUp": {"maxStartsPerSecond": 10},
                                           "dask": {"schedulerAddress": "tcp://s:8786"}})
    clock = [100.0]
    monkeypatch.setattr(handler.time, "monotonic", lambda: clock[0])
    planned = {"sw1": 20, "sw2": 20}
    fresh = memory.FleetMemory("WorkerFleet", "ns", "new")
    assert sum(handler._ramp(fresh, spec, planned, {}).values()) == 10   # a new ramp: one second's burst
    # The Deployments lag behind the write: the counts asked for are what the ramp goes on from.
    assert fresh.asked == handler._ramp(fresh, spec, planned, {}) and sum(fresh.asked.values()) == 10
    clock[0] += 1
    assert sum(handler._ramp(fresh, spec, planned, {}).values()) == 20
    # A ramp this process finds under way (workers there, no memory of it: a new leader) starts none at once.
    taken = memory.FleetMemory("WorkerFleet", "ns", "taken")
    assert handler._ramp(taken, spec, planned, {"sw1": 5, "sw2": 5}) == {"sw1": 5, "sw2": 5}
    clock[0] += 1
    assert sum(handler._ramp(taken, spec, planned, {"sw1": 5, "sw2": 5}).values()) == 20
    # Reached: no tokens kept, the plan remembered.
    done = memory.FleetMemory("WorkerFleet", "ns", "done")
    assert handler._ramp(done, spec, planned, planned) == planned and (done.ramp, done.asked) == (None, planned)
