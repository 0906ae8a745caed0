"""A CachePrestage's desired state: its Job and what its status says, from what the handler read.

Progress comes from the Job's runner: its /metrics while it runs, its termination message once it ended
(prestage/__init__.py). Neither is kept by the operator: a restarted operator reads them again from the
running pod, and the Job, unchanged, is not touched (its name is a digest of its pod). A prestage whose pool
or facility is gone or invalid has no children, so its Job is pruned; one waiting for a ring, or refused for
its own spec or image, leaves its Job as it is and keeps it in status.job, its progress still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import conditions as cond
from ..api import reasons
from ..api.analysisfacility import AnalysisFacilitySpec
from ..api.prestage import CachePrestageSpec
from ..api.xcachepool import DEFAULT_XCACHE_IMAGE, XCachePoolSpec
from ..builders.prestage import build_prestage
from ..policy.imagepolicy import DOCKER_HUB, refusal, spellings
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


def _watched(job: JobState | None, progress: Progress | None, before: Mapping | None) -> dict:
    """The status of a prestage whose children are left as they are: a Job still there stays in status.job
    (the handler reads its progress by that name) with the ring it was made from."""
    kept = {"job": job.name, **({"ringFrom": before["ringFrom"]} if (before or {}).get("ringFrom") else {})} \
        if job is not None else {}
    return {**_counts(progress, before), **kept}


def _removed(before: Mapping | None, states: dict[str, cond.State]) -> Outcome:
    """Refused until the pool or its facility is there and valid: no children, so a running Job is pruned
    (it would read at the WAN share for a pool that is gone); the status keeps what was done."""
    return Outcome(_counts(None, before), states, children=[])


def _repository(image: str) -> str:
    """An image reference without its digest and tag: registry/path/name."""
    name = image.split("@", 1)[0]
    head, slash, last = name.rpartition("/")
    return head + slash + last.split(":", 1)[0]


def is_osg_xcache(image: str) -> bool:
    """OSG's XCache image (the pools' default), at any tag or digest, on its registry or Docker Hub."""
    osg = set(spellings(_repository(DEFAULT_XCACHE_IMAGE))) | {f"{DOCKER_HUB}/opensciencegrid/xcache"}
    return not osg.isdisjoint(spellings(_repository(image)))


def _states(job: JobState | None, progress: Progress | None, gbps: float, waiting: str = "") -> dict[str, cond.State]:
    """What the Job says: ended (Ready, FilesFailed, PrestageFailed) or running; `waiting`: why no Job is
    made now (AwaitingRing), said beside the progress of a Job that runs on."""
    failed = progress.files_failed if progress is not None else 0
    if job is not None and job.failed:
        return cond.failed(reasons.PRESTAGE_FAILED, f"Job {job.name} failed: {job.failed_message}; "
                                                    f"{_progress_message(progress, gbps)}", degraded=True)
    if job is not None and job.succeeded and failed:
        return cond.failed(reasons.FILES_FAILED, _progress_message(progress, gbps), degraded=True)
    if job is not None and job.succeeded:
        return cond.ready(_progress_message(progress, gbps))
    if waiting:
        runs = f"; Job {job.name} runs on with the ring it has: {_progress_message(progress, gbps)}" if job else ""
        return cond.progressing(reasons.AWAITING_RING, waiting + runs)
    pod = f" (its pod: {job.pod_waiting})" if job is not None and job.pod_waiting else ""
    return cond.progressing(reasons.PRESTAGING, _progress_message(progress, gbps) + pod)


def desired_prestage(name: str, namespace: str, spec_raw: Mapping, before: Mapping | None, *,
                     pool: Mapping | None, facility: Mapping | None, ring_fleets: list[str],
                     job: JobState | None, progress: Progress | None, settings: Settings) -> Outcome:
    """`pool`, `facility`: the XCachePool poolRef names and the AnalysisFacility the pool's facilityRef names, as
    read (None: not there); `ring_fleets`: the fleets with workers reading through the pool's ring (by name);
    `job`: the Job status.job names, if it exists; `progress`: its runner's figures (its metrics, or its report
    once it ended)."""
    spec, error = validate(CachePrestageSpec, spec_raw)
    if spec is None:
        return held(_watched(job, progress, before), cond.failed(reasons.INVALID_SPEC, error))
    pool_name = spec.pool_ref.name
    if pool is None:
        return _removed(before, cond.failed(reasons.POOL_NOT_FOUND, f"XCachePool {pool_name} does not exist in this "
                                                                    "namespace (create it, or correct spec.poolRef)"))
    pool_spec, pool_error = validate(XCachePoolSpec, pool.get("spec") or {})
    if pool_spec is None:
        return _removed(before, cond.failed(reasons.POOL_INVALID, f"XCachePool {pool_name}'s spec is not valid "
                                                                  f"({pool_error}): the prestage waits for it"))
    facility_name = pool_spec.facility_ref.name
    if facility is None:
        return _removed(before, cond.failed(reasons.FACILITY_NOT_FOUND,
                                            f"AnalysisFacility {facility_name} (XCachePool {pool_name}'s facilityRef) "
                                            "does not exist: its WAN capacity sets the prestage's pace"))
    facility_spec, facility_error = validate(AnalysisFacilitySpec, facility.get("spec") or {})
    if facility_spec is None:
        return _removed(before, cond.failed(reasons.FACILITY_INVALID, f"AnalysisFacility {facility_name}'s spec is "
                                                                      f"not valid ({facility_error}): its WAN "
                                                                      "capacity sets the prestage's pace"))
    watched = _watched(job, progress, before)
    if pool_spec.auth.mode == "scitokens":
        return held(watched, cond.failed(reasons.INVALID_SPEC, f"XCachePool {pool_name} serves only readers with a "
                                         "SciToken (auth.mode scitokens), and the prestage's runner has none"))
    image = spec.image or pool_spec.image
    if is_osg_xcache(image):
        return held(watched, cond.failed(reasons.INVALID_SPEC, f"the prestage would run OSG's XCache image "
                                         f"({image}), which has no switchyard for its runner: set spec.image to "
                                         "switchyard's XCache image (images/xcache), or one with xrdcp, xrdfs and "
                                         "switchyard"))
    if refused := refusal([image], settings.images):
        return held(watched, refused)
    gbps = round(spec.wan_share * facility_spec.network.wan_gbps, 6)
    fleet = ring_source(ring_fleets, before)
    if fleet is None:
        waiting = (f"no WorkerFleet has workers reading through XCachePool {pool_name} by its ring (hashed "
                   "routing): no ring names the cache each file's readers will read it from")
        return PrestageOutcome({**watched, "gbps": gbps}, _states(job, progress, gbps, waiting), gbps=gbps,
                               job_name=job.name if job is not None else "", progress=progress)
    children = build_prestage(name, namespace, spec, pool=pool_name, pool_port=pool_spec.port,
                              origin_mode=pool_spec.origin.mode, ring_fleet=fleet, image=image, gbps=gbps,
                              uid=pool_spec.xrootd_user.uid)
    job_name = children[-1]["metadata"]["name"]
    status = {**_counts(progress, before), "gbps": gbps, "ringFrom": fleet, "job": job_name}
    current = job if job is not None and job.name == job_name else None
    return PrestageOutcome(status, _states(current, progress, gbps), children=children, gbps=gbps, job_name=job_name,
                           progress=progress)
