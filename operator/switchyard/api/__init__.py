"""The switchyard API: one pydantic model per kind, the source of the CRDs."""

from dataclasses import dataclass

from .analysisfacility import AnalysisFacilitySpec, AnalysisFacilityStatus
from .base import API_VERSION, GROUP, VERSION, Condition, Model
from .prestage import CachePrestageSpec, CachePrestageStatus
from .s3staging import S3StagingSpec, S3StagingStatus
from .workerfleet import WorkerFleetSpec, WorkerFleetStatus
from .xcachepool import XCachePoolSpec, XCachePoolStatus


@dataclass(frozen=True)
class Kind:
    """One custom resource kind and how it is presented."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec: type[Model]
    status: type[Model]
    description: str
    printer_columns: tuple[dict, ...]
    scale: bool = False


def _ready_column() -> dict:
    return {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}


def _reason_column() -> dict:
    return {"name": "Reason", "type": "string", "priority": 1, "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'}


def _age_column() -> dict:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


KINDS: tuple[Kind, ...] = (
    Kind(
        kind="AnalysisFacility",
        plural="analysisfacilities",
        short_names=("af",),
        spec=AnalysisFacilitySpec,
        status=AnalysisFacilityStatus,
        description="A caching analysis facility: its network, throughput target, cache pools, worker fleets and staging area.",
        printer_columns=(
            _ready_column(),
            {"name": "Switches", "type": "integer", "jsonPath": ".status.switches"},
            {"name": "Caches", "type": "integer", "jsonPath": ".status.caches"},
            {"name": "Workers", "type": "integer", "jsonPath": ".status.workers"},
            {"name": "Predicted-Gbps", "type": "number", "jsonPath": ".status.plan.predictedGbps"},
            {"name": "Gap", "type": "number", "jsonPath": ".status.plan.gap"},
            {"name": "Fair-Share-Gbps", "type": "number", "priority": 1, "jsonPath": ".status.plan.fairShareGbps"},
            {"name": "Target-Gbps", "type": "number", "jsonPath": ".spec.targetGbps"},
            {"name": "Bottleneck", "type": "string", "priority": 1, "jsonPath": ".status.plan.bottleneck"},
            _reason_column(),
            _age_column(),
        ),
    ),
    Kind(
        kind="XCachePool",
        plural="xcachepools",
        short_names=("xcp",),
        spec=XCachePoolSpec,
        status=XCachePoolStatus,
        description="A pool of XRootD caching proxies on NVMe nodes, one workload per switch.",
        printer_columns=(
            _ready_column(),
            {"name": "Hosts", "type": "integer", "jsonPath": ".status.hosts"},
            {"name": "Ready-Hosts", "type": "integer", "jsonPath": ".status.readyHosts"},
            {"name": "Serving-Gbps", "type": "number", "jsonPath": ".status.servingGbps"},
            {"name": "Disk-Used-%", "type": "number", "jsonPath": ".status.disk.usedPercent"},
            {"name": "Endpoint", "type": "string", "priority": 1, "jsonPath": ".status.endpoint"},
            _reason_column(),
            _age_column(),
        ),
    ),
    Kind(
        kind="WorkerFleet",
        plural="workerfleets",
        short_names=("wf",),
        spec=WorkerFleetSpec,
        status=WorkerFleetStatus,
        description="A fleet of Dask or TaskVine workers placed on the facility's switches.",
        printer_columns=(
            _ready_column(),
            {"name": "Engine", "type": "string", "jsonPath": ".status.engine"},
            {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Workers", "type": "integer", "jsonPath": ".status.replicas"},
            {"name": "Ready-Workers", "type": "integer", "jsonPath": ".status.readyReplicas"},
            _reason_column(),
            _age_column(),
        ),
        scale=True,
    ),
    Kind(
        kind="S3Staging",
        plural="s3stagings",
        short_names=("s3s",),
        spec=S3StagingSpec,
        status=S3StagingStatus,
        description="An S3 staging area for intermediate outputs: buckets with lifetimes and quotas, and consumer credentials.",
        printer_columns=(
            _ready_column(),
            {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint"},
            _reason_column(),
            _age_column(),
        ),
    ),
    Kind(
        kind="CachePrestage",
        plural="cacheprestages",
        short_names=("cps",),
        spec=CachePrestageSpec,
        status=CachePrestageStatus,
        description="A dataset warmed into a pool's caches before an analysis, each file in the cache the ring names "
                    "for it, at a share of the WAN.",
        printer_columns=(
            _ready_column(),
            {"name": "Pool", "type": "string", "jsonPath": ".spec.poolRef.name"},
            {"name": "Files", "type": "integer", "jsonPath": ".status.files.total"},
            {"name": "Done", "type": "integer", "jsonPath": ".status.files.done"},
            {"name": "Failed", "type": "integer", "jsonPath": ".status.files.failed"},
            {"name": "Gbps", "type": "number", "priority": 1, "jsonPath": ".status.gbps"},
            _reason_column(),
            _age_column(),
        ),
    ),
)

KINDS_BY_NAME = {k.kind: k for k in KINDS}

__all__ = [
    "API_VERSION", "GROUP", "VERSION", "KINDS", "KINDS_BY_NAME", "Kind", "Condition", "Model",
    "AnalysisFacilitySpec", "AnalysisFacilityStatus", "XCachePoolSpec", "XCachePoolStatus",
    "WorkerFleetSpec", "WorkerFleetStatus", "S3StagingSpec", "S3StagingStatus", "CachePrestageSpec",
    "CachePrestageStatus",
]
