"""S3Staging: an S3 area for intermediate outputs, with lifetimes and quotas."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from .base import CommonStatus, LabelKey, LabelValue, Model, ObjectRef, cel, rules

BucketName = Annotated[str, StringConstraints(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")]
SecretName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]


class External(Model):
    """An S3 endpoint that already exists."""

    url: Annotated[str, StringConstraints(max_length=260, pattern=r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$")] = Field(
        description="Endpoint URL, e.g. https://s3.example.org.",
    )
    region: Annotated[str, StringConstraints(max_length=64, pattern=r"^[a-z0-9-]+$")] = Field(default="us-east-1", description="Region name.")
    verify_tls: bool = Field(default=True, description="Verify the endpoint's TLS certificate.")
    credentials_secret: SecretName = Field(
        description="Secret holding 'accessKey' and 'secretKey' for the endpoint; the keys are never copied into status or logs.",
    )


class Embedded(Model):
    """An in-cluster MinIO run by the operator."""

    servers: int = Field(default=1, ge=1, le=32, description="MinIO server pods.")
    volume_size_gib: int = Field(default=100, ge=1, le=1_000_000, description="Volume size per server, in GiB.")
    node_selector: dict[LabelKey, LabelValue] = Field(default={}, max_length=16, description="Node labels a MinIO server must carry.")


class Bucket(Model):
    """A staging bucket."""

    name: BucketName = Field(description="Bucket name (S3 naming rules).")
    lifetime_days: int = Field(default=7, ge=1, le=3650, description="Objects older than this are expired.")
    quota_gib: int = Field(default=0, ge=0, le=100_000_000, description="Usage above this sets Degraded; 0 means no quota.")


class S3StagingBody(Model):
    """Everything that describes a staging area."""

    model_config = rules(
        cel("has(self.external) != has(self.embedded)", "exactly one endpoint section (external or embedded) must be set", ".external"),
    )

    external: External | None = Field(default=None, description="Use an existing S3 endpoint (exclusive with embedded).")
    embedded: Embedded | None = Field(default=None, description="Run MinIO in the cluster (exclusive with external).")
    buckets: list[Bucket] = Field(
        default=[], max_length=1000, description="Buckets to keep, with lifetimes and quotas.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    reclaim_policy: Literal["Retain", "Delete"] = Field(
        default="Retain", description="Retain keeps buckets and data when this object is deleted; Delete removes them.",
    )


class S3StagingSpec(S3StagingBody):
    """Desired state of an S3Staging."""

    facility_ref: ObjectRef | None = Field(default=None, description="The facility this staging area belongs to, if any.")


class BucketStatus(Model):
    """Measured usage of one bucket."""

    name: str = Field(description="Bucket name.")
    objects: int = Field(default=0, description="Objects in the bucket.")
    bytes: int = Field(default=0, description="Bytes in the bucket.")


class S3StagingStatus(CommonStatus):
    """Observed state of an S3Staging."""

    endpoint: str = Field(default="", description="The endpoint URL consumers use.")
    credentials_secret: str = Field(default="", description="Secret consumers reference for keys.")
    buckets: list[BucketStatus] = Field(default=[], description="Usage per bucket.")
