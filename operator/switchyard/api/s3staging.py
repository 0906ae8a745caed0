"""S3Staging: an S3 area for intermediate outputs, with lifetimes and quotas."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from .base import (DNS_NAME_PATTERN, PORT_PATTERN, CommonStatus, ImageRef, LabelKey, LabelValue, Model, ObjectRef, Toleration,
                   cel, rules, tolerations_field)

BucketName = Annotated[str, StringConstraints(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")]
SecretName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
StorageClassName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]

# The community MinIO server; pin another tag (or a site mirror) with embedded.image.
DEFAULT_MINIO_IMAGE = "quay.io/minio/minio:RELEASE.2025-09-07T16-13-09Z"


class External(Model):
    """An S3 endpoint that already exists."""

    url: Annotated[str, StringConstraints(max_length=260, pattern=rf"^https?://{DNS_NAME_PATTERN}(:{PORT_PATTERN})?/?$")] = Field(
        description="Endpoint URL, e.g. https://s3.example.org.",
    )
    region: Annotated[str, StringConstraints(max_length=64, pattern=r"^[a-z0-9-]+$")] = Field(default="us-east-1", description="Region name.")
    verify_tls: bool = Field(default=True, description="Verify the endpoint's TLS certificate.")
    credentials_secret: SecretName = Field(
        description="Secret holding 'accessKey' and 'secretKey' the operator uses (it creates and deletes buckets); "
                    "the keys are never copied into status, events or logs.",
    )
    consumer_credentials_secret: SecretName | None = Field(
        default=None,
        description="Secret holding 'accessKey' and 'secretKey' that workers receive, e.g. keys limited to the staging "
                    "buckets' objects; defaults to credentialsSecret.",
    )


class Embedded(Model):
    """An in-cluster MinIO run by the operator."""

    servers: int = Field(default=1, ge=1, le=32, description="MinIO server pods (one per node); more than one runs MinIO distributed with erasure coding.")
    volume_size_gib: int = Field(default=100, ge=1, le=1_000_000, description="Volume size per server, in GiB.")
    storage_class: StorageClassName | None = Field(default=None, description="StorageClass of the servers' volumes; the cluster default when unset.")
    node_selector: dict[LabelKey, LabelValue] = Field(default={}, max_length=16, description="Node labels a MinIO server must carry.")
    tolerations: list[Toleration] = tolerations_field("the MinIO servers")
    image: ImageRef = Field(default=DEFAULT_MINIO_IMAGE, description="MinIO server image.")


# S3's bucket naming rules beyond the character set: prefixes and suffixes it
# reserves for its own features, and names it would read as addresses.
RESERVED_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
RESERVED_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


class Bucket(Model):
    """A staging bucket."""

    model_config = rules(
        cel("!self.name.contains('..') && !self.name.contains('.-') && !self.name.contains('-.')",
            "bucket name must not contain '..', '.-' or '-.'", ".name"),
        cel("!self.name.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$')",
            "bucket name must not be formatted as an IP address", ".name"),
        cel(" && ".join(f"!self.name.startsWith('{p}')" for p in RESERVED_BUCKET_PREFIXES),
            "bucket name must not start with a prefix S3 reserves (" + ", ".join(RESERVED_BUCKET_PREFIXES) + ")", ".name"),
        cel(" && ".join(f"!self.name.endsWith('{x}')" for x in RESERVED_BUCKET_SUFFIXES),
            "bucket name must not end with a suffix S3 reserves (" + ", ".join(RESERVED_BUCKET_SUFFIXES) + ")", ".name"),
    )

    name: BucketName = Field(description="Bucket name (S3 naming rules).")
    lifetime_days: int = Field(default=7, ge=1, le=3650, description="Objects older than this are expired.")
    expiry: Literal["Auto", "Lifecycle", "Sweep"] = Field(
        default="Auto",
        description="How objects expire: Lifecycle sets a lifecycle rule on the endpoint; Sweep has the operator delete "
                    "expired objects when it measures usage; Auto uses the rule and falls back to the sweep where the "
                    "endpoint does not support lifecycle rules.",
    )
    quota_gib: float = Field(default=0, ge=0, le=100_000_000, description="Usage above this many GiB sets Degraded; 0 means no byte quota.")
    quota_objects: int = Field(default=0, ge=0, le=1_000_000_000_000, description="More objects than this sets Degraded; 0 means no object quota.")


class S3StagingBody(Model):
    """Everything that describes a staging area."""

    model_config = rules(
        cel("has(self.external) != has(self.embedded)", "exactly one endpoint section (external or embedded) must be set", ".external"),
    )

    external: External | None = Field(default=None, description="Use an existing S3 endpoint (exclusive with embedded).")
    embedded: Embedded | None = Field(default=None, description="Run MinIO in the cluster (exclusive with external).")
    buckets: list[Bucket] = Field(
        default=[], max_length=1000, description="Buckets to keep, with lifetimes and quotas; workers get the first as SWITCHYARD_S3_BUCKET.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    reclaim_policy: Literal["Retain", "Delete"] = Field(
        default="Retain", description="Retain keeps buckets and data when this object is deleted; Delete removes them.",
    )
    usage_interval_seconds: int = Field(
        default=60, ge=5, le=86400,
        description="How often bucket usage is measured (a full listing); buckets over 100,000 objects are measured "
                    "proportionally less often, down to once per ten intervals.",
    )


class S3StagingSpec(S3StagingBody):
    """Desired state of an S3Staging."""

    facility_ref: ObjectRef | None = Field(default=None, description="The facility this staging area belongs to, if any.")


class BucketStatus(Model):
    """Measured usage of one bucket."""

    name: str = Field(description="Bucket name.")
    objects: int = Field(default=0, description="Objects in the bucket at the last measurement.")
    bytes: int = Field(default=0, description="Bytes in the bucket at the last measurement.")
    quota_bytes: int = Field(default=0, description="The byte quota (0: none).")
    expiry: str = Field(default="", description="How objects expire on this endpoint: Lifecycle or Sweep.")
    expired_removed: int = Field(default=0, description="Expired objects the operator's sweep removed since it started.")
    measured_at: str = Field(default="", description="When usage was last measured (RFC 3339).")


class S3StagingStatus(CommonStatus):
    """Observed state of an S3Staging."""

    endpoint: str = Field(default="", description="The endpoint URL consumers use.")
    credentials_secret: str = Field(default="", description="Secret consumers reference for keys ('accessKey', 'secretKey').")
    buckets: list[BucketStatus] = Field(default=[], description="Usage per bucket.")
