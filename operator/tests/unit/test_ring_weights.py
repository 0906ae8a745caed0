"""Load-fed ring weights end to end (issue #30 item 2): the pool decides status.ringWeights from its exporters'
served-bytes counters (desired/ringload.py), says so (RingWeightsChanged, switchyard_ring_weight_factor), and
its fleets publish the plan's weights times the factors, the ConfigMap unchanged while none is lowered."""

from __future__ import annotations

import dataclasses

import kopf
import pytest

from switchyard.desired.workerfleet import desired_fleet
from switchyard.api import XCachePoolSpec
from switchyard.api.plans import PoolPlan
from switchyard.desired.xcachepool import DiskRead, outside_routing, published_ring, ring_weight_events
from switchyard.handlers import memory
from switchyard.handlers import xcachepool as handler
from switchyard.handlers.indexes import ring_weights_index, ring_weights_of
from switchyard.handlers.memory import PoolMemory
from switchyard.observe.metrics import HOT_FILES, RING_WEIGHT_FACTOR
from switchyard.planner import hashing
from switchyard.policy.settings import Settings
from switchyard.routing import parse_ring

from test_desired import NODES, SETTINGS, hot_text, intent, pool, pool_child, read_through, ring_hosts
from test_pool_hot_files import woken  # noqa: F401 (a fixture)

POOL = "af-xcache"
HOSTS = sorted(h for hs in pool_child()["status"]["plan"]["hosts"].values() for h in hs)  # 6 hosts, cap 40
GIGA_BYTES = 1e9 / 8
RING = read_through()  # as a fleet with ring readers publishes it (the facility's own fleets read locally)


def served_text(host: str, total_bytes: float) -> str:
    """An exporter's /metrics text with a cache host's served-bytes counter (two reader switches)."""
    name = "switchyard_xcache_served_bytes_total"
    labels = f'pool="{POOL}",host="{host}",switch="rack-a"'
    return (f"# TYPE {name} counter\n"
            f'{name}{{{labels},client_switch="rack-a"}} {total_bytes / 2}\n'
            f'{name}{{{labels},client_switch="unknown"}} {total_bytes / 2}\n'
            f'switchyard_xcache_exporter_start_time_seconds{{{labels}}} 1700000000\n')


def all_ready() -> dict:
    return {sw: {"desired": len(h), "current": len(h), "ready": len(h)}
            for sw, h in pool_child()["status"]["plan"]["hosts"].items()}


def skewed(reads: int, gbps: dict[str, float], every: float = 30.0):
    """The DiskReads of `reads` reads `every` seconds apart, each host serving gbps[host] (15 Gbps if not given)."""
    sent = dict.fromkeys(HOSTS, 0.0)
    for i in range(reads):
        if i:
            sent = {h: b + gbps.get(h, 15.0) * every * GIGA_BYTES for h, b in sent.items()}
        yield DiskRead({}, (), tuple(served_text(h, b) for h, b in sent.items()), read_at=i * every)


def test_a_host_persistently_over_its_share_is_lowered_and_the_pool_says_so():
    status, kept, outcomes = pool_child()["status"], None, []
    for read in skewed(5, {HOSTS[0]: 36.0}):  # 36 of planned 18.5 (111 / 6); the others 15 of 40
        out = pool(status=status, workloads=all_ready(), disk=read, ring_load=kept, ring=RING)
        status, kept = {**status, "ringWeights": out.status["ringWeights"]}, out.ring_load
        outcomes.append(out)
    # the first read takes the counters; three reads over lower it one step; the fifth is in the settle window
    assert [o.status["ringWeights"] for o in outcomes] == [{}, {}, {}, {HOSTS[0]: 0.9}, {HOSTS[0]: 0.9}]
    assert [[e for e in o.events if e[1] == "RingWeightsChanged"] for o in outcomes] == [
        [], [], [], [("Normal", "RingWeightsChanged", f"ring weight factors (1 host(s) lowered): {HOSTS[0]} 1->0.9")],
        []]


def test_the_factors_carry_over_from_the_status_without_a_read_and_leave_with_their_host():
    lowered = {**pool_child()["status"], "ringWeights": {HOSTS[0]: 0.7, "edited-by-hand": 3}}
    kept = pool(status=lowered, ring=RING)  # a new process, no exporter read (simulated nodes): seeded from the status
    assert kept.status["ringWeights"] == {HOSTS[0]: 0.7}
    assert not [e for e in kept.events if e[1] == "RingWeightsChanged"]
    out = pool(status=lowered, pods=[{"node": h, "ready": h != HOSTS[0]} for h in HOSTS], ring=RING)
    assert out.status["ringOut"] == [HOSTS[0]] and out.status["ringWeights"] == {}
    assert [e[2] for e in out.events if e[1] == "RingWeightsChanged"] == [
        f"ring weight factors (0 host(s) lowered): {HOSTS[0]} 0.7->1"]


