"""S3 staging: a small client over boto3 for the calls the operator makes.

Nothing here talks to Kubernetes; the S3Staging handler wires it to objects,
status and metrics.
"""

from .client import (
    LIFECYCLE_RULE_ID,
    Credentials,
    Endpoint,
    S3,
    S3Error,
    SweepResult,
    Usage,
    classify,
    redact,
)

__all__ = [
    "LIFECYCLE_RULE_ID", "Credentials", "Endpoint", "S3", "S3Error", "SweepResult", "Usage", "classify", "redact",
]
