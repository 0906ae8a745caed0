"""The operator's settings: read once from its environment (the chart sets it), then passed on.

Nothing else reads the environment at import time. `current()` is what the
handlers use; the startup handler installs the environment's settings before
any object is handled, and tests install their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..observe.drift import DriftRules
from .hostpaths import HostPathPolicy
from .imagepolicy import ImagePolicy

# The image the repository's Dockerfile builds: the operator, and the exporter and jitter helpers it runs.
OPERATOR_IMAGE = "ghcr.io/switchyard-dev/switchyard:0.1.0"


@dataclass(frozen=True)
class Settings:
    exporter_image: str = OPERATOR_IMAGE        # SWITCHYARD_EXPORTER_IMAGE
    timer_seconds: float = 5                    # SWITCHYARD_TIMER_SECONDS: periodic re-check of every object
    resync_seconds: float = 60                  # SWITCHYARD_RESYNC_SECONDS: re-apply children to undo drift
    disk_read_seconds: float = 30               # SWITCHYARD_DISK_READ_SECONDS: cache hosts' disk usage reads
    not_ready_grace_seconds: float = 30         # SWITCHYARD_NOT_READY_GRACE_SECONDS: before a NotReady node's pods go
    workers: int = 8                            # SWITCHYARD_WORKERS: handler threads
    metrics_port: int = 8080                    # SWITCHYARD_METRICS_PORT
    kubeconfig: str | None = None               # KUBECONFIG (outside a cluster)
    images: ImagePolicy = field(default_factory=ImagePolicy)          # SWITCHYARD_ALLOWED_IMAGES
    host_paths: HostPathPolicy = field(default_factory=HostPathPolicy)  # SWITCHYARD_ALLOWED_HOST_PATHS
    # S3Staging deletion with reclaimPolicy Delete: retry with backoff; after
    # `s3_delete_patience` failed attempts, say so loudly.
    s3_delete_retry_seconds: float = 5          # SWITCHYARD_S3_DELETE_RETRY_SECONDS
    s3_delete_retry_max_seconds: float = 300    # SWITCHYARD_S3_DELETE_RETRY_MAX_SECONDS
    s3_delete_patience: int = 6                 # SWITCHYARD_S3_DELETE_PATIENCE
    # Prediction drift (drift.py): the facility compares what its caches serve with the plan.
    drift_check: bool = True                    # SWITCHYARD_DRIFT_CHECK (false: no exporter reads, no condition)
    drift_read_seconds: float = 15              # SWITCHYARD_DRIFT_READ_SECONDS: exporter reads per facility
    drift: DriftRules = field(default_factory=DriftRules)  # SWITCHYARD_DRIFT_THRESHOLD, _SUSTAIN_SECONDS, ...
    memdump_dir: str | None = None              # SWITCHYARD_MEMDUMP_DIR: SIGUSR1 writes heap reports here (profiling)
    # NetworkPolicies for the Dask schedulers and embedded MinIOs the operator creates (builders/common.py).
    network_policies: bool = True               # SWITCHYARD_NETWORK_POLICIES (false: none, and those made are pruned)
    release_namespace: str | None = None        # SWITCHYARD_RELEASE_NAMESPACE: where the chart runs the operator
                                                # and gateway the policies admit (unset: any namespace)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> "Settings":
        def number(name: str, default: float, kind=float):
            return kind(environ[name]) if environ.get(name) else default
        return cls(
            exporter_image=environ.get("SWITCHYARD_EXPORTER_IMAGE") or OPERATOR_IMAGE,
            timer_seconds=number("SWITCHYARD_TIMER_SECONDS", 5),
            resync_seconds=number("SWITCHYARD_RESYNC_SECONDS", 60),
            disk_read_seconds=number("SWITCHYARD_DISK_READ_SECONDS", 30),
            not_ready_grace_seconds=number("SWITCHYARD_NOT_READY_GRACE_SECONDS", 30),
            workers=number("SWITCHYARD_WORKERS", 8, int),
            metrics_port=number("SWITCHYARD_METRICS_PORT", 8080, int),
            kubeconfig=environ.get("KUBECONFIG"),
            images=ImagePolicy.from_environment(environ),
            host_paths=HostPathPolicy.from_environment(environ),
            s3_delete_retry_seconds=number("SWITCHYARD_S3_DELETE_RETRY_SECONDS", 5),
            s3_delete_retry_max_seconds=number("SWITCHYARD_S3_DELETE_RETRY_MAX_SECONDS", 300),
            s3_delete_patience=number("SWITCHYARD_S3_DELETE_PATIENCE", 6, int),
            drift_check=_flag(environ.get("SWITCHYARD_DRIFT_CHECK", "true")),
            drift_read_seconds=number("SWITCHYARD_DRIFT_READ_SECONDS", 15),
            drift=DriftRules.from_environment(environ),
            memdump_dir=environ.get("SWITCHYARD_MEMDUMP_DIR") or None,
            network_policies=_flag(environ.get("SWITCHYARD_NETWORK_POLICIES", "true")),
            release_namespace=environ.get("SWITCHYARD_RELEASE_NAMESPACE") or None,
        )


def _flag(value: str) -> bool:
    return value.strip().lower() not in ("false", "0", "no", "off")


_current: Settings | None = None


def current() -> Settings:
    """The installed settings; read from the environment on first use if none were installed."""
    global _current
    if _current is None:
        _current = Settings.from_environment()
    return _current


def install(settings: Settings) -> Settings:
    global _current
    _current = settings
    return settings