def test_a_pool_nobody_reads_through_the_ring_keeps_every_weight_and_lists_no_hot_file():
    """The facility's fleets read their switch's caches (routing local, hashed {}), yet their plans carry the
    ring: no weight or hot list is followed by a local reader, so none is decided; readers outside
    Kubernetes reading through the pool (the pool's plan has a ring) do follow them."""
    hot = hot_text(HOSTS[0], {"/store/hot.root": 12.0})
    listed = {**pool_child()["status"], "ringWeights": {HOSTS[0]: 0.7},
              "hotFiles": [{"path": "/store/hot.root", "replicas": 2}]}
    status, kept, outcomes = listed, None, []
    for read in skewed(5, {HOSTS[0]: 36.0}):
        out = pool(status=status, workloads=all_ready(), disk=DiskRead({}, (), read.texts + (hot,), read.read_at),
                   ring_load=kept)
        status, kept = {**status, **{k: out.status[k] for k in ("ringWeights", "hotFiles")}}, out.ring_load
        outcomes.append(out)
    assert [o.status["ringWeights"] for o in outcomes] == [{}] * 5
    assert [o.status["hotFiles"] for o in outcomes] == [[]] * 5
    assert [e[2] for e in outcomes[0].events if e[1] in ("RingWeightsChanged", "HotFilesChanged")] == [
        "hot files (0 listed): removed /store/hot.root", f"ring weight factors (0 host(s) lowered): {HOSTS[0]} 0.7->1"]
    assert not [e for o in outcomes[1:] for e in o.events if e[1] in ("RingWeightsChanged", "HotFilesChanged")]
    assert pool(status=listed).status["hotFiles"] == []  # no exporter read either
    outside = {**pool_child()["status"], "plan": {**pool_child()["status"]["plan"], "cacheRing": RING}}
    status, kept = outside, None
    for read in skewed(4, {HOSTS[0]: 36.0}):
        out = pool(status=status, workloads=all_ready(), disk=read, ring_load=kept)
        status, kept = {**status, "ringWeights": out.status["ringWeights"]}, out.ring_load
    assert out.status["ringWeights"] == {HOSTS[0]: 0.9}


def test_the_ring_weights_event_names_each_factor_that_moved():
    assert ring_weight_events({"a": 0.9, "b": 0.5}, {"a": 0.8, "c": 0.9}) == (
        ("Normal", "RingWeightsChanged", "ring weight factors (2 host(s) lowered): a 0.9->0.8, b 0.5->1, c 1->0.9"),)
    assert ring_weight_events(None, {}) == () and ring_weight_events({"a": 0.9}, {"a": 0.9}) == ()


def test_the_hot_files_are_decided_over_the_lowered_weights():
    """A 5 Gbps file is hot only while its home serves above its planned share (0.10 of its 40 Gbps cap):
    its home serves 30, planned 40 at its plan weight, 21.8 at factor 0.5 (0.5 / 5.5 of 240)."""
    effective = {h: 0.5 if h == HOSTS[0] else 1.0 for h in HOSTS}
    path = next(p for p in (f"/store/f{i}.root" for i in range(1000)) if hashing.order(p, effective)[0] == HOSTS[0])
    text = hot_text(HOSTS[0], {path: 5.0, **{f"/store/filler{j}.root": 3.125 for j in range(8)}})
    status = pool_child()["status"]
    read = DiskRead({}, (), (text,), read_at=1.0)
    planned = pool(status=status, workloads=all_ready(), disk=read, ring=RING)
    lowered = pool(status={**status, "ringWeights": {HOSTS[0]: 0.5}}, workloads=all_ready(), disk=read, ring=RING)
    assert planned.status["hotFiles"] == []
    assert [f["path"] for f in lowered.status["hotFiles"]] == [path]


