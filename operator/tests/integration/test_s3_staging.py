"""A staging area's passes (ensure, measure, sweep, judge, reclaim) against a real MinIO."""

from __future__ import annotations

import datetime
import logging

import pytest

from minio_server import MinioServer, bucket_name, minio, minio_private  # noqa: F401  (fixtures)
from switchyard.api import S3StagingSpec
from switchyard.s3 import S3, Credentials, Endpoint
from switchyard.s3.staging import GIB, Tracker, assess, reclaim

pytestmark = pytest.mark.integration
NOW = datetime.datetime.now(datetime.timezone.utc)
RESYNC = 60.0


def staging(url: str, *buckets: dict, **extra) -> S3StagingSpec:
    return S3StagingSpec.model_validate({"external": {"url": url, "credentialsSecret": "keys"},
                                         "buckets": list(buckets), "usageIntervalSeconds": 30, **extra})


def conditions(spec, obs, url):
    states = assess(spec, obs, url)
    return {k: (v.status, v.reason, v.message) for k, v in states.items()}


def test_first_pass_creates_buckets_with_rules_then_costs_only_a_probe(minio: MinioServer):
    a, b = bucket_name(), bucket_name()
    spec = staging(minio.url, {"name": a, "lifetimeDays": 3}, {"name": b})
    s3, tracker = minio.s3(), Tracker()
    obs = tracker.observe(s3, spec, NOW, 0.0, RESYNC)
    assert obs.error is None
    assert obs.created == [a, b]
    assert obs.rules_set == [(a, 3), (b, 7)]
    assert s3.lifetime_days(a) == 3 and s3.lifetime_days(b) == 7
    assert [(e["name"], e["objects"], e["bytes"], e["expiry"]) for e in obs.buckets] == \
        [(a, 0, 0, "Lifecycle"), (b, 0, 0, "Lifecycle")]
    assert conditions(spec, obs, minio.url)["Ready"][0] is True

    again = tracker.observe(s3, spec, NOW, 1.0, RESYNC)
    assert (again.created, again.rules_set, again.measured, again.error) == ([], [], [], None)

    # Someone removes a bucket: the probe notices and the next pass recreates it.
    s3.delete_bucket(a)
    healed = tracker.observe(s3, spec, NOW, 2.0, RESYNC)
    assert healed.created == [a]
    assert s3.lifetime_days(a) == 3


def test_over_quota_sets_degraded_with_the_numbers(minio: MinioServer):
    name = bucket_name()
    spec = staging(minio.url, {"name": name, "quotaGiB": 10_000 / GIB, "quotaObjects": 150})
    tracker = Tracker()
    tracker.observe(minio.s3(), spec, NOW, 0.0, RESYNC)
    stored = minio.upload(name, 200, size_of=lambda i: 100)
    assert stored == 20_000

    obs = tracker.observe(minio.s3(), spec, NOW, 31.0, RESYNC)  # usage is due again after 30 s
    assert obs.measured == [name]
    cond = conditions(spec, obs, minio.url)
    assert cond["Ready"][0] is True
    status, reason, message = cond["Degraded"]
    assert (status, reason) == (True, "OverQuota")
    assert name in message
    assert "20000 > 10000 bytes" in message and "200 objects of 150 allowed" in message
    entry = obs.buckets[0]
    assert (entry["objects"], entry["bytes"], entry["quotaBytes"]) == (200, 20_000, 10_000)

    minio.boto().delete_objects(Bucket=name, Delete={"Objects": [{"Key": f"obj/{i:06d}"} for i in range(150)]})
    relieved = tracker.observe(minio.s3(), spec, NOW, 62.0, RESYNC)
    assert relieved.buckets[0]["objects"] == 50
    assert conditions(spec, relieved, minio.url)["Degraded"][:2] == (False, "Healthy")


