"""Every metric switchyard exports, declared once (prefix `switchyard_`).

The operator's metrics are declared here at module level; the cache exporter's
(`switchyard_xcache_*`) are built at scrape time in `switchyard.observe.exporter`.
`catalog()` lists both, and is what the generated reference (docs/metrics.md)
and the dashboard checks read, so a metric is documented and known to the
dashboards exactly when it is declared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics import MetricWrapperBase

from .exporterspec import FAMILIES, LABELS, PREFIX

# --------------------------------------------------------------- reconciles
RECONCILES = Counter("switchyard_reconciles_total", "Reconciles run, by kind and result (ok, retry, error).", ["kind", "result"])
RECONCILE_SECONDS = Histogram("switchyard_reconcile_duration_seconds", "Time one reconcile took, by kind.", ["kind"],
                              buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
LEADER = Gauge("switchyard_leader", "1 on the operator pod that holds the leader Lease and reconciles, 0 on a standby.",
               ["pod"])
MANAGED_OBJECTS = Gauge("switchyard_managed_objects", "Child objects a switchyard object owns.", ["kind", "namespace", "name"])

# --------------------------------------------------------------- the published hash ring (handlers/xcachepool.py)
RING_HOSTS = Gauge("switchyard_ring_hosts", "Cache hosts of an XCachePool in the hash ring its readers are given: the "
                   "planned hosts with a Ready cache pod (all planned hosts while none is Ready).", ["namespace", "pool"])
RING_CHANGES = Counter("switchyard_ring_changes_total", "Times a pool's published hash ring changed because a cache host "
                       "left it (no Ready cache pod) or came back; each is a RingChanged event on the pool.",
                       ["namespace", "pool"])
HOT_FILES = Gauge("switchyard_hot_files", "Files an XCachePool lists as hot (status.hotFiles: read from more than one "
                  "cache), as decided from its exporters' per-file read rates; a change is a HotFilesChanged event.",
                  ["namespace", "pool"])
RING_WEIGHT_FACTOR = Gauge("switchyard_ring_weight_factor", "Factor on a ring host's planned rendezvous weight for its "
                           "measured load (status.ringWeights; 1: as planned, down to 0.5); a change is a "
                           "RingWeightsChanged event.", ["namespace", "pool", "host"])


def export_ring_factors(namespace: str, pool: str, factors: Mapping[str, float]) -> None:
    """Set switchyard_ring_weight_factor for each of the pool's hosts (`factors`: host -> factor); the series
    of a host no longer given (no longer planned) are removed."""
    for host in _hosts_exported(namespace, pool) - factors.keys():
        RING_WEIGHT_FACTOR.remove(namespace, pool, host)
    for host, value in factors.items():
        RING_WEIGHT_FACTOR.labels(namespace, pool, host).set(value)


def forget_object(kind: str, namespace: str, name: str) -> None:
    """Remove a deleted object's switchyard_managed_objects series (its children go with it)."""
    try:
        MANAGED_OBJECTS.remove(kind, namespace, name)
    except KeyError:
        pass  # never set (no reconcile converged in this process)


def forget_pool(namespace: str, pool: str) -> None:
    """Remove every series of a pool's ring and hot files (when it is deleted)."""
    export_ring_factors(namespace, pool, {})
    for metric in (RING_HOSTS, RING_CHANGES, HOT_FILES):
        try:
            metric.remove(namespace, pool)
        except KeyError:
            pass  # never set (no reconcile converged in this process)


def _hosts_exported(namespace: str, pool: str) -> set[str]:
    """The hosts of the pool's switchyard_ring_weight_factor series, as the gauge holds them: no copy to keep
    in step (the pool's memory is gone when its deletion is handled, and a new leader's gauge is empty)."""
    return {sample.labels["host"] for family in RING_WEIGHT_FACTOR.collect() for sample in family.samples
            if sample.labels["namespace"] == namespace and sample.labels["pool"] == pool}

# --------------------------------------------------------------- prestages (handlers/prestage.py)
PRESTAGE_FILES = Gauge("switchyard_prestage_files", "Files of a CachePrestage by state (done, failed, remaining), as "
                       "its Job's runner counts them.", ["namespace", "prestage", "state"])
PRESTAGE_BYTES = Gauge("switchyard_prestage_bytes", "Bytes of a CachePrestage by state (done; remaining: of the files "
                       "not done whose size the runner has asked).", ["namespace", "prestage", "state"])
