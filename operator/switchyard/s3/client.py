"""The S3 calls staging needs, over boto3: buckets, lifetimes, usage, sweeps, deletion.

Every listing is paginated (objects 1,000 per page, buckets as the endpoint
pages them), so nothing stops at the first 1,000 objects or buckets. Every
failure surfaces as an `S3Error` with a kind for metrics and a message that
never carries the keys.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import boto3
import botocore.config
import botocore.exceptions

LIFECYCLE_RULE_ID = "switchyard-lifetime"
DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys
PAGE_SIZE = 1000

# botocore logs signed request headers (the access key id among them) at DEBUG;
# the operator's --verbose must not turn that on.
for _name in ("boto3", "botocore", "s3transfer", "urllib3"):
    logging.getLogger(_name).setLevel(logging.WARNING)


@dataclass(frozen=True)
class Credentials:
    """An access key pair; its repr never shows the keys."""

    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)

    def __repr__(self) -> str:
        return "Credentials(***)"


@dataclass(frozen=True)
class Endpoint:
    """Where an S3 endpoint is and how to talk to it."""

    url: str
    region: str = "us-east-1"
    verify_tls: bool = True
    connect_timeout: float = 3.0
    read_timeout: float = 20.0
    attempts: int = 2


@dataclass(frozen=True)
class Usage:
    """What a full listing of a bucket found."""

    objects: int
    bytes: int
    pages: int = 0


@dataclass(frozen=True)
class SweepResult:
    """A listing that also removed expired objects: what remains, and what went."""

    usage: Usage
    removed: int
    removed_bytes: int


# kind -> S3/HTTP error codes. Kinds are the `kind` label of the error metric.
_CODES = {
    "auth": {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
             "AuthorizationHeaderMalformed", "AllAccessDisabled", "403", "401"},
    "not_found": {"NoSuchBucket", "NoSuchKey", "NoSuchLifecycleConfiguration", "404"},
    "conflict": {"BucketAlreadyExists", "BucketNotEmpty", "OperationAborted", "409"},
    "unsupported": {"NotImplemented", "501", "MethodNotAllowed", "405"},
    "throttled": {"SlowDown", "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequests", "503", "429"},
    "quota": {"QuotaExceeded", "XMinioStorageFull", "XMinioAdminBucketQuotaExceeded", "StorageFull", "507"},
    "invalid": {"InvalidBucketName", "MalformedXML", "InvalidArgument", "InvalidRequest", "400"},
    "server": {"InternalError", "XMinioServerNotInitialized", "500", "502", "504"},
}
KINDS = ("unreachable", "timeout", "tls", *_CODES, "other")


def classify(exc: BaseException) -> str:
    """The kind of an S3 failure, for metrics and conditions."""
    if isinstance(exc, S3Error):
        return exc.kind
    if isinstance(exc, botocore.exceptions.SSLError):
        return "tls"
    if isinstance(exc, (botocore.exceptions.ConnectTimeoutError, botocore.exceptions.ReadTimeoutError)):
        return "timeout"
    if isinstance(exc, (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError,
                        botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)):
        return "unreachable"
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        for code in (str(error.get("Code", "")), status):
            for kind, codes in _CODES.items():
                if code in codes:
                    return kind
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return "unreachable"
    return "other"


def redact(text: str, *secrets: str) -> str:
    """`text` with every occurrence of a secret replaced."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


class S3Error(Exception):
    """An S3 call that failed: which operation on which bucket, what kind, a message without keys."""

    def __init__(self, operation: str, kind: str, message: str, code: str = "", bucket: str = ""):
        super().__init__(f"{operation}{' ' + bucket if bucket else ''}: {message}")
        self.operation, self.kind, self.message, self.code, self.bucket = operation, kind, message, code, bucket


