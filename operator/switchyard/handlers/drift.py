"""Prediction drift of a facility: read its cache hosts' exporters, keep the history, judge (drift.py), report.

Called from the facility's reconcile with the plan it just made; reads the
exporters at most every SWITCHYARD_DRIFT_READ_SECONDS, exports the drift
gauges and posts an event when a switch's serve or an uplink direction starts
or stops drifting. It only reads: no child is changed because of what it finds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ..observe import drift
from ..api import reasons
from ..observe.metrics import export_drift
from ..policy.settings import current
from . import memory
from .exporters import read_all, ready_cache_pods
from .memory import FacilityDrift, FacilityMemory
from .status import ObjectEvents


def pod_addresses(state: FacilityDrift, namespace: str, expected: Mapping[str, list[drift.HostKey]],
                  now: float) -> dict[drift.HostKey, str]:
    """(XCachePool, node) -> address of its ready cache pod.

    Listed again only when a planned host has no known pod, or after
    SWITCHYARD_RESYNC_SECONDS: cache pods use host networking, so a pod's
    address is its node's and stays while the plan keeps it there.
    """
    wanted = {host for hosts in expected.values() for host in hosts}
    if wanted - state.addresses.keys() or now - state.listed >= current().resync_seconds:
        pools = sorted({pool for pool, _ in wanted})
        state.addresses = {(pool, pod["spec"].get("nodeName", "")): pod["status"]["podIP"]
                           for pool in pools for pod in ready_cache_pods(namespace, pool)}
        state.listed = now
    return state.addresses


def read_hosts(addresses: Mapping[drift.HostKey, str]) -> tuple[list[drift.HostReading], list[drift.HostFlows]]:
    """Every listed cache host's served-bytes counter and cross-switch counters, as its exporter serves them."""
    texts = [text for text in read_all(sorted(set(addresses.values()))) if text is not None]
    return ([reading for text in texts for reading in drift.parse_readings(text)],
            [flows for text in texts for flows in drift.parse_flows(text)])


def expected_hosts(plan, pool_names: Mapping[str, str]) -> dict[str, list[drift.HostKey]]:
    """switch -> its planned cache hosts as (XCachePool name, node), for every switch of the plan."""
    out: dict[str, list[drift.HostKey]] = {u.switch: [] for u in plan.uplinks}
    for pool, by_switch in plan.placement.caches.items():
        for switch, nodes in by_switch.items():
            out.setdefault(switch, []).extend((pool_names.get(pool, pool), node) for node in nodes)
    return out


def check(body: Mapping, plan, plan_summary: Mapping, pool_names: Mapping[str, str],
          logger) -> tuple[drift.Assessment | None, dict | None]:
    """The facility's latest drift assessment (None: not checked, or the plan has no fair-share prediction), and
    its status.drift, the streaks under way (None: not checked)."""
    settings = current()
    meta = body["metadata"]
    if not settings.drift_check:
        return None, None
    kept = memory.of(body, FacilityMemory)
    if kept.drift is None:
        # A facility new to this process (a restart, a new leader): carry on what its status holds.
        status, now = body.get("status") or {}, time.monotonic()
        offset = time.time() - now
        kept.drift = FacilityDrift(
            drift.seed(status.get("conditions"), status.get("drift"), now, offset, settings.drift), offset)
    state = kept.drift
    now = time.monotonic()
    if now - state.last_read < settings.drift_read_seconds:
        return state.assessment, drift.drift_status(state.memory, state.offset)
    rules = settings.drift
    expected = expected_hosts(plan, pool_names)
    readings, flows = read_hosts(pod_addresses(state, meta["namespace"], expected, now))
    keep = rules.window_seconds + rules.stale_seconds
    state.history = drift.record(state.history, readings, now, keep_seconds=keep)
    state.flows = drift.record_flows(state.flows, flows, now, keep_seconds=keep)
    state.last_read = now
    served = drift.observed_gbps(state.history, expected, now, rules)
    uplinks = drift.observed_uplinks(state.flows, expected, now, rules)
    observed = drift.observations(served, uplinks)
    predicted, cautions = drift.predictions(plan_summary), drift.cautions(plan_summary)
    state.assessment = (None if predicted is None
                        else drift.assess(predicted, observed, state.memory, now, rules, cautions))
    if state.assessment is not None:
        state.memory = state.assessment.memory
        _announce(body, state.assessment, logger)
    _export(meta["namespace"], meta["name"], predicted or {}, observed, state.assessment, uplinks)
    return state.assessment, drift.drift_status(state.memory, state.offset)


def _announce(body: Mapping, assessment: drift.Assessment, logger) -> None:
    events = ObjectEvents(body, logger)
    if assessment.began:
        began = [v for v in assessment.drifting if v.subject in assessment.began]
        events.warning(f"{drift.REASON} on {_names(assessment.began)}: " + "; ".join(v.describe() for v in began),
                       reason=drift.REASON)
    if assessment.cleared:
        why = "the facility is idle" if assessment.idle else "observed and predicted agree again"
        events.info(f"Prediction drift cleared on {_names(assessment.cleared)}: {why}",
                    reason=reasons.PREDICTION_AGREES)


def _names(subjects) -> str:
    return ", ".join(drift.name(subject) for subject in subjects)


def _export(namespace: str, facility: str, predicted: Mapping[drift.Subject, float],
            observed: Mapping[drift.Subject, float | None], assessment: drift.Assessment | None,
            uplinks: Mapping[drift.Subject, float]) -> None:
    verdicts = assessment.verdicts if assessment is not None else ()
    export_drift(namespace, facility, predicted=dict(predicted),
                 observed={subject: g for subject, g in observed.items() if g is not None},
                 ratio={v.subject: v.ratio for v in verdicts
                        if v.ratio is not None and v.predicted >= current().drift.floor_gbps},
                 drifting={v.switch: v.drifting for v in verdicts if v.direction == drift.SERVE},
                 uplinks=uplinks,
                 uplinks_drifting={v.subject: v.drifting for v in verdicts if v.direction != drift.SERVE})