PRESTAGE_PACE_GBPS = Gauge("switchyard_prestage_pace_gbps", "The pace a CachePrestage's Job reads at: its wanShare of "
                           "the facility's wanGbps.", ["namespace", "prestage"])

# --------------------------------------------------------------- the plan
PLAN_PREDICTED_GBPS = Gauge("switchyard_plan_predicted_gbps", "Deliverable aggregate Gbps the plan predicts.", ["namespace", "facility"])
PLAN_BOUND_GBPS = Gauge("switchyard_plan_bound_gbps", "Upper bound on deliverable Gbps for any placement.", ["namespace", "facility"])
PLAN_TARGET_GBPS = Gauge("switchyard_facility_target_gbps", "The facility's throughput target.", ["namespace", "facility"])
PLAN_UPLINK_GBPS = Gauge("switchyard_plan_uplink_gbps", "Predicted uplink load, by switch and direction.",
                         ["namespace", "facility", "switch", "direction"])
PLAN_UPLINK_UTILISATION = Gauge("switchyard_plan_uplink_utilisation", "Predicted peak uplink utilisation (0..1).",
                                ["namespace", "facility", "switch"])
PLAN_UPLINK_CAPACITY_GBPS = Gauge("switchyard_plan_uplink_capacity_gbps", "Uplink capacity of a switch (each direction), from the facility's network.",
                                  ["namespace", "facility", "switch"])
PLAN_CACHES = Gauge("switchyard_plan_caches", "Planned cache hosts per switch.", ["namespace", "facility", "switch"])
PLAN_WORKERS = Gauge("switchyard_plan_workers", "Planned workers per switch.", ["namespace", "facility", "switch"])
PLAN_POOL_CACHES = Gauge("switchyard_plan_pool_caches", "Planned cache hosts per XCachePool and switch; "
                         "its `pool` label is the one the cache exporter uses.", ["namespace", "facility", "pool", "switch"])
PLAN_FLEET_WORKERS = Gauge("switchyard_plan_fleet_workers", "Planned workers per WorkerFleet and switch.",
                           ["namespace", "facility", "fleet", "switch"])
FLEET_READY_WORKERS = Gauge("switchyard_fleet_ready_workers", "Workers Ready per WorkerFleet and switch (from the fleet's status).",
                            ["namespace", "facility", "fleet", "switch"])
PLAN_UNPLACED_WORKERS = Gauge("switchyard_plan_unplaced_workers", "Workers of a WorkerFleet no node of the facility has "
                              "room for (cores, memory, pod slots): they stay Pending (the fleet's status.plan.unplaced).",
                              ["namespace", "facility", "fleet"])

_PER_FACILITY = (PLAN_PREDICTED_GBPS, PLAN_BOUND_GBPS, PLAN_TARGET_GBPS, PLAN_UPLINK_GBPS, PLAN_UPLINK_UTILISATION,
                 PLAN_UPLINK_CAPACITY_GBPS, PLAN_CACHES, PLAN_WORKERS, PLAN_POOL_CACHES, PLAN_FLEET_WORKERS,
                 FLEET_READY_WORKERS, PLAN_UNPLACED_WORKERS)
# (namespace, facility) -> gauge -> label values set by the last export
_exported: dict[tuple[str, str], dict[Gauge, set[tuple[str, ...]]]] = {}


