"""Prediction drift: the plan's predicted Gbps per switch and per uplink against what was measured (pure).

What is compared, per subject (a switch and a direction):
- "serve": the Gbps a switch's cache hosts send to clients (the exporters'
  `switchyard_xcache_served_bytes_total`, the f-stream's bytes read, every
  client switch together) against the plan's `serveGbps` for that switch (the
  fair-share prediction of what those hosts serve).
- "out" / "in": the load on a switch's uplink in that direction against the
  plan's `fairOutGbps` / `fairInGbps`. The fair-share figures, not the LP
  optimum's outGbps / inGbps: over the 45 loaded uplink directions of the
  fabric bench (bench/results/fabric.md) measured loads were off the fair
  share by 3.1% of capacity on average, off the LP's by 13.2%. The exporters
  count bytes read by the reader's switch (`switchyard_xcache_served_bytes_total
  {client_switch}`, from XRootD's f-stream and the client map), so out of
  switch S is what S's caches serve to readers behind other switches, and in to
  switch T is what caches elsewhere serve to T's readers plus what T's caches
  fetch from the origin (outside the facility). Bytes of readers the map does
  not place ('unknown') count out of the cache's switch and into no switch:
  the map holds every labelled Node's InternalIPs and pod CIDRs and the
  declared outside readers' ranges, so such a reader is outside the cluster,
  behind some uplink other than the cache switch's (see host_flows for the
  exceptions, and docs/metrics.md). So readers nobody declared load the cache
  switch's uplink out in the check, as they do on the wire, and drift there.

A subject is judged only when its prediction or its measurement is at least
`floor_gbps`, it is measured (every cache host it depends on reported
recently), and the facility as a whole is serving at least `idle_fraction` of
what the plan predicts it serves (an idle facility, no analysis running, says
nothing about the model). A subject whose |observed − predicted| ÷
max(predicted, floor) stays above `threshold` for `sustain_seconds` drifts (so
an uplink predicted idle that carries traffic drifts too); it stops drifting after
`clear_seconds` back within `clear_threshold` (a narrower band, so a ratio
hovering at the threshold does not flap). The handler (handlers/drift.py)
reads the exporters and keeps the history; everything here is a function of
its arguments. The start of each streak under way is written to the
facility's status.drift (drift_status) and read back by a new leader (seed),
which keeps it through its own first, unmeasured window.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from .. import conditions as cond
from ..api import reasons
from ..api.analysisfacility import DriftStatus
from ..api.uplinkscore import DIRECTIONS, IN, OUT
from .clientmap import UNATTRIBUTED, UNKNOWN
from .exporterspec import PREFIX

REASON = reasons.PREDICTION_DRIFT
SERVE = "serve"              # bytes served by a switch's caches
UPLINK = DIRECTIONS          # load on a switch's uplink, towards it and away from it
Subject = tuple[str, str]    # (switch, SERVE or one of UPLINK): what one verdict is about


@dataclass(frozen=True)
class DriftRules:
    threshold: float = 0.25         # drift when |observed/predicted - 1| exceeds this ...
    sustain_seconds: float = 300    # ... for this long
    clear_threshold: float = 0.15   # clears when back within this ...
    clear_seconds: float = 60       # ... for this long
    floor_gbps: float = 1.0         # a subject both predicted and measured below this is not judged
    idle_fraction: float = 0.1      # the facility serving less than this share of its predicted serve is idle
    window_seconds: float = 60      # observed Gbps: the counters' increase over this window (from the
                                    # summary read at or before its start)
    stale_seconds: float = 60       # a host whose counters did not move forward for this long is not measured

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "DriftRules":
        """SWITCHYARD_DRIFT_<FIELD> (upper case), each optional."""
        given = {name: float(environ[key]) for name in cls.__dataclass_fields__
                 if environ.get(key := f"SWITCHYARD_DRIFT_{name.upper()}")}
        return cls(**given)


# ---------------------------------------------------------------- what the exporters say
@dataclass(frozen=True)
class HostReading:
    """One cache host's served-bytes count as its exporter served it."""

    pool: str
    host: str
    switch: str
    served_bytes: float  # what its readers read, every client switch's together (the f-stream)
    started: float       # when its exporter started: the count restarts with it
    reported_at: float   # when the exporter last brought the count up to date (the host's clock)


