"""One staging area on its endpoint: ensure, measure, sweep, judge, reclaim.

`Tracker` is what the operator remembers about one S3Staging between
reconciles. It decides when to touch the endpoint (buckets and rules when the
spec changes or on resync, usage at a paced interval, a cheap probe
otherwise), so a timer that ticks every few seconds does not list a large
bucket every few seconds. `assess` turns what it found into conditions.
Nothing here talks to Kubernetes; clocks come in as arguments.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from dataclasses import dataclass, field

from .. import conditions as cond
from ..api import reasons
from ..api.s3staging import Bucket, S3StagingBody
from .client import S3, S3Error, Usage

GIB = 1024**3
LARGE_BUCKET_OBJECTS = 100_000  # above this, usage is measured less often
MAX_PACING = 10                 # ...down to once per ten intervals


def quota_bytes(bucket: Bucket) -> int:
    return int(bucket.quota_gib * GIB)


def usage_interval(base_seconds: float, objects: int) -> float:
    """Seconds between two measurements of a bucket holding `objects` (a full listing costs
    one request per 1,000 objects, so large buckets are listed proportionally less often)."""
    return base_seconds * min(MAX_PACING, max(1.0, objects / LARGE_BUCKET_OBJECTS))


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


@dataclass
class BucketState:
    usage: Usage | None = None
    measured_at: float = -math.inf          # monotonic seconds
    measured_wall: str = ""
    expiry: str = ""                         # Lifecycle | Sweep, as found on the endpoint
    lifetime_days: int | None = None         # what the rule (or sweep) applies
    expired_removed: int = 0


@dataclass
class Observation:
    """What one pass found and did; `error` set when the endpoint failed it."""

    buckets: list[dict]
    created: list[str] = field(default_factory=list)
    rules_set: list[tuple[str, int]] = field(default_factory=list)
    swept: dict[str, tuple[int, int]] = field(default_factory=dict)  # bucket -> (objects, bytes) removed
    measured: list[str] = field(default_factory=list)
    over_quota: list[str] = field(default_factory=list)
    error: S3Error | None = None


def _digest(spec: S3StagingBody, url: str) -> str:
    data = [url, [(b.name, b.lifetime_days, b.expiry) for b in spec.buckets]]
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()


class Tracker:
    """The operator's memory of one staging area."""

    def __init__(self) -> None:
        self.buckets: dict[str, BucketState] = {}
        self.ensured: tuple[str, float] | None = None  # (digest, monotonic time)
        self.healthy = False

    def seed(self, status_buckets: list[dict]) -> None:
        """Start from the numbers a previous operator wrote, so a restart during an outage loses nothing."""
        for entry in status_buckets or []:
            if entry.get("name") and entry["name"] not in self.buckets:
                self.buckets[entry["name"]] = BucketState(
                    usage=Usage(int(entry.get("objects", 0)), int(entry.get("bytes", 0))),
                    measured_wall=entry.get("measuredAt", ""), expiry=entry.get("expiry", ""),
                    expired_removed=int(entry.get("expiredRemoved", 0)))

    # ------------------------------------------------------------ the pass
    def observe(self, s3: S3, spec: S3StagingBody, wall: datetime.datetime, mono: float,
                resync_seconds: float) -> Observation:
        """Ensure, probe, measure and sweep as due; never raises S3Error (it lands in `error`)."""
        obs = Observation(buckets=[])
        wanted = {b.name for b in spec.buckets}
        for gone in set(self.buckets) - wanted:
            del self.buckets[gone]
        try:
            digest = _digest(spec, s3.endpoint.url)
            due = (not self.healthy or self.ensured is None or self.ensured[0] != digest
                   or mono - self.ensured[1] >= resync_seconds)
            if not due and spec.buckets and not s3.bucket_exists(spec.buckets[0].name):
                due = True  # a cheap probe each pass; someone removed a bucket: ensure again
            elif not due and not spec.buckets:
                s3.buckets()
            if due:
                self._ensure(s3, spec, obs)
                self.ensured = (digest, mono)
            for bucket in spec.buckets:
                self._measure_if_due(s3, spec, bucket, wall, mono, obs)
            self.healthy = True
        except S3Error as exc:
            self.healthy = False
            obs.error = exc
        obs.buckets = self.status(spec)
        obs.over_quota = over_quota(spec, obs.buckets)
        return obs

    def _ensure(self, s3: S3, spec: S3StagingBody, obs: Observation) -> None:
        existing = s3.buckets()
        for bucket in spec.buckets:
            state = self.buckets.setdefault(bucket.name, BucketState())
            if s3.ensure_bucket(bucket.name, existing):
                obs.created.append(bucket.name)
                state.measured_at = -math.inf
            if bucket.expiry == "Sweep":
                state.expiry, state.lifetime_days = "Sweep", bucket.lifetime_days
                continue
            try:
                if s3.set_lifetime(bucket.name, bucket.lifetime_days):
                    obs.rules_set.append((bucket.name, bucket.lifetime_days))
                state.expiry, state.lifetime_days = "Lifecycle", bucket.lifetime_days
            except S3Error as exc:
                if exc.kind != "unsupported" or bucket.expiry == "Lifecycle":
                    raise
                state.expiry, state.lifetime_days = "Sweep", bucket.lifetime_days

    def _measure_if_due(self, s3: S3, spec: S3StagingBody, bucket: Bucket, wall: datetime.datetime,
                        mono: float, obs: Observation) -> None:
        state = self.buckets.setdefault(bucket.name, BucketState())
        objects = state.usage.objects if state.usage else 0
        if mono - state.measured_at < usage_interval(spec.usage_interval_seconds, objects):
            return
        if state.expiry == "Sweep":
            result = s3.sweep_expired(bucket.name, bucket.lifetime_days, wall)
            if result.removed:
                obs.swept[bucket.name] = (result.removed, result.removed_bytes)
                state.expired_removed += result.removed
            usage = result.usage
        else:
            usage = s3.usage(bucket.name)
        state.usage, state.measured_at, state.measured_wall = usage, mono, rfc3339(wall)
        obs.measured.append(bucket.name)

    # ------------------------------------------------------------ reporting
    def status(self, spec: S3StagingBody) -> list[dict]:
        out = []
        for bucket in spec.buckets:
            state = self.buckets.get(bucket.name, BucketState())
            entry = {"name": bucket.name, "quotaBytes": quota_bytes(bucket),
                     "expiredRemoved": state.expired_removed}
            if state.usage is not None:
                entry.update(objects=state.usage.objects, bytes=state.usage.bytes)
            if state.expiry:
                entry["expiry"] = state.expiry
            if state.measured_wall:
                entry["measuredAt"] = state.measured_wall
            out.append(entry)
        return out


