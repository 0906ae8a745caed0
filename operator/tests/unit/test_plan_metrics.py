"""The plan gauges a facility's reconcile exports (metrics.export_plan), read back from the registry."""

from __future__ import annotations

import dataclasses

from prometheus_client import REGISTRY

from switchyard.observe.metrics import export_plan, forget_facility
from switchyard.planner import plan

from test_planner_cases import fleet, nodes, pool, switch, topology


def _unplaced(namespace: str, facility: str, fleet_name: str) -> float | None:
    return REGISTRY.get_sample_value("switchyard_plan_unplaced_workers",
                                     {"namespace": namespace, "facility": facility, "fleet": fleet_name})


def test_unplaced_workers_are_exported_per_fleet_and_zero_once_placed():
    topo = topology([switch("s0", 10, nodes("cache", nvme=2, cpu=8), nodes("w", cpu=64))])
    short = plan(topo, [pool()], [fleet(replicas=20, cores=4)])
    assert short.unplaced == {"f": 4}   # 64 cores hold 16 four-core workers beside the cache pod
    try:
        export_plan("ns-u", "af", 10, short, fleet_names={"f": "af-f"})
        assert _unplaced("ns-u", "af", "af-f") == 4
        whole = plan(topo, [pool()], [fleet(replicas=8, cores=4)])
        assert whole.unplaced == {}
        export_plan("ns-u", "af", 10, whole, fleet_names={"f": "af-f"})
        assert _unplaced("ns-u", "af", "af-f") == 0   # present and 0: the alert's "all placed", not "unknown"
        # A fleet the plan no longer has loses its series.
        export_plan("ns-u", "af", 10, dataclasses.replace(whole, placement=dataclasses.replace(
            whole.placement, workers={})), fleet_names={"f": "af-f"})
        assert _unplaced("ns-u", "af", "af-f") is None
    finally:
        forget_facility("ns-u", "af")
    assert _unplaced("ns-u", "af", "af-f") is None


def test_a_deleted_objects_managed_objects_series_goes():
    from prometheus_client import REGISTRY

    from switchyard.observe.metrics import MANAGED_OBJECTS, forget_object

    def series() -> set:
        return {tuple(sorted(s.labels.items())) for f in REGISTRY.collect() if f.name == "switchyard_managed_objects"
                for s in f.samples if s.labels.get("namespace") == "ns-gone"}
    MANAGED_OBJECTS.labels("XCachePool", "ns-gone", "pool-a").set(3)
    MANAGED_OBJECTS.labels("XCachePool", "ns-gone", "pool-b").set(2)
    forget_object("XCachePool", "ns-gone", "pool-a")
    assert series() == {(("kind", "XCachePool"), ("name", "pool-b"), ("namespace", "ns-gone"))}
    forget_object("XCachePool", "ns-gone", "pool-a")   # again, or never set: nothing to remove, no error
    forget_object("XCachePool", "ns-gone", "pool-b")
    assert series() == set()