def parse_readings(text: str) -> list[HostReading]:
    """The served-bytes counts in an exporter's /metrics text (none while it has not known its count up to date).

    Not xrootd's summary `client_bytes_total`: XRootD 5.5.3 leaves connections
    that stay open and busy out of it (flat for a whole run with 97 links
    reading, and with 40 paced readers on loopback: test_drift_exporter). A
    Dask worker keeps its connection.
    """
    values: dict[tuple[str, str, str], dict[str, float]] = {}
    wanted = {PREFIX + "exporter_start_time_seconds": "started", PREFIX + "served_bytes_timestamp_seconds": "at"}
    for sample in metric_samples(text):
        key = tuple(sample.labels.get(k, "") for k in ("pool", "host", "switch"))
        if sample.name == PREFIX + "served_bytes_total":
            entry = values.setdefault(key, {})
            entry["bytes"] = entry.get("bytes", 0.0) + sample.value
        elif sample.name in wanted:
            values.setdefault(key, {})[wanted[sample.name]] = sample.value
    return [HostReading(pool, host, switch, v["bytes"], v["started"], v["at"])
            for (pool, host, switch), v in sorted(values.items()) if {"bytes", "started", "at"} <= v.keys()]


def metric_samples(text: str) -> list:
    """Every sample in an exporter's /metrics text; none if the text does not parse."""
    try:
        return [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except ValueError:
        return []


@dataclass(frozen=True)
class Point:
    seen: float          # when the operator first read this value (its monotonic clock)
    at: float            # reported_at
    bytes: float
    started: float


HostKey = tuple[str, str]   # (pool, host)
# host -> (switch, points oldest first, one per summary)
History = Mapping[HostKey, tuple[str, tuple[Point, ...]]]


def record(history: History, readings: Iterable[HostReading], seen: float, keep_seconds: float) -> dict:
    """`history` with one more read of the exporters; a host keeps a point per new summary, for `keep_seconds`."""
    out = dict(history)
    for r in readings:
        switch, points = out.get((r.pool, r.host), (r.switch, ()))
        if not points or points[-1].at != r.reported_at:
            points = (*points, Point(seen, r.reported_at, r.served_bytes, r.started))
        out[(r.pool, r.host)] = (r.switch, points)
    return {key: (switch, kept) for key, (switch, points) in out.items()
            if (kept := tuple(p for p in points if seen - p.seen <= keep_seconds))}


def host_gbps(points: tuple[Point, ...], now: float, rules: DriftRules) -> float | None:
    """What one host served over the window, Gbps; None when it has not reported long enough or lately."""
    ends = _window(points, now, rules)
    if ends is None or ends[1].bytes < ends[0].bytes:
        return None
    first, last, span = ends
    return (last.bytes - first.bytes) * 8 / span / 1e9


def _window(points, now: float, rules: DriftRules):
    """(first, last, span by their `at`): `first` is the newest point at or before the window's start (while
    this xrootd's run has none that old, its oldest); None when the host was not read lately, or not for
    half a window.

    Not the oldest point inside the window: the points are the summaries the operator happened to read,
    out of step with them, so that one can sit anywhere in the window (a summary skipped and the next
    10 ms late left 1.99 s of a 4 s window, under half: a steady host unmeasured for a read, its streak
    restarted).
    """
    if not points or now - points[-1].seen > rules.stale_seconds:
        return None
    last = points[-1]
    # Only this exporter's run: its counters start again from 0 when it restarts.
    run = [p for p in points if p.started == last.started]
    first = next((p for p in reversed(run) if last.at - p.at >= rules.window_seconds), run[0])
    span = last.at - first.at
    return None if span < rules.window_seconds / 2 else (first, last, span)


def observed_gbps(history: History, expected: Mapping[str, Iterable[HostKey]], now: float,
                  rules: DriftRules) -> dict[str, float | None]:
    """switch -> Gbps its cache hosts served over the window; None when one of its planned hosts is not measured.

    `expected`: switch -> the planned cache hosts on it, as (pool, node).
    Hosts the plan no longer has there (a pod yet to move) still count where
    their exporter says they are: their bytes are real.
    """
    out: dict[str, float | None] = {}
    rates = {key: host_gbps(points, now, rules) for key, (_, points) in history.items()}
    for switch, hosts in expected.items():
        hosts = set(hosts)
        if not hosts or any(rates.get(h) is None for h in hosts):
            out[switch] = None
            continue
        out[switch] = sum(rate for key, (sw, _) in history.items() if sw == switch
                          and (rate := rates[key]) is not None)
    return out


# ---------------------------------------------------------------- the verdict
@dataclass(frozen=True)
class SwitchDrift:
    """What is remembered of a subject (a switch's serve, or one direction of its uplink) between assessments."""

    drifting: bool = False
    since: float | None = None   # start of the streak that would flip `drifting` (out of band, or back in it)
    carried_until: float | None = None  # a streak read back from status (seed): not dropped unmeasured until then


def name(subject: Subject) -> str:
    """How messages and events name a subject: "switch rack-a", "uplink rack-a in"."""
    switch, direction = subject
    return f"switch {switch}" if direction == SERVE else f"uplink {switch} {direction}"


@dataclass(frozen=True)
class SwitchVerdict:
    switch: str
    direction: str               # SERVE or one of UPLINK
    predicted: float
    observed: float | None
    judged: bool
    drifting: bool
    caution: str = ""            # why the plan expects this uplink direction to read low (cautions())

    @property
    def subject(self) -> Subject:
        return (self.switch, self.direction)

    @property
    def ratio(self) -> float | None:
        """observed ÷ predicted, when the prediction is worth dividing by."""
        if self.observed is None or self.predicted <= 0:
            return None
        return self.observed / self.predicted

    def describe(self) -> str:
        ratio = "n/a" if self.ratio is None else f"{self.ratio:.2f}"
        observed = "unmeasured" if self.observed is None else f"{self.observed:.2f} Gbps"
        verb = "served" if self.direction == SERVE else "carried"
        low = self.caution and self.ratio is not None and self.ratio < 1
        return (f"{name(self.subject)} {verb} {observed}, predicted {self.predicted:.2f} (ratio {ratio})"
                + (f" [plan caution: {self.caution}]" if low else ""))


@dataclass(frozen=True)
class Assessment:
    verdicts: tuple[SwitchVerdict, ...]
    memory: Mapping[Subject, SwitchDrift]
    began: tuple[Subject, ...]     # subjects that started drifting with this assessment
    cleared: tuple[Subject, ...]   # subjects that stopped
    idle: bool
    rules: DriftRules

    @property
    def drifting(self) -> tuple[SwitchVerdict, ...]:
        return tuple(v for v in self.verdicts if v.drifting)

    def message(self) -> str:
        """Names the drifting switches and uplinks with their figures; empty when none drifts."""
        if not self.drifting:
            return ""
        return (f"{REASON}: the bytes measured on {len(self.drifting)} switch(es) or uplink direction(s) have been "
                f"off the plan's prediction by more than {self.rules.threshold:.0%} for "
                f"{self.rules.sustain_seconds:.0f} s: " + "; ".join(v.describe() for v in self.drifting)
                + ". Check the switch labels and NIC annotations of the nodes there; running children are untouched")


def assess(predicted: Mapping[Subject, float], observed: Mapping[Subject, float | None],
           memory: Mapping[Subject, SwitchDrift], now: float, rules: DriftRules,
           cautions: Mapping[Subject, str] | None = None) -> Assessment:
    """Judge every subject with a prediction; `memory` is the previous assessment's (or seed()); a subject
    reading low that the plan cautions about (`cautions()`) is named with the caution.

    A subject missing from `observed` (or None there) is unmeasured. Whether
    the facility is idle is decided on the serve subjects alone: what its
    caches serve is what an analysis running means.
    """
    serving = [(p, o) for (s, d), p in predicted.items() if d == SERVE and p >= rules.floor_gbps
               and (o := observed.get((s, d))) is not None]
    idle = bool(serving) and sum(o for _, o in serving) < rules.idle_fraction * sum(p for p, _ in serving)
    verdicts, new_memory, began, cleared = [], {}, [], []
    for subject in sorted(predicted):
        gbps, seen = predicted[subject], observed.get(subject)
        before = memory.get(subject, SwitchDrift())
        # A streak read back from status (seed), in the new process's first window: its rates are only starting.
        carried = before.carried_until is not None and now < before.carried_until
        if idle or (seen is not None and max(gbps, seen) < rules.floor_gbps):
            after = SwitchDrift()                      # nothing to disagree about
        elif seen is None:
            after = SwitchDrift(before.drifting and gbps >= rules.floor_gbps)  # unmeasured: keep the verdict
            if carried and before.since is not None and after.drifting == before.drifting:
                after = before   # ... and a carried streak, not dropped for want of this process's readings
        else:
            # Relative to the prediction, but never to less than the floor: an uplink the plan keeps
            # idle that carries traffic anyway (wrong switch labels) is the drift this is for.
            off = abs(seen - gbps) / max(gbps, rules.floor_gbps)
            flips = off <= rules.clear_threshold if before.drifting else off > rules.threshold
            if not flips:
                after = SwitchDrift(before.drifting)
            else:
                since = before.since if before.since is not None else now
                hold = rules.clear_seconds if before.drifting else rules.sustain_seconds
                after = (SwitchDrift(not before.drifting) if now - since >= hold
                         else SwitchDrift(before.drifting, since, before.carried_until if carried else None))
        if after.drifting and not before.drifting:
            began.append(subject)
        elif before.drifting and not after.drifting:
            cleared.append(subject)
        new_memory[subject] = after
        judged = not idle and seen is not None and max(gbps, seen) >= rules.floor_gbps
        verdicts.append(SwitchVerdict(*subject, gbps, seen, judged, after.drifting, (cautions or {}).get(subject, "")))
    cleared += sorted(s for s, m in memory.items() if m.drifting and s not in predicted)  # left the plan
    return Assessment(tuple(verdicts), new_memory, tuple(began), tuple(cleared), idle, rules)


_NAMED = re.compile(rf"switch (\S+) served |uplink (\S+) ({'|'.join(UPLINK)}) carried ")


def seed(conditions: Iterable[Mapping] | None, drift_status: Mapping | None = None, now: float = 0.0,
         offset: float = 0.0, rules: DriftRules = DriftRules()) -> dict[Subject, SwitchDrift]:
    """Memory for a facility first seen by this process: the subjects its Degraded condition names as drifting,
    and the streaks under way that status.drift.pending holds.

    So an operator restart or a new leader keeps a standing drift until the
    bytes say otherwise, instead of clearing it and raising it again minutes
    later, and carries on each streak from when it began. `now` is this
    process's clock (the one assess is given), `offset` the wall clock minus
    it. For window_seconds + stale_seconds a carried streak is not dropped
    for its subject being unmeasured (the new process needs readings of its
    own for a rate, half a window of them at least); measured back in band
    it ends, out of band it goes on, as any streak. One the condition
    contradicts (toward Drift on a subject drifting) is left out.
    """
    memory: dict[Subject, SwitchDrift] = {}
    degraded = cond.condition(list(conditions or ()), "Degraded")
    if degraded and degraded.get("status") == "True" and REASON in (degraded.get("message") or ""):
        named = _NAMED.findall(degraded["message"].split(REASON + ":", 1)[1])
        memory = {(served, SERVE) if served else (switch, direction): SwitchDrift(True)
                  for served, switch, direction in named}
    carried_until = now + rules.window_seconds + rules.stale_seconds
    for streak in DriftStatus.model_validate(drift_status or {}).pending:
        subject = (streak.switch, streak.direction)
        drifting = memory.get(subject, SwitchDrift()).drifting
        began = _seconds(streak.since)
        if began is not None and drifting == (streak.toward == "Clear"):
            # A start in the future (another node's clock ahead of ours) starts now.
            memory[subject] = SwitchDrift(drifting, min(now, began - offset), carried_until)
    return memory


def drift_status(memory: Mapping[Subject, SwitchDrift], offset: float) -> dict:
    """status.drift: the streaks under way in `memory`, each start on the wall clock (`offset`: the wall clock
    minus the clock of `memory`), to the second. Read back by seed()."""
    pending = [{"switch": switch, "direction": direction, "toward": "Clear" if m.drifting else "Drift",
                "since": _rfc3339(m.since + offset)}
               for (switch, direction), m in sorted(memory.items()) if m.since is not None]
    return {"pending": pending}


def _rfc3339(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(round(seconds), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(rfc3339: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (UTC when it names no zone); None when it is not one."""
    try:
        stamp = datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.timezone.utc)).timestamp()


def with_drift(states: Mapping[str, cond.State], assessment: Assessment | None) -> dict[str, cond.State]:
    """The facility's conditions with the drift: Degraded=True PredictionDrift, or added to another Degraded reason.

    A reason the facility already has (nodes lost, a child degraded) is more
    pressing and keeps the reason; the drift is appended to its message.
    """
    out = dict(states)
    if assessment is None or not assessment.drifting:
        return out
    current = out["Degraded"]
    if current.status is True:
        out["Degraded"] = cond.State(True, current.reason, f"{current.message}; {assessment.message()}")
    else:
        out["Degraded"] = cond.State(True, REASON, assessment.message())
    return out


_PREDICTED = {SERVE: "serveGbps", IN: "fairInGbps", OUT: "fairOutGbps"}


def predictions(plan_summary: Mapping | None) -> dict[Subject, float] | None:
    """(switch, direction) -> the plan's fair-share prediction, from a facility's status.plan; None for a plan
    without it (made before the fair share was predicted)."""
    switches = (plan_summary or {}).get("switches") or []
    if not switches or any(key not in s for s in switches for key in _PREDICTED.values()):
        return None
    return {(s["name"], direction): float(s[key]) for s in switches for direction, key in _PREDICTED.items()}


def cautions(plan_summary: Mapping | None) -> dict[Subject, str]:
    """(switch, direction) -> the cautions `switchyard plan` gives that uplink direction, from status.plan
    (fullHostsBehindIn/Out, fullBothWays), each a short tag with what such uplinks carried when measured, so
    that a reading far below it is seen not to be that (short: the Degraded message holds every drifting
    subject and is cut at conditions.MESSAGE_MAX)."""
    out = {}
    for s in (plan_summary or {}).get("switches") or []:
        for direction in UPLINK:
            why = []
            if hosts := s.get(f"fullHostsBehind{direction.title()}"):
                why.append(f"full behind {hosts} cache host(s) at their cap, measured 0.86-0.92")
            if s.get("fullBothWays"):
                why.append("full both ways, measured 0.75-0.86 on BBR cache nodes")
            if why:
                out[(s["name"], direction)] = "; ".join(why)
    return out


def observations(served: Mapping[str, float | None],
                 uplinks: Mapping[Subject, float]) -> dict[Subject, float | None]:
    """Every subject's observed Gbps: observed_gbps' per switch (as serve) and observed_uplinks'."""
    return {**{(switch, SERVE): gbps for switch, gbps in served.items()}, **uplinks}


# ---------------------------------------------------------------- observed uplinks
@dataclass(frozen=True)
class HostFlows:
    """One cache host's byte counters that cross switches: served by reader switch, and fetched from the origin."""

    pool: str
    host: str
    switch: str
    served: Mapping[str, float]   # client switch -> bytes read by readers behind it
    origin_bytes: float
    started: float                # when its exporter started: the counters restart with it
    reported_at: float            # when the exporter last brought `served` up to date (the host's clock)


def parse_flows(text: str) -> list[HostFlows]:
    """The cross-switch counters in an exporter's /metrics text (hosts without a start time, or whose served
    bytes the exporter has not yet known up to date, are left out)."""
    hosts: dict[tuple[str, str, str], dict] = {}
    wanted = {PREFIX + "origin_bytes_total": "origin", PREFIX + "exporter_start_time_seconds": "started",
              PREFIX + "served_bytes_timestamp_seconds": "at"}
    for sample in metric_samples(text):
        key = tuple(sample.labels.get(k, "") for k in ("pool", "host", "switch"))
        if sample.name == PREFIX + "served_bytes_total":
            hosts.setdefault(key, {}).setdefault("served", {})[sample.labels.get("client_switch", "")] = sample.value
        elif sample.name in wanted:
            hosts.setdefault(key, {})[wanted[sample.name]] = sample.value
    return [HostFlows(pool, host, switch, v.get("served", {}), v.get("origin", 0.0), v["started"], v["at"])
            for (pool, host, switch), v in sorted(hosts.items()) if {"started", "at"} <= v.keys()]


ORIGIN = ""  # the source of origin fetches in a flow key: outside the facility


@dataclass(frozen=True)
class FlowPoint:
    seen: float                                     # when the operator first read this count (its monotonic clock)
    at: float                                       # reported_at
    started: float
    flows: tuple[tuple[tuple[str, str], float], ...]  # ((from switch, to switch), bytes so far)


# host -> its points, oldest first
FlowHistory = Mapping[HostKey, tuple[FlowPoint, ...]]


def host_flows(reading: HostFlows) -> tuple[tuple[tuple[str, str], float], ...]:
    """(from, to) -> bytes of one host: its serves to readers on other switches, to readers the client map does
    not place (to UNKNOWN: out of its switch, into none we can name), and its origin fetches.

    A reader the map does not place is taken to be behind another uplink:
    the map has every Node carrying the switch label (its InternalIPs and
    spec.podCIDR(s): desired/xcachepool.py client_networks) and the declared
    outside readers' ranges. The exception: a reader on the cache's own
    switch the map does not know (a machine outside Kubernetes not declared
    in spec.outsideReaders, or a Node without the switch label) is counted
    out though its bytes never leave the switch. Bytes the exporter could tie
    to no reader ('unattributed': a file opened before it started) are left
    out: they may be anyone's, and an exporter restarted under long reads
    would otherwise put them on the uplink for as long as those files stay
    open. Pods
    with addresses outside their Node's spec.podCIDR are placed when Calico's
    IPAM (confirmed BlockAffinity blocks) or Cilium's cluster-pool or
    multi-pool IPAM (CiliumNode CIDRs) gave them (handlers/podnetworks.py);
    a CNI that gives pods addresses from the node's subnet or cloud
    interfaces (AWS VPC CNI, Cilium ENI/Azure), or any other IPAM of its
    own, still breaks the premise: its pods are all 'unknown', its uplinks
    are not observed correctly (docs/metrics.md).
    """
    flows = {(reading.switch, client): value for client, value in reading.served.items()
             if client not in (reading.switch, UNATTRIBUTED)}
    flows[(ORIGIN, reading.switch)] = reading.origin_bytes
    return tuple(sorted(flows.items()))


def record_flows(history: FlowHistory, readings: Iterable[HostFlows], seen: float, keep_seconds: float) -> dict:
    """`history` with one more read: a host keeps a point per count the exporter brought up to date (as `record`
    does); points older than `keep_seconds` are dropped."""
    out = {key: tuple(p for p in points if seen - p.seen <= keep_seconds) for key, points in history.items()}
    for r in readings:
        key = (r.pool, r.host)
        points = out.get(key, ())
        if not points or (points[-1].at, points[-1].started) != (r.reported_at, r.started):
            out[key] = (*points, FlowPoint(seen, r.reported_at, r.started, host_flows(r)))
    return {key: points for key, points in out.items() if points}


def flow_gbps(points: tuple[FlowPoint, ...], now: float, rules: DriftRules) -> dict[tuple[str, str], float] | None:
    """(from, to) -> Gbps of one host over the window; None when it has not been read long enough or lately.

    Timed as host_gbps is, by when the exporter brought its counts up to date: a switch's serve and its
    uplinks are measured over the same ends. By the operator's reads instead, a window ending while the
    f-stream was silent (late, or the reader between files) read low: an uplink out carrying every byte
    its cache served read 0.12 Gbps beside the serve's 0.20 (test_exporter_client_switch, in CI)."""
    ends = _window(points, now, rules)
    if ends is None:
        return None
    first, last, span = ends
    before = dict(first.flows)
    # A counter first seen after the window began (a switch new in the client map) started from 0.
    return {key: max(0.0, value - before.get(key, 0.0)) * 8 / span / 1e9 for key, value in last.flows}


def observed_uplinks(history: FlowHistory, expected: Mapping[str, Iterable[HostKey]], now: float,
                     rules: DriftRules) -> dict[tuple[str, str], float]:
    """(switch, IN | OUT) -> Gbps over the window, for the switches of `expected` that are measured.

    Out of S needs every planned cache host on S measured; in to T needs every
    planned cache host of the facility (any of them may serve T's readers). A
    host missing would make an uplink it crosses look idle, so such a direction
    is left out rather than under-counted.
    """
    rates = {key: flow_gbps(points, now, rules) for key, points in history.items()}
    measured = {switch: all(rates.get(host) is not None for host in hosts) for switch, hosts in expected.items()}
    out: dict[tuple[str, str], float] = {}
    for switch in expected:
        if measured[switch]:
            out[(switch, OUT)] = 0.0
        if all(measured.values()):
            out[(switch, IN)] = 0.0
    for host_rates in rates.values():
        for (source, target), gbps in (host_rates or {}).items():
            if (source, OUT) in out:
                out[(source, OUT)] += gbps
            if target != UNKNOWN and (target, IN) in out:   # an unplaced reader: no uplink we can name
                out[(target, IN)] += gbps
    return out