def _code(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


class S3:
    """One endpoint, one key pair, a boto3 client with short timeouts and few retries."""

    def __init__(self, endpoint: Endpoint, credentials: Credentials):
        self.endpoint = endpoint
        self._secrets = (credentials.access_key, credentials.secret_key)
        config = botocore.config.Config(
            connect_timeout=endpoint.connect_timeout,
            read_timeout=endpoint.read_timeout,
            retries={"mode": "standard", "max_attempts": endpoint.attempts},
            s3={"addressing_style": "path"},
            # Checksums only where the API requires them: older S3 servers
            # (Ceph RGW, older MinIO) refuse the newer default ones.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            max_pool_connections=32,
            user_agent_extra="switchyard",
        )
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint.url, region_name=endpoint.region, verify=endpoint.verify_tls,
            aws_access_key_id=credentials.access_key, aws_secret_access_key=credentials.secret_key, config=config)

    def __repr__(self) -> str:
        return f"S3({self.endpoint.url})"

    def error(self, method: str, exc: BaseException, bucket: str = "") -> S3Error:
        """Wrap a boto3 failure; the message is scrubbed of both keys."""
        return S3Error(method, classify(exc), redact(str(exc), *self._secrets), _code(exc), bucket)

    def _call(self, method: str, **kwargs):
        try:
            return getattr(self.client, method)(**kwargs)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise self.error(method, exc, kwargs.get("Bucket", "")) from None

    def _pages(self, method: str, **kwargs) -> Iterator[dict]:
        try:
            yield from self.client.get_paginator(method).paginate(**kwargs)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise self.error(method, exc, kwargs.get("Bucket", "")) from None

    # ------------------------------------------------------------ buckets
    def buckets(self) -> list[str]:
        """Every bucket the keys can see, across as many pages as the endpoint returns."""
        names: list[str] = []
        for page in self._pages("list_buckets", PaginationConfig={"PageSize": PAGE_SIZE}):
            names.extend(b["Name"] for b in page.get("Buckets", []))
        return sorted(set(names))

    def bucket_exists(self, bucket: str) -> bool:
        try:
            self._call("head_bucket", Bucket=bucket)
            return True
        except S3Error as exc:
            if exc.kind == "not_found":
                return False
            raise

    def ensure_bucket(self, bucket: str, known: Iterable[str] | None = None) -> bool:
        """Create `bucket` unless it exists; True when this call created it.

        `known` (names from `buckets()`) saves a round trip per bucket.
        """
        exists = bucket in set(known) if known is not None else self.bucket_exists(bucket)
        if exists:
            return False
        kwargs: dict = {"Bucket": bucket}
        if self.endpoint.region and self.endpoint.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.endpoint.region}
        try:
            self._call("create_bucket", **kwargs)
        except S3Error as exc:
            if exc.code in ("BucketAlreadyOwnedByYou",):
                return False
            raise
        return True

    # ------------------------------------------------------------ lifetimes
    def lifecycle_rules(self, bucket: str) -> list[dict]:
        try:
            return self._call("get_bucket_lifecycle_configuration", Bucket=bucket).get("Rules", [])
        except S3Error as exc:
            if exc.code == "NoSuchLifecycleConfiguration":
                return []
            raise

    def lifetime_days(self, bucket: str) -> int | None:
        """Days of switchyard's expiration rule on `bucket`, None when it has none."""
        for rule in self.lifecycle_rules(bucket):
            if rule.get("ID") == LIFECYCLE_RULE_ID and rule.get("Status") == "Enabled":
                return rule.get("Expiration", {}).get("Days")
        return None

    def set_lifetime(self, bucket: str, days: int) -> bool:
        """Make switchyard's expiration rule say `days`, keeping every other rule.

        True when it wrote. Raises S3Error of kind 'unsupported' where the
        endpoint has no lifecycle support (the caller then sweeps instead).
        """
        rules = self.lifecycle_rules(bucket)
        ours = {
            "ID": LIFECYCLE_RULE_ID,
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "Expiration": {"Days": days},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": days},
        }
        current = next((r for r in rules if r.get("ID") == LIFECYCLE_RULE_ID), None)
        if current is not None and current.get("Status") == "Enabled" \
                and current.get("Expiration", {}).get("Days") == days:
            return False
        others = [r for r in rules if r.get("ID") != LIFECYCLE_RULE_ID]
        self._call("put_bucket_lifecycle_configuration", Bucket=bucket,
                   LifecycleConfiguration={"Rules": [*others, ours]})
        return True

    # ------------------------------------------------------------ usage and sweep
    def usage(self, bucket: str, page_size: int = PAGE_SIZE) -> Usage:
        """Objects and bytes in `bucket`, by a full paginated listing."""
        return self.sweep(bucket, None, None, page_size).usage

    def sweep_expired(self, bucket: str, lifetime_days: int, now: datetime.datetime,
                      page_size: int = PAGE_SIZE) -> SweepResult:
        """Delete objects older than `lifetime_days` at `now` (the sweep for endpoints without lifecycle)."""
        return self.sweep(bucket, lifetime_days, now, page_size)

    def sweep(self, bucket: str, lifetime_days: int | None, now: datetime.datetime | None,
              page_size: int = PAGE_SIZE) -> SweepResult:
        """One listing of `bucket`: count what stays; with a lifetime, delete what expired.

        An object expires when its LastModified + lifetime is at or before `now`.
        """
        cutoff = None
        if lifetime_days is not None:
            if now is None or now.tzinfo is None:
                raise ValueError("sweep needs an aware `now`")
            cutoff = now - datetime.timedelta(days=lifetime_days)
        kept, pages, removed, removed_bytes = Usage(0, 0), 0, 0, 0
        doomed: list[tuple[str, int]] = []

        def flush() -> None:
            nonlocal kept, removed, removed_bytes, doomed
            n, gone_bytes, failed = self._delete_batch(bucket, doomed[:DELETE_BATCH])
            removed, removed_bytes = removed + n, removed_bytes + gone_bytes
            kept = Usage(kept.objects + len(failed), kept.bytes + sum(s for _, s in failed))
            doomed = doomed[DELETE_BATCH:]

        for page in self._pages("list_objects_v2", Bucket=bucket,
                                PaginationConfig={"PageSize": page_size}):
            pages += 1
            contents = page.get("Contents", [])
            for obj in contents:
                if cutoff is not None and obj["LastModified"] <= cutoff:
                    doomed.append((obj["Key"], obj["Size"]))
            fresh = [o for o in contents if cutoff is None or o["LastModified"] > cutoff]
            kept = Usage(kept.objects + len(fresh), kept.bytes + sum(o["Size"] for o in fresh))
            while len(doomed) >= DELETE_BATCH:
                flush()
        while doomed:
            flush()
        return SweepResult(Usage(kept.objects, kept.bytes, pages), removed, removed_bytes)

    def _delete_batch(self, bucket: str, items: list[tuple[str, int]]) -> tuple[int, int, list[tuple[str, int]]]:
        """Delete up to 1,000 keys; (removed, removed bytes, the ones that failed)."""
        sizes = dict(items)
        result = self._call("delete_objects", Bucket=bucket,
                            Delete={"Objects": [{"Key": k} for k, _ in items], "Quiet": True})
        failed_keys = {e["Key"] for e in result.get("Errors", []) if e.get("Code") != "NoSuchKey"}
        gone = [(k, s) for k, s in items if k not in failed_keys]
        return len(gone), sum(s for _, s in gone), [(k, sizes[k]) for k in sorted(failed_keys) if k in sizes]

    # ------------------------------------------------------------ deletion
    def delete_bucket(self, bucket: str) -> int:
        """Delete `bucket` with everything in it (every version, unfinished uploads).

        Returns the objects removed; 0 and no error when the bucket is gone already.
        """
        removed = 0
        try:
            batch: list[dict] = []
            for page in self._pages("list_object_versions", Bucket=bucket,
                                    PaginationConfig={"PageSize": PAGE_SIZE}):
                for item in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                    batch.append({"Key": item["Key"], "VersionId": item["VersionId"]})
                    if len(batch) == DELETE_BATCH:
                        removed += self._delete_versions(bucket, batch)
                        batch = []
            if batch:
                removed += self._delete_versions(bucket, batch)
            for page in self._pages("list_multipart_uploads", Bucket=bucket):
                for upload in page.get("Uploads", []):
                    self._call("abort_multipart_upload", Bucket=bucket,
                               Key=upload["Key"], UploadId=upload["UploadId"])
            self._call("delete_bucket", Bucket=bucket)
        except S3Error as exc:
            if exc.code == "NoSuchBucket":
                return removed
            raise
        return removed

    def _delete_versions(self, bucket: str, batch: list[dict]) -> int:
        result = self._call("delete_objects", Bucket=bucket,
                            Delete={"Objects": batch, "Quiet": True})
        errors = [e for e in result.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            first = errors[0]
            raise S3Error("delete_objects", classify_code(first.get("Code", "")),
                          f"{len(errors)} object(s) not deleted, e.g. {first.get('Key')}: {first.get('Code')} "
                          f"{first.get('Message', '')}".strip(), first.get("Code", ""), bucket)
        return len(batch)


def classify_code(code: str) -> str:
    """The kind of a bare S3 error code (as DeleteObjects reports per key)."""
    for kind, codes in _CODES.items():
        if code in codes:
            return kind
    return "other"
