"""A CachePrestage's desired state: its Job and what its status says, from what the handler read.

Progress comes from the Job's runner: its /metrics while it runs, its termination message once it ended
(prestage/__init__.py). Neither is kept by the operator: a restarted operator reads them again from the
running pod, and the Job, unchanged, is not touched (its name is a digest of its pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import conditions as cond
from ..api import reasons
from ..api.prestage import CachePrestageSpec
from ..api.xcachepool import DEFAULT_XCACHE_IMAGE, XCachePoolSpec
from ..builders.prestage import build_prestage
from ..policy.imagepolicy import refusal
from ..policy.settings import Settings
from ..prestage import Progress
from . import Outcome, held, validate

KIND = "CachePrestage"


@dataclass(frozen=True)
class JobState:
    """What the handler read of the prestage's Job and its newest pod."""

    name: str
    succeeded: bool = False
    failed: bool = False          # the Job's Failed condition: its backoff limit reached, say
    failed_message: str = ""
    pod_waiting: str = ""         # why its pod is not running (ContainerCreating, ErrImagePull...)


@dataclass(frozen=True)
class PrestageOutcome(Outcome):
    gbps: float = 0.0
    job_name: str = ""
    progress: Progress | None = None


def ring_source(fleets: list[str], before: Mapping | None) -> str | None:
    """The fleet whose routing ConfigMap the Job reads: the one it reads already while it still reads through
    the pool (a new fleet must not make a new Job), else the first by name; None when no fleet does."""
    kept = (before or {}).get("ringFrom")
    return kept if kept in fleets else (fleets[0] if fleets else None)


def _progress_message(progress: Progress | None, gbps: float) -> str:
    if progress is None:
        return f"the Job is starting; it reads at {gbps:g} Gbps at most"
    return (f"{progress.files_done}/{progress.files_total} files, {progress.bytes_done} bytes done "
            f"({progress.bytes_remaining} remaining), {progress.files_failed} failed, at {gbps:g} Gbps at most")


def _counts(progress: Progress | None, before: Mapping | None) -> dict:
    """status.files, bytes and failedUrls: the runner's figures, else what the status said (no read this time)."""
    if progress is None:
        return {k: (before or {})[k] for k in ("files", "bytes", "failedUrls") if k in (before or {})}
    return {**progress.to_status(), "failedUrls": list(progress.failed)}


def desired_prestage(name: str, namespace: str, spec_raw: Mapping, before: Mapping | None, *,
                     pool: Mapping | None, facility: Mapping | None, ring_fleets: list[str],
                     job: JobState | None, progress: Progress | None, settings: Settings) -> Outcome:
    """`pool`, `facility`: the XCachePool poolRef names and the AnalysisFacility the pool's facilityRef names, as
    read (None: not there); `ring_fleets`: the fleets reading through the pool (by name); `job`: the current
    Job, if it exists; `progress`: the runner's figures (its metrics, or its report once it ended)."""
    spec, error = validate(CachePrestageSpec, spec_raw)
    if spec is None:
        return held({}, cond.failed(reasons.INVALID_SPEC, error))
    pool_name = spec.pool_ref.name
    if pool is None:
        return held({}, cond.failed(reasons.POOL_NOT_FOUND, f"XCachePool {pool_name} does not exist in this "
                                                            "namespace (create it, or correct spec.poolRef)"))
    pool_spec, _ = validate(XCachePoolSpec, pool.get("spec") or {})
    if pool_spec is None:
        return held({}, cond.progressing(reasons.AWAITING_RING, f"XCachePool {pool_name}'s spec is not valid; "
                                                                "the prestage waits for it"))
    if facility is None:
        return held({}, cond.failed(reasons.FACILITY_NOT_FOUND,
                                    f"AnalysisFacility {pool_spec.facility_ref.name} (XCachePool {pool_name}'s "
                                    "facilityRef) does not exist: its WAN capacity sets the prestage's pace"))
    image = spec.image or pool_spec.image
    if image == DEFAULT_XCACHE_IMAGE:
        return held({}, cond.failed(reasons.INVALID_SPEC, f"XCachePool {pool_name} runs OSG's XCache image, which has "
                                    "no switchyard for the prestage's runner: set spec.image to switchyard's XCache "
                                    "image (images/xcache), or one with xrdcp, xrdfs and switchyard"))
    if refused := refusal([image], settings.images):
        return held({}, refused)
    wan = float((((facility.get("spec") or {}).get("network") or {}).get("wanGbps")) or 100.0)
    gbps = round(spec.wan_share * wan, 6)
    fleet = ring_source(ring_fleets, before)
    counts = _counts(progress, before)
    if fleet is None:
        return held({**counts, "gbps": gbps}, cond.progressing(
            reasons.AWAITING_RING, f"no WorkerFleet reads through XCachePool {pool_name} by its ring (hashed "
                                   "routing): no ring names the cache each file's readers will read it from"))
    children = build_prestage(name, namespace, spec, pool=pool_name, pool_port=pool_spec.port,
                              origin_mode=pool_spec.origin.mode, ring_fleet=fleet, image=image, gbps=gbps,
                              uid=pool_spec.xrootd_user.uid)
    job_name = children[-1]["metadata"]["name"]
    status = {**counts, "gbps": gbps, "ringFrom": fleet, "job": job_name}
    current = job if job is not None and job.name == job_name else None
    failed = progress.files_failed if progress is not None else 0
    if current is not None and current.failed:
        states = cond.failed(reasons.PRESTAGE_FAILED, f"Job {job_name} failed: {current.failed_message}; "
                                                      f"{_progress_message(progress, gbps)}", degraded=True)
    elif current is not None and current.succeeded and failed:
        states = cond.failed(reasons.FILES_FAILED, _progress_message(progress, gbps), degraded=True)
    elif current is not None and current.succeeded:
        states = cond.ready(_progress_message(progress, gbps))
    else:
        waiting = f" (its pod: {current.pod_waiting})" if current is not None and current.pod_waiting else ""
        states = cond.progressing(reasons.PRESTAGING, _progress_message(progress, gbps) + waiting)
    return PrestageOutcome(status, states, children=children, gbps=gbps, job_name=job_name, progress=progress)