def export_plan(namespace: str, facility: str, target_gbps: float, plan, *,
                pool_names: Mapping[str, str] | None = None, fleet_names: Mapping[str, str] | None = None,
                fleets: Iterable[Mapping] = ()) -> None:
    """Set every plan gauge of one facility from its Plan; series no longer planned are removed.

    `pool_names` / `fleet_names` map the plan's pool and fleet keys to the
    XCachePool / WorkerFleet object names (the names the exporter and kubectl
    show); `fleets` are WorkerFleet objects whose `status.switches` report
    ready workers.
    """
    pool_names, fleet_names = pool_names or {}, fleet_names or {}
    values: dict[Gauge, dict[tuple[str, ...], float]] = {g: {} for g in _PER_FACILITY}
    values[PLAN_PREDICTED_GBPS][()] = plan.predicted_gbps
    values[PLAN_BOUND_GBPS][()] = plan.bound_gbps
    values[PLAN_TARGET_GBPS][()] = target_gbps
    for u in plan.uplinks:
        for direction, gbps in u.by_direction:
            values[PLAN_UPLINK_GBPS][(u.switch, direction)] = gbps
        values[PLAN_UPLINK_UTILISATION][(u.switch,)] = u.utilisation
        values[PLAN_UPLINK_CAPACITY_GBPS][(u.switch,)] = u.capacity_gbps
        values[PLAN_CACHES][(u.switch,)] = plan.placement.cache_count(u.switch)
        values[PLAN_WORKERS][(u.switch,)] = plan.placement.worker_count(u.switch)
    for pool, by_switch in plan.placement.caches.items():
        for switch, hosts in by_switch.items():
            values[PLAN_POOL_CACHES][(pool_names.get(pool, pool), switch)] = len(hosts)
    for fleet, by_switch in plan.placement.workers.items():
        for switch, count in by_switch.items():
            values[PLAN_FLEET_WORKERS][(fleet_names.get(fleet, fleet), switch)] = count
    for fleet in {*plan.placement.workers, *plan.unplaced}:   # 0 for a fleet the plan placed whole
        values[PLAN_UNPLACED_WORKERS][(fleet_names.get(fleet, fleet),)] = plan.unplaced.get(fleet, 0)
    for fleet in fleets:
        for entry in (fleet.get("status") or {}).get("switches") or []:
            values[FLEET_READY_WORKERS][(fleet["metadata"]["name"], entry["switch"])] = entry.get("ready", 0)

    _set_series(namespace, facility, values)


def _set_series(namespace: str, facility: str, values: Mapping[Gauge, Mapping[tuple[str, ...], float]]) -> None:
    """Set these gauges' series of one facility; their series not in `values` are removed (other gauges untouched)."""
    previous = _exported.setdefault((namespace, facility), {})
    for gauge, samples in values.items():
        for labels, value in samples.items():
            gauge.labels(namespace, facility, *labels).set(value)
        for stale in previous.get(gauge, set()) - samples.keys():
            gauge.remove(namespace, facility, *stale)
        previous[gauge] = set(samples)


# --------------------------------------------------------------- prediction drift (handlers/drift.py)
PREDICTED_GBPS = Gauge("switchyard_predicted_gbps", "What the plan predicts a switch carries, Gbps, by direction "
                       "(serve: served by the switch's cache hosts, the plan's serveGbps; in / out: its uplink's "
                       "fair-share load, fairInGbps / fairOutGbps): the figures drift is judged against.",
                       ["namespace", "facility", "switch", "direction"])
OBSERVED_GBPS = Gauge("switchyard_observed_gbps", "What a switch carries as the operator measured it, Gbps, by "
                      "direction (serve: bytes the switch's cache hosts sent to clients over the drift window, "
                      "from their exporters; in / out: as switchyard_observed_uplink_gbps).",
                      ["namespace", "facility", "switch", "direction"])
OBSERVED_UPLINK_GBPS = Gauge("switchyard_observed_uplink_gbps", "Load on a switch's uplink as the operator measured "
                             "it over the drift window, Gbps, by direction (compare switchyard_plan_uplink_gbps): "
                             "out = its caches serving readers on other switches; in = caches elsewhere serving its "
                             "readers plus its caches' origin fetches. out is absent until the switch's planned cache "
                             "hosts are measured, in until all of the facility's are.", ["namespace", "facility", "switch", "direction"])
PREDICTION_RATIO = Gauge("switchyard_prediction_ratio", "Observed over predicted Gbps per switch and direction "
                         "(1 = the plan is right); only where the prediction is above the drift floor.",
                         ["namespace", "facility", "switch", "direction"])
PREDICTION_DRIFT = Gauge("switchyard_prediction_drift", "1 while the bytes a switch's caches serve have disagreed "
                         "with the plan long enough to set Degraded=True PredictionDrift, else 0 (its uplink: "
                         "switchyard_uplink_prediction_drift).", ["namespace", "facility", "switch"])
UPLINK_PREDICTION_DRIFT = Gauge("switchyard_uplink_prediction_drift", "1 while one direction of a switch's uplink "
                                "has carried a load off the plan's fair-share prediction long enough to set "
                                "Degraded=True PredictionDrift, else 0.",
                                ["namespace", "facility", "switch", "direction"])