def test_endpoint_down_is_degraded_with_the_error_then_ready_with_nothing_lost(minio_private: MinioServer):
    server, name = minio_private, bucket_name()
    spec = staging(server.url, {"name": name})
    s3 = server.s3(connect_timeout=1, attempts=1)
    tracker = Tracker()
    tracker.observe(s3, spec, NOW, 0.0, RESYNC)
    stored = server.upload(name, 40)
    assert tracker.observe(s3, spec, NOW, 31.0, RESYNC).buckets[0]["objects"] == 40

    server.stop()
    down = tracker.observe(s3, spec, NOW, 32.0, RESYNC)
    assert down.error is not None and down.error.kind == "unreachable"
    cond = conditions(spec, down, server.url)
    assert cond["Ready"][:2] == (False, "EndpointUnreachable")
    assert cond["Degraded"][:2] == (True, "EndpointUnreachable")
    assert server.url in cond["Degraded"][2] and "Could not connect" in cond["Degraded"][2]
    assert (down.buckets[0]["objects"], down.buckets[0]["bytes"]) == (40, stored)  # the last numbers stay

    # A restarted operator (a fresh tracker) still reports the numbers from status.
    reborn = Tracker()
    reborn.seed(down.buckets)
    assert reborn.observe(s3, spec, NOW, 33.0, RESYNC).buckets[0]["objects"] == 40

    server.start()
    back = tracker.observe(s3, spec, NOW, 64.0, RESYNC)
    assert back.error is None
    assert conditions(spec, back, server.url)["Ready"][:2] == (True, "Ready")
    assert (back.buckets[0]["objects"], back.buckets[0]["bytes"]) == (40, stored)
    assert s3.lifetime_days(name) == 7
    assert server.boto().get_object(Bucket=name, Key="obj/000039")["Body"].read() == b"x" * (39 % 97)


def test_sweep_expiry_removes_expired_objects_at_measurement(minio: MinioServer):
    name = bucket_name()
    spec = staging(minio.url, {"name": name, "lifetimeDays": 2, "expiry": "Sweep"})
    s3, tracker = minio.s3(), Tracker()
    first = tracker.observe(s3, spec, NOW, 0.0, RESYNC)
    assert first.rules_set == [] and s3.lifetime_days(name) is None  # the operator sweeps; no rule
    minio.upload(name, 25)
    newest = max(o["LastModified"] for o in minio.boto().list_objects_v2(Bucket=name)["Contents"])  # the server's clock
    fresh = tracker.observe(s3, spec, newest + datetime.timedelta(days=1), 31.0, RESYNC)
    assert fresh.swept == {} and fresh.buckets[0]["objects"] == 25
    later = tracker.observe(s3, spec, newest + datetime.timedelta(days=2), 62.0, RESYNC)
    assert later.swept == {name: (25, sum(i % 97 for i in range(25)))}
    assert later.buckets[0]["objects"] == 0 and later.buckets[0]["expiredRemoved"] == 25
    assert later.buckets[0]["expiry"] == "Sweep"
    assert s3.usage(name).objects == 0


def test_reclaim_deletes_the_staging_buckets_and_nothing_else(minio: MinioServer):
    keep, a, b = bucket_name(), bucket_name(), bucket_name()
    s3 = minio.s3()
    for name in (keep, a, b):
        s3.ensure_bucket(name)
        minio.upload(name, 5)
    spec = staging(minio.url, {"name": a}, {"name": b}, reclaimPolicy="Delete")
    assert reclaim(s3, spec) == {a: 5, b: 5}
    listed = s3.buckets()
    assert a not in listed and b not in listed
    assert keep in listed and s3.usage(keep).objects == 5
    assert reclaim(s3, spec) == {a: 0, b: 0}


def test_credentials_never_reach_status_conditions_or_logs(minio_private: MinioServer, caplog):
    caplog.set_level(logging.DEBUG)
    server, name = minio_private, bucket_name()
    spec = staging(server.url, {"name": name, "quotaGiB": 1 / GIB})
    texts = []
    for s3 in (server.s3(connect_timeout=1, attempts=1),
               S3(Endpoint(server.url, attempts=1), Credentials(server.user, server.password + "x"))):
        tracker = Tracker()
        for mono in (0.0, 31.0):
            obs = tracker.observe(s3, spec, NOW, mono, RESYNC)
            texts += [repr(obs.buckets), str(obs.error), repr(obs.error), repr(conditions(spec, obs, server.url))]
        if obs.error is None:
            server.upload(name, 3)
            texts.append(repr(conditions(spec, tracker.observe(s3, spec, NOW, 62.0, RESYNC), server.url)))
    server.stop()
    obs = Tracker().observe(server.s3(connect_timeout=1, attempts=1), spec, NOW, 0.0, RESYNC)
    texts += [str(obs.error), repr(conditions(spec, obs, server.url))]
    texts.append(caplog.text)
    joined = "\n".join(texts)
    assert "OverQuota" in joined and "AccessDenied" in joined and "EndpointUnreachable" in joined  # all three paths ran
    assert server.user not in joined
    assert server.password not in joined
