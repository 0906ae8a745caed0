"""kopf handlers, one module per kind; importing this package registers them all."""

from . import analysisfacility, indexes, s3staging, settings, workerfleet, xcachepool  # noqa: F401