def export_drift(namespace: str, facility: str, predicted: Mapping[tuple[str, str], float],
                 observed: Mapping[tuple[str, str], float], ratio: Mapping[tuple[str, str], float],
                 drifting: Mapping[str, bool], uplinks: Mapping[tuple[str, str], float] | None = None,
                 uplinks_drifting: Mapping[tuple[str, str], bool] | None = None) -> None:
    """Set the drift gauges of one facility ((switch, direction) -> value); series no longer given are removed."""
    _set_series(namespace, facility, {
        PREDICTED_GBPS: predicted, OBSERVED_GBPS: observed, PREDICTION_RATIO: ratio,
        PREDICTION_DRIFT: {(s,): float(d) for s, d in drifting.items()},
        OBSERVED_UPLINK_GBPS: dict(uplinks or {}),
        UPLINK_PREDICTION_DRIFT: {key: float(d) for key, d in (uplinks_drifting or {}).items()}})


def forget_facility(namespace: str, facility: str) -> None:
    """Remove every plan series of a facility (when it is deleted)."""
    for gauge, label_sets in _exported.pop((namespace, facility), {}).items():
        for labels in label_sets:
            gauge.remove(namespace, facility, *labels)


# --------------------------------------------------------------- the catalogue
@dataclass(frozen=True)
class MetricInfo:
    """One metric family as Prometheus sees it."""

    name: str               # family name, e.g. switchyard_reconciles (counters are exposed as NAME_total)
    type: str               # counter | gauge | histogram | summary | info
    help: str
    labels: tuple[str, ...]
    source: str             # "operator" or "exporter"

    @property
    def series_names(self) -> tuple[str, ...]:
        """The names samples carry in the exposition (what a PromQL query uses)."""
        if self.type == "counter":
            return (self.name + "_total",)
        if self.type == "histogram":
            return tuple(self.name + s for s in ("_bucket", "_sum", "_count"))
        if self.type == "summary":
            return (self.name, self.name + "_sum", self.name + "_count")
        return (self.name,)


_serving: set[int] = set()


def serve(port: int) -> None:
    """Serve /metrics on `port` (0: not at all), once per process: a standby serves before kopf
    starts, and kopf's startup handler then finds it serving."""
    if port and port not in _serving:
        start_http_server(port)
        _serving.add(port)


def operator_metrics() -> list[MetricInfo]:
    """The metrics declared in this module."""
    out = []
    for value in globals().values():
        if isinstance(value, MetricWrapperBase):
            name = value._name  # noqa: SLF001 - prometheus_client keeps the family name here
            out.append(MetricInfo(name, value._type, value._documentation, tuple(value._labelnames), "operator"))  # noqa: SLF001
    return sorted(out, key=lambda m: m.name)


def exporter_metrics() -> list[MetricInfo]:
    """The metric families `switchyard exporter` serves, as exporterspec declares them."""
    return sorted((MetricInfo(PREFIX + f.name, f.type, f.documentation, (*LABELS, *f.labels), "exporter")
                   for f in FAMILIES.values()), key=lambda m: m.name)


def catalog() -> list[MetricInfo]:
    """Every metric switchyard exports: the operator's and the cache exporter's."""
    return operator_metrics() + exporter_metrics()


def series_names() -> set[str]:
    """Every sample name a PromQL query may use against switchyard's metrics."""
    return {name for metric in catalog() for name in metric.series_names}


# --------------------------------------------------------------- S3 staging (handlers/s3staging.py)
S3_BUCKET_BYTES = Gauge("switchyard_s3_bucket_bytes", "Bytes in a staging bucket at its last measurement.",
                        ["namespace", "staging", "bucket"])
S3_BUCKET_OBJECTS = Gauge("switchyard_s3_bucket_objects", "Objects in a staging bucket at its last measurement.",
                          ["namespace", "staging", "bucket"])
S3_BUCKET_QUOTA_BYTES = Gauge("switchyard_s3_bucket_quota_bytes", "A staging bucket's byte quota (0: none).",
                              ["namespace", "staging", "bucket"])
S3_EXPIRED_OBJECTS = Counter("switchyard_s3_expired_objects_removed_total",
                             "Expired objects the operator's sweep removed from a staging bucket.",
                             ["namespace", "staging", "bucket"])
S3_ERRORS = Counter("switchyard_s3_errors_total", "Failed S3 calls, by kind (unreachable, timeout, auth, not_found, ...) and S3 operation.",
                    ["namespace", "staging", "kind", "operation"])
