"""S3 staging decisions that need no endpoint: error kinds, redaction, pacing, quotas, conditions, backoff."""

from __future__ import annotations

import botocore.exceptions
import pytest

from switchyard.api import S3StagingSpec
from switchyard.s3 import Credentials, S3Error, classify, redact
from switchyard import conditions as cond
from switchyard.s3.staging import GIB, Observation, assess, over_quota, over_quota_reported, usage_interval


def client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


@pytest.mark.parametrize("exc, kind", [
    (botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), "unreachable"),
    (botocore.exceptions.ConnectTimeoutError(endpoint_url="http://10.0.0.1"), "timeout"),
    (botocore.exceptions.ReadTimeoutError(endpoint_url="http://10.0.0.1"), "timeout"),
    (botocore.exceptions.SSLError(endpoint_url="https://x", error="bad cert"), "tls"),
    (client_error("SignatureDoesNotMatch", 403), "auth"),
    (client_error("InvalidAccessKeyId", 403), "auth"),
    (client_error("AccessDenied", 403), "auth"),
    (client_error("NoSuchBucket", 404), "not_found"),
    (client_error("404", 404), "not_found"),  # HEAD answers carry only the status
    (client_error("NotImplemented", 501), "unsupported"),
    (client_error("SlowDown", 503), "throttled"),
    (client_error("XMinioStorageFull", 507), "quota"),
    (client_error("BucketAlreadyExists", 409), "conflict"),
    (client_error("InternalError", 500), "server"),
    (client_error("Weird", 418), "other"),
    (S3Error("op", "auth", "m"), "auth"),
    (ValueError("x"), "other"),
])
def test_errors_are_classified_by_kind(exc, kind):
    assert classify(exc) == kind


def test_redaction_and_credentials_repr():
    assert redact("key AKIA123 and secret s3cr3t", "AKIA123", "s3cr3t", "") == "key *** and secret ***"
    assert "AKIA123" not in repr(Credentials("AKIA123", "s3cr3t")) and "s3cr3t" not in repr(Credentials("AKIA123", "s3cr3t"))


@pytest.mark.parametrize("objects, seconds", [(0, 60), (99_999, 60), (200_000, 120), (10_000_000, 600)])
def test_usage_of_large_buckets_is_measured_less_often(objects, seconds):
    assert usage_interval(60, objects) == seconds


def spec(**bucket) -> S3StagingSpec:
    return S3StagingSpec.model_validate({"external": {"url": "http://s3.local:9000", "credentialsSecret": "k"},
                                         "buckets": [{"name": "out", **bucket}, {"name": "free"}]})


@pytest.mark.parametrize("bucket, usage, expected", [
    ({}, {"objects": 10**9, "bytes": 10**15}, []),                          # no quotas
    ({"quotaGiB": 1}, {"objects": 1, "bytes": GIB}, []),                      # at the quota is within
    ({"quotaGiB": 1}, {"objects": 1, "bytes": GIB + 1}, ["1.00 GiB of 1.00 GiB quota (100%, 1073741825 > 1073741824 bytes)"]),
    ({"quotaGiB": 2}, {"objects": 3, "bytes": 3 * GIB}, ["3.00 GiB of 2.00 GiB quota (150%, 3221225472 > 2147483648 bytes)"]),
    ({"quotaObjects": 5}, {"objects": 6, "bytes": 1}, ["6 objects of 5 allowed"]),
])
def test_over_quota_lines_carry_the_numbers(bucket, usage, expected):
    lines = over_quota(spec(**bucket), [{"name": "out", **usage}, {"name": "free", "objects": 10**6, "bytes": 10**12}])
    assert lines == [f"bucket out: {e}" for e in expected]


def test_unmeasured_buckets_are_not_judged():
    assert over_quota(spec(quotaObjects=1), [{"name": "out", "quotaBytes": 0}]) == []


def test_conditions_error_beats_quota_and_names_the_endpoint():
    s = spec(quotaObjects=1)
    error = S3Error("list_buckets", "unreachable", 'Could not connect to the endpoint URL: "http://s3.local:9000/"')
    down = assess(s, Observation(buckets=[], over_quota=["bucket out: 2 objects of 1 allowed"], error=error), "http://s3.local:9000")
    assert (down["Ready"].status, down["Ready"].reason) == (False, "EndpointUnreachable")
    assert (down["Degraded"].status, down["Degraded"].reason) == (True, "EndpointUnreachable")
    assert "Could not connect" in down["Degraded"].message and "http://s3.local:9000" in down["Degraded"].message
    over = assess(s, Observation(buckets=[], over_quota=["bucket out: 2 objects of 1 allowed"]), "u")
    assert (over["Ready"].status, over["Degraded"].status, over["Degraded"].reason) == (True, True, "OverQuota")
    assert "2 objects of 1 allowed" in over["Degraded"].message
    fine = assess(s, Observation(buckets=[]), "u")
    assert (fine["Ready"].status, fine["Degraded"].status) == (True, False)
    denied = assess(s, Observation(buckets=[], error=S3Error("head_bucket", "auth", "403")), "u")
    assert denied["Ready"].reason == "AccessDenied"
    no_rules = assess(s, Observation(buckets=[], error=S3Error("put_bucket_lifecycle_configuration", "unsupported", "501")), "u")
    assert no_rules["Ready"].reason == "LifecycleUnsupported" and "Sweep" in no_rules["Ready"].message


