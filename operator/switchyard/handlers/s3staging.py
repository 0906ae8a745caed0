"""S3Staging: buckets with lifetimes and quotas on an S3 endpoint, consumer credentials, reclaim.

The keys are read from Secrets here and handed only to the S3 client and to
the consumer Secret; no status field, event or log line carries them.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import secrets
import time
from dataclasses import dataclass

import kopf

from .. import conditions as cond
from ..api import GROUP, VERSION, S3StagingSpec, reasons
from ..builders.s3staging import (ACCESS_KEY, CHILD_KINDS, SECRET_KEY, build_staging, consumer_secret_name,
                                  endpoint_url, region, root_secret_name)
from ..policy.imagepolicy import refusal
from ..observe.metrics import (MANAGED_OBJECTS, S3_BUCKET_BYTES, S3_BUCKET_OBJECTS, S3_BUCKET_QUOTA_BYTES, S3_ERRORS,
                       S3_EXPIRED_OBJECTS)
from ..s3 import S3, Credentials, Endpoint, S3Error
from ..s3.staging import Observation, Tracker, assess, human_bytes, over_quota_reported, reclaim
from ..desired import policy_peers, validate
from ..policy.settings import current
from . import loop, memory
from .client import kube
from .converge import Refused, converge
from .memory import StagingMemory
from .status import ObjectEvents, write_status
from .indexes import workloads_of

KIND = "S3Staging"
PLURAL = "s3stagings"



class Blocked(Exception):
    """Something outside S3 that must change first (a missing Secret, say)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class Access:
    """How the operator and the consumers reach one staging area."""

    endpoint: Endpoint
    operator: Credentials
    consumer: Credentials
    root: Credentials | None = None  # embedded MinIO only


