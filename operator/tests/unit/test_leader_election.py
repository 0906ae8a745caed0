"""The leader election's pure decisions, on a fake clock: timings, expiry, records, the renew
deadline. Its reads and writes of the Lease run against a real API server in e2e/test_leader.py."""

from __future__ import annotations

import ast
import dataclasses
import os
import pathlib
import subprocess
import sys

import pytest

from switchyard.leader import Observer, Renewal, Timing, must_stop, next_record, released_record

NOW = "2026-11-26T08:00:00.000000Z"


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("lease, retry, deadline", [(15, 2, 15), (15, 10, 10), (15, 0, 10), (10, 2, 12)])
def test_timing_refuses_a_deadline_the_lease_does_not_cover(lease, retry, deadline):
    with pytest.raises(ValueError):
        Timing(lease_seconds=lease, renew_deadline=deadline, retry=retry)


@pytest.mark.parametrize("flags", [("--lease-seconds", "10", "--renew-deadline", "12"),
                                   ("--lease-retry", "0"), ("--lease-retry", "10"),
                                   ("--renew-deadline", "15"), ("--lease-retry", "nan")])
def test_switchyard_run_refuses_bad_timings_in_one_line_naming_the_flags(tmp_path, flags):
    """Before it connects anywhere (the kubeconfig does not exist) and before kopf starts."""
    env = {**os.environ, "POD_NAMESPACE": "sy", "POD_NAME": "sy-a"}
    result = subprocess.run([sys.executable, "-m", "switchyard.cli", "run", "--kubeconfig", str(tmp_path / "none"),
                             "--metrics-port", "0", "--health-port", "0", *flags],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("switchyard run: error: leader election needs 0 < --lease-retry (")
    for flag in ("--lease-retry", "--renew-deadline", "--lease-seconds"):
        assert flag in line
    given = dict(zip(flags[::2], flags[1::2]))
    for flag, value in given.items():
        assert f"{flag} ({value})" in line
    assert result.stdout == ""


def test_a_held_lease_is_taken_only_after_its_duration_on_the_candidates_own_clock():
    clock = Clock()
    seen = Observer("b", clock)
    record = {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": NOW}
    seen.observe(record)
    clock.t += 14.9
    assert not seen.may_take()
    clock.t += 0.1
    assert seen.may_take()


def test_a_renewal_restarts_the_candidates_wait_whatever_time_the_record_claims():
    clock = Clock()
    seen = Observer("b", clock)
    seen.observe({"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": NOW})
    clock.t += 10
    # the holder's clock is an hour behind: its renewTime is in our past, still a renewal
    seen.observe({"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-11-26T07:00:02.000000Z"})
    clock.t += 10
    assert not seen.may_take()
    seen.observe({"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-11-26T07:00:02.000000Z"})
    clock.t += 5
    assert seen.may_take()  # unchanged for 15 s since it last changed


def test_a_new_resource_version_is_a_change_even_with_the_same_record():
    clock = Clock()
    seen = Observer("b", clock)
    record = {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": NOW}
    seen.observe(record, "1")
    clock.t += 10
    seen.observe(record, "2")
    clock.t += 10
    assert not seen.may_take()


@pytest.mark.parametrize("holder", ["", None, "b"])
def test_a_free_or_own_lease_is_taken_at_once(holder):
    seen = Observer("b", Clock())
    seen.observe({"holderIdentity": holder, "leaseDurationSeconds": 15})
    assert seen.may_take()


def test_records_count_transitions_and_keep_the_acquire_time_across_renewals():
    first = next_record(None, "a", 15, NOW)
    assert first == {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": NOW, "renewTime": NOW,
                     "leaseTransitions": 0}
    later = "2026-11-26T08:00:02.000000Z"
    renewed = next_record(first, "a", 15, later)
    assert renewed["acquireTime"] == NOW and renewed["renewTime"] == later and renewed["leaseTransitions"] == 0
    taken = next_record(renewed, "b", 15, later)
    assert taken["acquireTime"] == later and taken["leaseTransitions"] == 1
    released = released_record(taken, later)
    assert "holderIdentity" not in released and released["leaseTransitions"] == 1
    assert next_record(released, "a", 15, later)["leaseTransitions"] == 2


def test_the_leader_gives_up_at_the_renew_deadline_before_the_lease_expires():
    clock = Clock()
    renewal = Renewal(Timing(lease_seconds=15, renew_deadline=10, retry=2), clock)
    clock.t += 2
    assert renewal.request_timeout() == pytest.approx(8)   # all the time left, as client-go's context
    clock.t += 7.9
    assert not renewal.lost()
    assert renewal.request_timeout() <= 4
    renewal.renewed()
    clock.t += 9.99
    assert not renewal.lost() and renewal.request_timeout() == pytest.approx(0.5)
    clock.t += 0.01
    assert renewal.lost()


def test_a_leader_stops_at_once_when_another_holds_the_lease_else_at_the_deadline():
    clock = Clock()
    seen, renewal = Observer("a", clock), Renewal(Timing(), clock)
    seen.observe({"holderIdentity": "a", "leaseDurationSeconds": 15}, "1")
    clock.t += 4  # a renewal failed (unreachable API server): carry on until the deadline
    assert must_stop(seen, renewal) is None
    clock.t += 6
    assert must_stop(seen, renewal) == "not renewed for 10 s"
    renewal.renewed()
    seen.observe({"holderIdentity": "b", "leaseDurationSeconds": 15}, "2")  # paused past expiry, b took it
    assert must_stop(seen, renewal) == "the Lease is held by b"


PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "switchyard"
ADMIN_GUIDE = PACKAGE.parents[1] / "docs" / "admin-guide.md"
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "clear", "discard", "remove"}


def changed_module_state(path: pathlib.Path) -> set[str]:
    """Module-level names of `path` that one of its functions changes: rebinds (`global`), assigns or
    deletes an item of, or calls a mutating method of (what a process keeps between reconciles)."""
    tree = ast.parse(path.read_text())
    top = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
           for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    found = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                found |= set(node.names)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.target if isinstance(node, ast.AugAssign) else node.targets
                for target in targets if isinstance(targets, list) else [targets]:
                    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                        found.add(target.value.id)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
                  and isinstance(node.func.value, ast.Name)):
                found.add(node.func.value.id)
    return found & top


def memory_slots() -> set[tuple[str, str]]:
    """(Class.slot, its module) of every slot of the handlers' per-object memory (handlers/memory.py)."""
    from switchyard.handlers import memory

    def slots(cls, beside: set[str]) -> set[tuple[str, str]]:
        return {(f"{cls.__name__}.{f.name}", "handlers/memory.py") for f in dataclasses.fields(cls) if f.name not in beside}
    every = {f.name for f in dataclasses.fields(memory.ObjectMemory)}
    return slots(memory.ObjectMemory, {"kind", "namespace", "name"}).union(
        *(slots(cls, every) for cls in memory.KINDS.values()))


# What handlers/ may keep at module level: the store of per-object memory, and process-wide bookkeeping.
HANDLERS_MODULE_STATE = {("_objects", "handlers/memory.py"), ("_kube", "handlers/client.py"),
                         ("_locks", "handlers/loop.py"), ("_wakers", "handlers/loop.py"),
                         ("_pending_wakes", "handlers/loop.py"), ("_looping_kinds", "handlers/loop.py")}


def test_every_module_state_a_takeover_loses_or_rebuilds_is_in_the_admin_guides_table():
    """A new leader has only what the cluster and the objects' status say: each piece of process memory
    (module state, and each slot of the handlers' per-object memory) is listed in docs/admin-guide.md's
    "What a new leader does first" table, with what becomes of it."""
    text = ADMIN_GUIDE.read_text()
    table = text[text.index("**What a new leader does first.**"):text.index("**Measured** (`e2e/test_leader.py`")]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    state = {(name, str(path.relative_to(PACKAGE))) for path in sorted(PACKAGE.rglob("*.py"))
             for name in changed_module_state(path)}
    assert {name for name, _ in state} >= {"_objects", "_locks", "_exported"}  # the scan finds them
    slots = memory_slots()
    assert {name for name, _ in slots} >= {"ObjectMemory.applied", "FleetMemory.ramp", "FacilityMemory.drift",
                                           "StagingMemory.tracker", "PoolMemory.disk_read"}
    missing = [(name, module) for name, module in sorted(state | slots)
               if not any(f"`{name}`" in row.split("|")[1] and f"`{module}`" in row.split("|")[1] for row in rows)]
    assert not missing, f"state missing from docs/admin-guide.md's takeover table: {missing}"


def test_the_handlers_keep_per_object_memory_only_in_the_store():
    """handlers/ keeps what it remembers of an object in handlers/memory.py's entries (made at the object's
    first reconcile, dropped when it is deleted), not in module dicts of its own."""
    state = {(name, str(path.relative_to(PACKAGE))) for path in sorted((PACKAGE / "handlers").glob("*.py"))
             for name in changed_module_state(path)}
    assert state == HANDLERS_MODULE_STATE, f"module state in handlers/ beside the store: {state - HANDLERS_MODULE_STATE}"