def over_quota(spec: S3StagingBody, buckets: list[dict]) -> list[str]:
    """One line per bucket over a quota, with the numbers."""
    measured = {b["name"]: b for b in buckets if "bytes" in b}
    lines = []
    for bucket in spec.buckets:
        entry = measured.get(bucket.name)
        if entry is None:
            continue
        limit = quota_bytes(bucket)
        excess = []
        if limit and entry["bytes"] > limit:
            excess.append(f"{human_bytes(entry['bytes'])} of {human_bytes(limit)} quota "
                          f"({100 * entry['bytes'] / limit:.0f}%, {entry['bytes']} > {limit} bytes)")
        if bucket.quota_objects and entry["objects"] > bucket.quota_objects:
            excess.append(f"{entry['objects']} objects of {bucket.quota_objects} allowed")
        if excess:
            lines.append(f"bucket {bucket.name}: " + "; ".join(excess))
    return lines


def over_quota_reported(conditions) -> frozenset[str]:
    """The buckets ("bucket NAME") a Degraded=True OverQuota condition names, as `assess` wrote it: what a
    new leader (or a restarted operator) has already announced, so that it does not announce it again."""
    degraded = cond.condition(conditions, "Degraded")
    if not degraded or degraded.get("status") != "True" or degraded.get("reason") != reasons.OVER_QUOTA:
        return frozenset()
    return frozenset(part.split(":", 1)[0] for part in (degraded.get("message") or "").split("; ")
                     if part.startswith("bucket ") and ":" in part)


REASONS = {"unreachable": reasons.ENDPOINT_UNREACHABLE, "timeout": reasons.ENDPOINT_UNREACHABLE,
           "tls": reasons.ENDPOINT_TLS_ERROR, "auth": reasons.ACCESS_DENIED,
           "unsupported": reasons.LIFECYCLE_UNSUPPORTED, "throttled": reasons.ENDPOINT_THROTTLING,
           "quota": reasons.ENDPOINT_FULL, "conflict": reasons.BUCKET_CONFLICT}


def error_reason(error: S3Error) -> str:
    return REASONS.get(error.kind, reasons.S3_ERROR)


def assess(spec: S3StagingBody, obs: Observation, url: str) -> dict[str, cond.State]:
    """Conditions from one pass: the endpoint's error wins, then quotas, else Ready."""
    if obs.error is not None:
        message = f"{url}: {obs.error}"
        if obs.error.kind == "unsupported":
            message += " (set the bucket's expiry to Auto or Sweep to have the operator expire objects)"
        reason = error_reason(obs.error)
        return {"Ready": cond.State(False, reason, message), "Progressing": cond.State(False, reason, message),
                "Degraded": cond.State(True, reason, message)}
    states = cond.ready(f"{len(spec.buckets)} bucket(s) on {url}")
    if obs.over_quota:
        states["Degraded"] = cond.State(True, reasons.OVER_QUOTA, "; ".join(obs.over_quota))
    return states


def reclaim(s3: S3, spec: S3StagingBody) -> dict[str, int]:
    """Delete every bucket of `spec` with its contents; bucket -> objects removed."""
    return {bucket.name: s3.delete_bucket(bucket.name) for bucket in spec.buckets}
