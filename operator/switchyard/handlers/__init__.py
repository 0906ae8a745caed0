"""kopf handlers, one module per kind; importing this package registers them all.

Each kind's reconcile reads (kopf's indexes, a Secret it needs), asks its pure
desired-state function (switchyard.desired) what should exist and what to
report, converges the children (converge.py, through the apply module) and
writes its status (status.py); loop.py runs it per object.
"""

from . import analysisfacility, indexes, prestage, s3staging, startup, workerfleet, xcachepool  # noqa: F401