def test_the_fleet_publishes_the_plans_weights_times_the_factors_and_no_factor_changes_nothing():
    got = intent()
    hosts = sorted(got.plan.cache_ring)

    def config(**kw):
        out = desired_fleet("af-dask", "ns", got, got.plan.workers, {}, SETTINGS, NODES, **kw)
        return next(c for c in out.children if c["kind"] == "ConfigMap")

    before = config()
    assert config(ring_weights={}) == before and config(ring_weights=None) == before  # byte for byte
    lowered = config(ring_weights={hosts[0]: 0.5})
    assert {k: v for k, v in lowered["data"].items() if k != "ring"} == {k: v for k, v in before["data"].items()
                                                                          if k != "ring"}
    assert ring_hosts(lowered) == ring_hosts(before)

    def weights(cm):
        return {cache.name: cache.weight for cache in parse_ring(cm["data"]["ring"])}

    assert weights(lowered) == {h: pytest.approx(w * (0.5 if h == hosts[0] else 1.0), rel=1e-5)
                                for h, w in weights(before).items()}


def test_the_fleets_and_the_pools_exporters_publish_one_ring():
    """The published ring (plan weight x factor, without the hosts out) is one helper's: the fleets' ConfigMap
    and the text the pool's exporters serve readers outside Kubernetes carry the same ring."""
    got = intent()
    hosts = sorted(got.plan.cache_ring)
    factors, pods = {hosts[0]: 0.5}, [{"node": h, "ready": h != hosts[1]} for h in hosts]
    assert published_ring({"a": 0.5, "b": 0.25, "c": 0.25}, ["b"], {"a": 0.5}) == {"a": 0.25, "c": 0.25}
    fleet = desired_fleet("af-dask", "ns", got, got.plan.workers, {}, SETTINGS, NODES, cache_pods=pods,
                          ring_weights=factors)
    config = next(c for c in fleet.children if c["kind"] == "ConfigMap")
    spec = XCachePoolSpec.model_validate(pool_child()["spec"])
    plan = PoolPlan.model_validate({**pool_child()["status"]["plan"], "cacheRing": got.plan.cache_ring})
    outside = outside_routing(got.plan.pool, spec, plan, {"ringOut": [hosts[1]], "ringWeights": factors,
                                                          "hotFiles": []}, NODES)
    assert outside["ring"] == config["data"]["ring"]
    assert {c.name: c.weight for c in parse_ring(outside["ring"])} == pytest.approx(
        published_ring(got.plan.cache_ring, [hosts[1]], factors), rel=1e-5)


def test_the_fleets_read_the_factors_from_the_pools_index():
    body = {"metadata": {"namespace": "ns", "name": "pool"}, "status": {"ringWeights": {"a": 0.8}}}
    assert ring_weights_index(body=body) == {("ns", "pool"): {"a": 0.8}}
    assert ring_weights_index(body={**body, "status": {"ringWeights": {}}}) == {}  # drops the entry
    assert ring_weights_of({("ns", "pool"): [{"a": 0.8}]}, "ns", "pool") == {"a": 0.8}
    assert ring_weights_of({}, "ns", "pool") == {} and ring_weights_of({}, "ns", None) == {}


def test_changed_ring_weights_wake_the_fleets_reading_through_the_pool(woken):
    index = {"uid": [{"metadata": {"name": "w1", "namespace": "ns"}, "status": {"plan": {"pool": "pool"}}}]}

    def event(weights, type="MODIFIED"):
        body = {"kind": "XCachePool", "metadata": {"namespace": "ns", "name": "pool", "uid": "u1"},
                "status": {"ringWeights": weights}}
        if handler.published_moved(body=body, type=type):
            handler.published_changed(body=body, type=type, fleet_index=index)

    event({}, type=None)          # kopf's initial listing
    event({})                     # no change
    assert woken == []
    event({"a": 0.9})
    event({"a": 0.9})             # another status write
    assert woken == [("WorkerFleet", "ns", "w1")]
    event({})                     # restored
    assert len(woken) == 2


