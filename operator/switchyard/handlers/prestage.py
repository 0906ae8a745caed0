"""CachePrestage: read the pool, its facility and the Job's runner, decide (desired.prestage), converge, report.

The runner's progress is read from its pod as the cache exporters are (exporters.metrics_text on the pod's
address), and from its termination message once it ended; the operator keeps none of it, so a restarted
operator finds the Job as it was (its name is a digest of its pod: an unchanged spec applies the same Job)
and reads the progress again.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..builders.prestage import CHILD_KINDS, PRESTAGE_LABEL
from ..desired.prestage import KIND, JobState, PrestageOutcome, desired_prestage
from ..observe.drift import metric_samples
from ..observe.metrics import MANAGED_OBJECTS, PRESTAGE_BYTES, PRESTAGE_FILES, PRESTAGE_PACE_GBPS
from ..policy.settings import current
from ..prestage import BYTE_STATES, FILE_STATES, METRICS_PORT, Progress, parse_report, progress_from_samples
from .client import kube
from .converge import Refused, converge
from .exporters import metrics_text
from .indexes import fleets_reading
from .loop import register
from .status import post, write_status

PLURAL = "cacheprestages"
JOB_NAME_LABEL = "job-name"   # the Job controller labels its pods with their Job's name
RUNNING_SECONDS = 10.0        # how often a running prestage's progress is read
SETTLED_SECONDS = 60.0        # and an ended or refused one looked at again (its Job pruned, its spec fixed)


def _job_state(job: Mapping, pods: list[dict]) -> JobState:
    status = job.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or () if c.get("status") == "True"}
    waiting = ""
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or ():
            reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
            waiting = reason or waiting
    failed = conditions.get("Failed")
    return JobState(job["metadata"]["name"], succeeded="Complete" in conditions, failed=failed is not None,
                    failed_message=(failed or {}).get("message") or (failed or {}).get("reason") or "",
                    pod_waiting=waiting)


def _report(pod: Mapping) -> Progress | None:
    """The runner's termination message, from its last run in this pod."""
    for container in (pod.get("status") or {}).get("containerStatuses") or ():
        for state in (container.get("state"), container.get("lastState")):
            report = parse_report(((state or {}).get("terminated") or {}).get("message"))
            if report is not None:
                return report
    return None


def read_progress(pods: list[dict]) -> Progress | None:
    """The runner's figures: a running pod's /metrics, else the newest ended run's report."""
    newest = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)
    for pod in newest:
        address = (pod.get("status") or {}).get("podIP")
        if (pod.get("status") or {}).get("phase") == "Running" and address:
            text = metrics_text(address, METRICS_PORT)
            if text is not None:
                samples = {(s.name, s.labels.get("state", "")): s.value for s in metric_samples(text)}
                if (progress := progress_from_samples(samples)) is not None:
                    return progress
    return next((report for pod in newest if (report := _report(pod)) is not None), None)


def _export(namespace: str, name: str, outcome: PrestageOutcome) -> None:
    PRESTAGE_PACE_GBPS.labels(namespace, name).set(outcome.gbps)
    progress = outcome.progress
    if progress is None:
        return
    for state, value in zip(FILE_STATES, (progress.files_done, progress.files_failed, progress.files_remaining)):
        PRESTAGE_FILES.labels(namespace, name, state).set(value)
    for state, value in zip(BYTE_STATES, (progress.bytes_done, progress.bytes_remaining)):
        PRESTAGE_BYTES.labels(namespace, name, state).set(value)


def forget_series(namespace: str, name: str) -> None:
    """The prestage is gone: its gauges go with it."""
    for gauge, states in ((PRESTAGE_FILES, FILE_STATES), (PRESTAGE_BYTES, BYTE_STATES)):
        for state in states:
            try:
                gauge.remove(namespace, name, state)
            except KeyError:
                pass
    try:
        PRESTAGE_PACE_GBPS.remove(namespace, name)
    except KeyError:
        pass
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(0)


def reconcile(body, logger, fleet_index, **_) -> float | None:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    pool_name = ((body.get("spec") or {}).get("poolRef") or {}).get("name")
    pool = kube().get("XCachePool", namespace, pool_name) if pool_name else None
    facility_name = (((pool or {}).get("spec") or {}).get("facilityRef") or {}).get("name")
    facility = kube().get("AnalysisFacility", namespace, facility_name) if facility_name else None
    jobs = {j["metadata"]["name"]: j for j in kube().list("Job", namespace, {PRESTAGE_LABEL: name})}
    planned = (body.get("status") or {}).get("job")
    job = pods = None
    if planned in jobs:
        pods = [p for p in kube().list("Pod", namespace, {PRESTAGE_LABEL: name})
                if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == planned]
        job = _job_state(jobs[planned], pods)
    progress = read_progress(pods) if pods else None
    outcome = desired_prestage(name, namespace, body.get("spec") or {}, body.get("status"), pool=pool,
                               facility=facility, ring_fleets=fleets_reading(fleet_index, namespace, pool_name or "", ring_only=True),
                               job=job, progress=progress, settings=current())
    if outcome.converges:
        try:
            converge(body, outcome.children, CHILD_KINDS, logger)
        except Refused as exc:
            write_status(KIND, body, {}, exc.states(), logger)
            return SETTLED_SECONDS
        MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(outcome.children))
    if isinstance(outcome, PrestageOutcome):
        _export(namespace, name, outcome)
    post(body, outcome.events, logger)
    write_status(KIND, body, outcome.status, outcome.states, logger)
    return RUNNING_SECONDS if outcome.states["Progressing"].status else SETTLED_SECONDS


register(PLURAL, KIND, reconcile, on_forget=forget_series)
