"""switchyard.s3 against a real MinIO on loopback: buckets, lifetimes, usage, sweep, deletion, errors."""

from __future__ import annotations

import datetime
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from minio_server import MinioServer, bucket_name, minio, minio_private  # noqa: F401  (fixtures)
from switchyard.s3 import LIFECYCLE_RULE_ID, S3, Credentials, Endpoint, S3Error

pytestmark = pytest.mark.integration
UTC = datetime.timezone.utc


def test_bucket_creation_is_idempotent(minio: MinioServer):
    s3, name = minio.s3(), bucket_name()
    assert s3.ensure_bucket(name) is True
    assert s3.ensure_bucket(name) is False
    assert s3.ensure_bucket(name, known=s3.buckets()) is False
    assert s3.buckets().count(name) == 1
    minio.boto().put_object(Bucket=name, Key="kept", Body=b"data")
    assert s3.ensure_bucket(name) is False
    assert s3.usage(name).objects == 1  # ensuring again never empties a bucket


def test_lifetime_rule_is_on_the_endpoint_and_other_rules_survive(minio: MinioServer):
    s3, name = minio.s3(), bucket_name()
    s3.ensure_bucket(name)
    assert s3.lifetime_days(name) is None
    foreign = {"ID": "site-tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1}}
    minio.boto().put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": [foreign]})

    assert s3.set_lifetime(name, 7) is True
    assert s3.set_lifetime(name, 7) is False  # unchanged: nothing written
    rules = {r["ID"]: r for r in minio.boto().get_bucket_lifecycle_configuration(Bucket=name)["Rules"]}
    assert rules[LIFECYCLE_RULE_ID]["Expiration"]["Days"] == 7
    assert rules[LIFECYCLE_RULE_ID]["Status"] == "Enabled"
    assert rules["site-tmp"]["Expiration"]["Days"] == 1

    assert s3.set_lifetime(name, 30) is True
    assert s3.lifetime_days(name) == 30
    assert {r["ID"] for r in s3.lifecycle_rules(name)} == {LIFECYCLE_RULE_ID, "site-tmp"}


def test_sweep_removes_only_expired_objects_at_the_given_time(minio: MinioServer):
    s3, name = minio.s3(), bucket_name()
    s3.ensure_bucket(name)
    minio.upload(name, 1200, prefix="old")  # more than one listing page and one delete batch
    boto = minio.boto()
    old_times = [o["LastModified"] for p in boto.get_paginator("list_objects_v2").paginate(Bucket=name)
                 for o in p.get("Contents", [])]
    oldest_old, newest_old = min(old_times), max(old_times)
    # The new objects must be strictly younger; the server's clock decides.
    for _ in range(100):
        boto.put_object(Bucket=name, Key="new/probe", Body=b"p")
        if boto.list_objects_v2(Bucket=name, Prefix="new/probe")["Contents"][0]["LastModified"] > newest_old:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the server's clock did not move past the old objects")
    new_bytes = minio.upload(name, 30, prefix="new", size_of=lambda i: 10)
    lifetime = 7

    # Before the lifetime has passed for anything: nothing goes.
    early = s3.sweep_expired(name, lifetime, oldest_old + datetime.timedelta(days=lifetime) - datetime.timedelta(milliseconds=1))
    assert early.removed == 0
    assert early.usage.objects == 1200 + 31

    # When the old ones are exactly `lifetime` old, they go; the new ones stay.
    swept = s3.sweep_expired(name, lifetime, newest_old + datetime.timedelta(days=lifetime))
    assert swept.removed == 1200
    assert swept.removed_bytes == sum(i % 97 for i in range(1200))
    assert swept.usage.objects == 31
    assert swept.usage.bytes == new_bytes + 1
    assert s3.usage(name).objects == 31
    keys = {o["Key"] for o in boto.list_objects_v2(Bucket=name)["Contents"]}
    assert keys == {"new/probe", *(f"new/{i:06d}" for i in range(30))}

    with pytest.raises(ValueError):
        s3.sweep_expired(name, lifetime, datetime.datetime(2030, 1, 1))  # naive clocks are refused


def test_usage_is_right_with_5000_objects(minio: MinioServer):
    s3, name = minio.s3(), bucket_name()
    s3.ensure_bucket(name)
    expected = minio.upload(name, 5000, size_of=lambda i: i % 251, workers=24)
    usage = s3.usage(name)
    assert (usage.objects, usage.bytes) == (5000, expected)
    assert usage.pages >= 5  # the listing went past the first 1,000 keys
    small_pages = s3.usage(name, page_size=700)
    assert (small_pages.objects, small_pages.bytes, small_pages.pages) == (5000, expected, 8)


def test_delete_bucket_removes_everything_and_is_idempotent(minio: MinioServer):
    s3, name, other = minio.s3(), bucket_name(), bucket_name()
    s3.ensure_bucket(name)
    s3.ensure_bucket(other)
    minio.upload(name, 2100)  # three delete batches
    minio.upload(other, 3)
    boto = minio.boto()
    upload = boto.create_multipart_upload(Bucket=name, Key="unfinished")
    assert upload["UploadId"]
    assert s3.delete_bucket(name) == 2100
    assert name not in s3.buckets()
    assert s3.delete_bucket(name) == 0  # already gone: not an error
    assert s3.usage(other).objects == 3  # nothing else touched


def test_delete_bucket_removes_every_version(minio: MinioServer):
    s3, name = minio.s3(), bucket_name()
    s3.ensure_bucket(name)
    boto = minio.boto()
    boto.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"1", b"22", b"333"):
        boto.put_object(Bucket=name, Key="same", Body=body)
    boto.delete_object(Bucket=name, Key="same")  # a delete marker over three versions
    assert s3.usage(name).objects == 0
    assert s3.delete_bucket(name) == 4
    assert name not in s3.buckets()


def test_bucket_listing_goes_past_1000_buckets(minio_private: MinioServer):
    s3 = minio_private.s3()
    names = [f"many-{i:05d}" for i in range(1100)]
    with ThreadPoolExecutor(16) as pool:
        created = list(pool.map(s3.ensure_bucket, names))
    assert all(created)
    listed = s3.buckets()
    assert set(names) <= set(listed)
    assert len(listed) >= 1100
    assert not any(s3.ensure_bucket(n, known=listed) for n in names[::50])


def test_errors_are_classified_and_never_carry_the_keys(minio_private: MinioServer):
    server = minio_private
    wrong = S3(Endpoint(server.url), Credentials(server.user, server.password + "-wrong"))
    with pytest.raises(S3Error) as denied:
        wrong.buckets()
    assert denied.value.kind == "auth"
    assert denied.value.operation == "list_buckets"

    s3 = server.s3()
    with pytest.raises(S3Error) as missing:
        s3.usage("no-such-bucket-here")
    assert missing.value.kind == "not_found"
    assert s3.bucket_exists("no-such-bucket-here") is False

    server.stop()
    down = server.s3(connect_timeout=1, attempts=1)
    with pytest.raises(S3Error) as unreachable:
        down.buckets()
    assert unreachable.value.kind == "unreachable"
    assert server.url.split("//")[1] in str(unreachable.value)
    for error in (denied.value, missing.value, unreachable.value):
        for secret in (server.user, server.password):
            assert secret not in str(error)
            assert secret not in repr(error)
    assert server.password not in repr(s3) and server.user not in repr(server.credentials)