def test_the_reconcile_keeps_the_rules_state_and_exports_each_hosts_factor(monkeypatch):
    """The handler's wiring: one exporter read per SWITCHYARD_DISK_READ_SECONDS (here every reconcile, 30 s
    apart on its clock), the rule's state kept in the pool's memory between reconciles, the status written,
    the event posted and the gauge set for every planned host."""
    monkeypatch.setattr(memory, "_objects", {})
    clock = {"now": 0.0}
    sent = dict.fromkeys(HOSTS, 0.0)
    pods = [{"metadata": {"name": f"c-{h}", "labels": {}}, "spec": {"nodeName": h}, "status": {"podIP": h}}
            for h in HOSTS]

    def read_all(addresses):
        for h in sent:
            sent[h] += (36.0 if h == HOSTS[0] else 15.0) * 30 * GIGA_BYTES
        return [served_text(h, sent[h]) for h in addresses]

    written, posted = [], []
    monkeypatch.setattr(handler.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(handler, "current", lambda: Settings(disk_read_seconds=30))
    monkeypatch.setattr(handler, "ready_cache_pods", lambda namespace, name: pods)
    monkeypatch.setattr(handler, "read_all", read_all)
    monkeypatch.setattr(handler, "read_unmounted", lambda *a: ())
    monkeypatch.setattr(handler, "_secrets", lambda *a: {})
    monkeypatch.setattr(handler, "read_pod_networks", lambda kept, logger: {})
    monkeypatch.setattr(handler, "converge", lambda *a, **k: None)
    monkeypatch.setattr(handler, "evict_misplaced_pods", lambda *a, **k: None)
    monkeypatch.setattr(handler, "post", lambda body, events, logger: posted.extend(events))
    monkeypatch.setattr(handler, "write_status", lambda kind, body, status, states, logger: written.append(status))
    c = pool_child()
    body = {"kind": "XCachePool", "metadata": {**c["metadata"], "namespace": "ns", "uid": "u-ring"},
            "spec": c["spec"], "status": c["status"]}
    statefulsets = {"u-ring": [{"kind": "StatefulSet", "name": f"s-{sw}", "switch": sw, **w}
                               for sw, w in all_ready().items()]}
    readers = {"u-fleet": [{"metadata": {"name": "w", "namespace": "ns"},
                            "status": {"plan": {"pool": POOL, "hashed": {"rack-a": 4}, "cacheRing": RING}}}]}
    for _ in range(4):
        handler.reconcile(body, None, node_index={"n": [(n, None) for n in NODES]}, statefulset_index=statefulsets,
                          cache_pod_index={}, fleet_index=readers)
        body = {**body, "status": {**body["status"], "ringWeights": written[-1]["ringWeights"]}}
        clock["now"] += 30.0
    assert [s["ringWeights"] for s in written] == [{}, {}, {}, {HOSTS[0]: 0.9}]
    assert [e[1] for e in posted].count("RingWeightsChanged") == 1
    assert memory.of(body, PoolMemory).ring_load.hosts[HOSTS[0]].steps
    assert factor_series() == {**dict.fromkeys(HOSTS, 1.0), HOSTS[0]: 0.9}
    # a host that leaves the plan takes its series along; so does the pool when deleted
    plan = body["status"]["plan"]
    gone = plan["hosts"]["rack-c"][-1]
    body = {**body, "status": {**body["status"], "plan": {**plan, "hosts": {
        **plan["hosts"], "rack-c": plan["hosts"]["rack-c"][:-1]}}}}
    handler.reconcile(body, None, node_index={"n": [(n, None) for n in NODES]}, statefulset_index=statefulsets,
                      cache_pod_index={}, fleet_index=readers)
    assert gone not in factor_series() and len(factor_series()) == len(HOSTS) - 1
    HOT_FILES.labels("ns", POOL).set(0)
    delete = next(h.fn for h in kopf.get_default_registry()._changing.get_all_handlers()
                  if h.id == "XCachePool-forget")
    delete(body=body)
    assert factor_series() == {} and not series_of(HOT_FILES)


def series_of(gauge) -> dict[str, float]:
    return {s.labels.get("host", ""): s.value for family in gauge.collect() for s in family.samples
            if s.labels["namespace"] == "ns" and s.labels["pool"] == POOL}


def factor_series() -> dict[str, float]:
    return series_of(RING_WEIGHT_FACTOR)


def test_a_hot_files_home_busy_by_its_counter_is_overloaded_though_its_listed_files_read_low():
    path = "/store/mid.root"
    home = hashing.order(path, RING)[0]
    listed = hot_text(home, {path: 5.0})  # the exporter lists its busiest files only: 5 of the 36 Gbps it serves
    kept, lists = None, []
    for read in skewed(2, {home: 36.0}):
        out = pool(status=pool_child()["status"], workloads=all_ready(), ring_load=kept, ring=RING,
                   disk=dataclasses.replace(read, texts=read.texts + (listed,)))
        kept = out.ring_load
        lists.append(out.status["hotFiles"])
    # First read, no counter delta yet: its files' 5 Gbps stand in for its serve, so it is not overloaded, and
    # 5 < 0.25 x 40 is not hot on its own. Second: its counter says 36 Gbps, over 1.1 x its share of the
    # ring's 111 and busy (>= 0.5 x 40): overloaded, where 5 >= 0.10 x 40 enters.
    assert lists == [[], [{"path": path, "replicas": 2}]]
