"""Every metric switchyard exports, declared once (prefix `switchyard_`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("switchyard_reconciles_total", "Reconciles run, by kind and result.", ["kind", "result"])
RECONCILE_SECONDS = Histogram("switchyard_reconcile_duration_seconds", "Time one reconcile took, by kind.", ["kind"],
                              buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
MANAGED_OBJECTS = Gauge("switchyard_managed_objects", "Child objects a switchyard object owns.", ["kind", "namespace", "name"])
PLAN_PREDICTED_GBPS = Gauge("switchyard_plan_predicted_gbps", "Deliverable aggregate Gbps the plan predicts.", ["namespace", "facility"])
PLAN_BOUND_GBPS = Gauge("switchyard_plan_bound_gbps", "Upper bound on deliverable Gbps for any placement.", ["namespace", "facility"])
PLAN_TARGET_GBPS = Gauge("switchyard_facility_target_gbps", "The facility's throughput target.", ["namespace", "facility"])
PLAN_UPLINK_GBPS = Gauge("switchyard_plan_uplink_gbps", "Predicted uplink load, by switch and direction.",
                         ["namespace", "facility", "switch", "direction"])
PLAN_UPLINK_UTILISATION = Gauge("switchyard_plan_uplink_utilisation", "Predicted peak uplink utilisation (0..1).",
                                ["namespace", "facility", "switch"])
PLAN_CACHES = Gauge("switchyard_plan_caches", "Planned cache hosts per switch.", ["namespace", "facility", "switch"])
PLAN_WORKERS = Gauge("switchyard_plan_workers", "Planned workers per switch.", ["namespace", "facility", "switch"])