def test_the_buckets_announced_over_quota_are_read_back_from_the_status():
    """A new leader starts from what the old one wrote: the OverQuota event is not posted twice."""
    both = S3StagingSpec.model_validate({"external": {"url": "http://s3.local:9000", "credentialsSecret": "k"},
                                         "buckets": [{"name": "out", "quotaGiB": 1, "quotaObjects": 5},
                                                     {"name": "tmp.2", "quotaObjects": 1}, {"name": "free"}]})
    lines = over_quota(both, [{"name": "out", "objects": 6, "bytes": 2 * GIB}, {"name": "tmp.2", "objects": 2, "bytes": 1},
                              {"name": "free", "objects": 10**6, "bytes": 10**12}])
    written = cond.merge([], 1, "2026-11-26T10:00:00Z", **assess(both, Observation(buckets=[], over_quota=lines), "u"))
    announced = frozenset(line.split(":", 1)[0] for line in lines)  # what handlers/s3staging._announce keeps
    assert announced == {"bucket out", "bucket tmp.2"}
    assert over_quota_reported(written) == announced
    error = S3Error("list_buckets", "unreachable", "down")
    for other in (Observation(buckets=[]), Observation(buckets=[], over_quota=lines, error=error)):
        assert over_quota_reported(cond.merge([], 1, "t", **assess(both, other, "u"))) == frozenset()
    assert over_quota_reported(None) == frozenset()


def test_deletion_backoff_grows_to_a_cap_and_the_hint_releases_by_retain():
    from switchyard.handlers.s3staging import release_hint, retry_delay
    from switchyard.policy.settings import current

    delays = [retry_delay(n) for n in range(40)]
    base, cap = current().s3_delete_retry_seconds, current().s3_delete_retry_max_seconds
    assert delays[0] == base and delays[1] == 2 * base
    assert delays == sorted(delays) and max(delays) == cap
    hint = release_hint("team-ns", "stage")
    assert "kubectl patch s3staging stage -n team-ns --type merge" in hint and '"reclaimPolicy":"Retain"' in hint


def test_bucket_metrics_follow_the_observations_and_stale_series_go():
    from prometheus_client import REGISTRY

    from switchyard.handlers import memory
    from switchyard.handlers.s3staging import _count_error, _export, forget

    kept = memory.of({"kind": "S3Staging", "metadata": {"uid": "uid-m", "namespace": "ns-m", "name": "stage-m"}},
                     memory.StagingMemory)
    labels = {"namespace": "ns-m", "staging": "stage-m", "bucket": "b1"}
    sample = lambda name, **extra: REGISTRY.get_sample_value(name, {**labels, **extra})  # noqa: E731
    obs = Observation(buckets=[{"name": "b1", "objects": 12, "bytes": 3400, "quotaBytes": 5000},
                               {"name": "b2", "quotaBytes": 0}], swept={"b1": (4, 40)})
    _export(kept, "ns-m", "stage-m", obs)
    assert (sample("switchyard_s3_bucket_objects"), sample("switchyard_s3_bucket_bytes"),
            sample("switchyard_s3_bucket_quota_bytes")) == (12, 3400, 5000)
    assert sample("switchyard_s3_expired_objects_removed_total") == 4
    assert REGISTRY.get_sample_value("switchyard_s3_bucket_objects", {**labels, "bucket": "b2"}) is None  # not measured yet
    _count_error("ns-m", "stage-m", S3Error("list_buckets", "unreachable", "down"))
    assert REGISTRY.get_sample_value("switchyard_s3_errors_total", {"namespace": "ns-m", "staging": "stage-m",
                                                                    "kind": "unreachable", "operation": "list_buckets"}) == 1
    _export(kept, "ns-m", "stage-m", Observation(buckets=[{"name": "b2", "objects": 1, "bytes": 1, "quotaBytes": 0}]))
    assert sample("switchyard_s3_bucket_objects") is None  # b1 left the spec: its series went
    assert kept.series == {("ns-m", "stage-m", "b2")}
    forget("uid-m", "ns-m", "stage-m")
    assert REGISTRY.get_sample_value("switchyard_s3_bucket_objects", {**labels, "bucket": "b2"}) is None
    assert memory.drop("uid-m") is None  # the staging area's memory went with it