# ------------------------------------------------------------------ credentials
def _decode(secret_name: str, data: dict, key: str) -> str:
    try:
        return base64.b64decode(data[key], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise Blocked(reasons.CREDENTIALS_INVALID,
                      f"Secret {secret_name}: {key!r} is not base64-encoded text") from None


def read_keys(namespace: str, secret_name: str) -> Credentials:
    """'accessKey' and 'secretKey' of a Secret (through the apply module); never logged."""
    secret = kube().get("Secret", namespace, secret_name)
    if secret is None:
        raise Blocked(reasons.CREDENTIALS_MISSING,
                      f"Secret {secret_name} not found; it must hold {ACCESS_KEY!r} and {SECRET_KEY!r}")
    data = secret.get("data") or {}
    missing = [k for k in (ACCESS_KEY, SECRET_KEY) if not data.get(k)]
    if missing:
        raise Blocked(reasons.CREDENTIALS_MISSING,
                      f"Secret {secret_name} has no {' or '.join(repr(k) for k in missing)}")
    return Credentials(_decode(secret_name, data, ACCESS_KEY), _decode(secret_name, data, SECRET_KEY))


def _root_keys(namespace: str, staging: str) -> Credentials:
    """The embedded MinIO's root keys: the ones it has, or new random ones the first time."""
    try:
        return read_keys(namespace, root_secret_name(staging))
    except Blocked:
        return Credentials("sy" + secrets.token_hex(10), secrets.token_urlsafe(30))


def resolve(namespace: str, name: str, spec: S3StagingSpec) -> Access:
    url = endpoint_url(name, namespace, spec)
    if spec.external is not None:
        ext = spec.external
        operator = read_keys(namespace, ext.credentials_secret)
        consumer = read_keys(namespace, ext.consumer_credentials_secret) if ext.consumer_credentials_secret else operator
        return Access(Endpoint(url, ext.region, ext.verify_tls), operator, consumer)
    root = _root_keys(namespace, name)
    return Access(Endpoint(url, region(spec)), root, root, root)


def client_for(kept: StagingMemory, access: Access) -> S3:
    """One boto3 client per staging area, rebuilt when the endpoint or the keys change."""
    fingerprint = hashlib.sha256(repr((access.endpoint, access.operator.access_key,
                                       access.operator.secret_key)).encode()).hexdigest()
    if kept.client is None or kept.client[0] != fingerprint:
        kept.client = (fingerprint, S3(access.endpoint, access.operator))
    return kept.client[1]


# ------------------------------------------------------------------ reporting
def _count_error(namespace: str, name: str, error: S3Error) -> None:
    S3_ERRORS.labels(namespace, name, error.kind, error.operation).inc()


def _export(kept: StagingMemory, namespace: str, name: str, obs: Observation) -> None:
    now = set()
    for entry in obs.buckets:
        labels = (namespace, name, entry["name"])
        S3_BUCKET_QUOTA_BYTES.labels(*labels).set(entry["quotaBytes"])
        if "bytes" in entry:
            S3_BUCKET_BYTES.labels(*labels).set(entry["bytes"])
            S3_BUCKET_OBJECTS.labels(*labels).set(entry["objects"])
        now.add(labels)
    for bucket, (removed, _) in obs.swept.items():
        S3_EXPIRED_OBJECTS.labels(namespace, name, bucket).inc(removed)
    for stale in kept.series - now:
        _remove_series(stale)
    kept.series = now


def _remove_series(labels: tuple[str, str, str]) -> None:
    for gauge in (S3_BUCKET_BYTES, S3_BUCKET_OBJECTS, S3_BUCKET_QUOTA_BYTES):
        try:
            gauge.remove(*labels)
        except KeyError:
            pass


def _announce(kept: StagingMemory, url: str, obs: Observation, events: ObjectEvents) -> None:
    for bucket in obs.created:
        events.info(f"Created bucket {bucket} on {url}", reason=reasons.BUCKET_CREATED)
    for bucket, days in obs.rules_set:
        events.info(f"Set the lifetime of bucket {bucket} to {days} day(s) (lifecycle rule)",
                    reason=reasons.LIFETIME_SET)
    for bucket, (removed, size) in sorted(obs.swept.items()):
        events.info(f"Swept {removed} expired object(s) ({human_bytes(size)}) from bucket {bucket}",
                    reason=reasons.SWEPT)
    over = frozenset(line.split(":", 1)[0] for line in obs.over_quota)
    if obs.error is None and over != kept.over_quota:
        if over:
            events.warning("Over quota: " + "; ".join(obs.over_quota), reason=reasons.OVER_QUOTA)
        else:
            events.info("Every bucket is within its quota again", reason=reasons.WITHIN_QUOTA)
        kept.over_quota = over


def _tracker(kept: StagingMemory, body) -> Tracker:
    if kept.tracker is None:
        kept.tracker = Tracker()
        kept.tracker.seed((body.get("status") or {}).get("buckets") or [])
        # What was announced is in the status; the OverQuota event is not posted again for it.
        kept.over_quota = over_quota_reported((body.get("status") or {}).get("conditions"))
    return kept.tracker


def forget(uid: str, namespace: str, name: str) -> None:
    """The staging area is gone (its reclaim done): its memory, and the gauges it exported."""
    kept = loop.forget(uid)
    for labels in kept.series if isinstance(kept, StagingMemory) else ():
        _remove_series(labels)
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(0)


# ------------------------------------------------------------------ reconcile
def reconcile(body, logger, statefulset_index=None, **_) -> None:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    spec, error = validate(S3StagingSpec, body["spec"])
    if spec is None:
        write_status(KIND, body, {}, cond.failed(reasons.INVALID_SPEC, error), logger)
        return
    if spec.embedded and (refused := refusal([spec.embedded.image], current().images)):
        write_status(KIND, body, {}, refused, logger)
        return
    url = endpoint_url(name, namespace, spec)
    kept = memory.of(body, StagingMemory)
    tracker = _tracker(kept, body)
    base = {"endpoint": url, "credentialsSecret": consumer_secret_name(name), "buckets": tracker.status(spec)}
    try:
        access = resolve(namespace, name, spec)
    except Blocked as blocked:
        write_status(KIND, body, base, cond.failed(blocked.reason, blocked.message, degraded=True), logger)
        return
    consumer = (access.consumer.access_key, access.consumer.secret_key)
    root = (access.root.access_key, access.root.secret_key) if access.root else None
    desired = build_staging(name, namespace, spec, consumer, root, policy_peers(current()))
    try:
        converge(body, desired, CHILD_KINDS, logger)
    except Refused as exc:
        write_status(KIND, body, base, exc.states(), logger)
        return
    MANAGED_OBJECTS.labels(KIND, namespace, name).set(len(desired))

    if spec.embedded is not None:
        ready = sum(w["ready"] for w in workloads_of(statefulset_index or {}, uid) if w["kind"] == "StatefulSet")
        if ready < spec.embedded.servers:
            write_status(KIND, body, base, cond.progressing(
                reasons.MINIO_STARTING, f"{ready}/{spec.embedded.servers} MinIO server(s) ready"), logger)
            return

    obs = tracker.observe(client_for(kept, access), spec, datetime.datetime.now(datetime.timezone.utc),
                          time.monotonic(), current().resync_seconds)
    if obs.error is not None:
        _count_error(namespace, name, obs.error)
    _export(kept, namespace, name, obs)
    _announce(kept, url, obs, ObjectEvents(body, logger))
    write_status(KIND, body, {**base, "buckets": obs.buckets}, assess(spec, obs, url), logger)


# The delete handler below forgets the object when its reclaim is done: a reclaim whose Secret went first
# goes on with the S3 client kept in its memory.
loop.register(PLURAL, KIND, reconcile, forgets_on_delete=False)


# ------------------------------------------------------------------ deletion
def release_hint(namespace: str, name: str) -> str:
    patch = '{"spec":{"reclaimPolicy":"Retain"}}'
    return (f"to keep the buckets and their data and release the object, run: kubectl patch s3staging {name} "
            f"-n {namespace} --type merge -p '{patch}'")


def retry_delay(retry: int) -> float:
    """Backoff for the reclaim finalizer: base, 2×base, 4×base, ... capped."""
    settings = current()
    return min(settings.s3_delete_retry_max_seconds, settings.s3_delete_retry_seconds * 2 ** min(retry, 30))


@kopf.on.delete(GROUP, VERSION, PLURAL, id="S3Staging-reclaim")
def reclaim_on_delete(body, logger, retry: int = 0, **_) -> None:
    """reclaimPolicy Delete: remove the buckets (through a finalizer); Retain: keep them."""
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    events = ObjectEvents(body, logger)
    spec, _ = validate(S3StagingSpec, body["spec"])
    if spec is None or spec.reclaim_policy == "Retain" or not spec.buckets:
        if spec is not None and spec.buckets:
            events.info(f"Retained bucket(s) {', '.join(b.name for b in spec.buckets)} and their data "
                        f"on {endpoint_url(name, namespace, spec)} (reclaimPolicy Retain)", reason=reasons.RETAINED)
        forget(uid, namespace, name)
        return
    url = endpoint_url(name, namespace, spec)
    names = ", ".join(b.name for b in spec.buckets)
    try:
        kept = memory.of(body, StagingMemory)
        try:
            s3 = client_for(kept, resolve(namespace, name, spec))
        except Blocked:
            if kept.client is None:  # e.g. the Secret went first, with its namespace
                raise
            s3 = kept.client[1]  # the keys the operator last read
        removed = reclaim(s3, spec)
    except (Blocked, S3Error) as exc:
        if isinstance(exc, S3Error):
            _count_error(namespace, name, exc)
        attempt, delay = retry + 1, retry_delay(retry)
        message = f"cannot delete bucket(s) {names} on {url} (attempt {attempt}, next in {delay:.0f}s): {exc}"
        patience = current().s3_delete_patience
        if attempt >= patience:
            message += f"; {release_hint(namespace, name)}"
            states = cond.failed(reasons.DELETION_BLOCKED, message, degraded=True)
            if attempt == patience or (attempt - patience) % patience == 0:
                events.warning(message, reason=reasons.DELETION_BLOCKED)
        else:
            states = cond.progressing(reasons.DELETING, message)
            if attempt == 1:
                events.warning(message, reason=reasons.DELETION_RETRYING)
        write_status(KIND, body, {"endpoint": url, "credentialsSecret": consumer_secret_name(name)}, states, logger)
        raise kopf.TemporaryError(message, delay=delay) from None
    total = sum(removed.values())
    events.info(f"Deleted bucket(s) {names} and {total} object(s) from {url} (reclaimPolicy Delete)",
                reason=reasons.RECLAIMED)
    forget(uid, namespace, name)
