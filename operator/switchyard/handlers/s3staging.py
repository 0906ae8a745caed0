"""S3Staging: validate the staging area; bucket management lands with the S3 issue."""

from __future__ import annotations

from .. import conditions as cond
from ..api import S3StagingSpec
from .common import register, validate, write_status

KIND = "S3Staging"
PLURAL = "s3stagings"


def reconcile(body, logger, **_) -> None:
    spec, error = validate(S3StagingSpec, body["spec"])
    if spec is None:
        write_status(KIND, body, {}, cond.failed("InvalidSpec", error), logger)
        return
    endpoint = spec.external.url if spec.external else ""
    # Honest state until bucket management exists: never claim Ready.
    write_status(KIND, body, {"endpoint": endpoint}, cond.failed(
        "NotImplemented", "bucket management is not implemented in this release; the spec is valid"), logger)


register(PLURAL, KIND, reconcile)
