"""Every reason switchyard writes on a condition or an event, each with its meaning.

A reason is the CamelCase word `kubectl get` shows in the Reason column and an
event carries. The code passes these constants, never a literal:
`operator/tests/unit/test_reasons.py` finds every reason position with `ast`
and fails on a string written there, and `make generate` lists them with their
meaning in docs/reasons.md.

Each constant is bound where its reason is described: `Reason(READY := "Ready", ...)`
makes `READY` "Ready". Kinds: F AnalysisFacility, P XCachePool, W WorkerFleet,
S S3Staging, C CachePrestage, L the leader's Lease.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """One reason: where it appears and what it means."""

    value: str
    kinds: str              # letters of the kinds it appears on (see the module's docstring)
    meaning: str
    condition: bool = True  # written on a condition (Ready, Progressing or Degraded)
    event: bool = False     # the reason of an event


_ALL = (
    # The three states of a converged, healthy object.
    Reason(READY := "Ready", "FPWSC", "Ready=True: the object has what it asked for (its message says how much); "
           "as a Normal event, the object became Ready.", event=True),
    Reason(CONVERGED := "Converged", "FPWSC", "Progressing=False on a Ready object: nothing left to do."),
    Reason(HEALTHY := "Healthy", "FPWSC", "Degraded=False: nothing is degraded."),

    # Input that will not work until someone changes it.
    Reason(INVALID_SPEC := "InvalidSpec", "FPWSC", "The spec fails a validation the schema cannot express; nothing "
           "is applied or deleted until it is fixed."),
    Reason(IMAGE_NOT_ALLOWED := "ImageNotAllowed", "FPWSC", "An image is not one the admin allows (the chart's "
           "images.allowed); nothing is applied."),
    Reason(HOST_PATH_NOT_ALLOWED := "HostPathNotAllowed", "FP", "A cache host path is not below a directory the "
           "admin allows (the chart's cache.allowedHostPaths); nothing is applied."),
    Reason(TLS_SECRET_NOT_FOUND := "TLSSecretNotFound", "P", "auth.tlsSecret names a Secret that does not exist "
           "(yet)."),
    Reason(TLS_SECRET_INVALID := "TLSSecretInvalid", "P", "auth.tlsSecret is not a kubernetes.io/tls Secret with "
           "tls.crt and tls.key."),
    Reason(UNKNOWN_POOL := "UnknownPool", "FW", "A fleet names a cache pool the facility does not have."),
    Reason(DEGENERATE_CAPACITY := "DegenerateCapacity", "F", "An uplink, NIC or serving rate is below the smallest "
           "the planner takes."),
    Reason(NO_ELIGIBLE_CACHE_NODES := "NoEligibleCacheNodes", "F", "No node on the facility's switches can host a "
           "pool's caches (NVMe label, room)."),
    Reason(NO_NODE_FITS_WORKER := "NoNodeFitsWorker", "FW", "No node on the facility's switches can hold one worker "
           "of the fleet (cores, memory, pod slots)."),
    Reason(CREDENTIALS_MISSING := "CredentialsMissing", "S", "The credentials Secret, or one of its keys, is "
           "missing."),
    Reason(CREDENTIALS_INVALID := "CredentialsInvalid", "S", "A key of the credentials Secret is not base64-encoded "
           "text."),

    # The planner's faults.
    Reason(PLANNING_FAILED := "PlanningFailed", "FW", "The planner raised on this input; running children are left "
           "as they are."),
    Reason(PLAN_INCOMPLETE := "PlanIncomplete", "FW", "The plan neither places nor counts as unplaced some of a "
           "fleet's workers (the planner's fault on a degenerate input)."),

    # A child waiting for what it needs.
    Reason(AWAITING_PLAN := "AwaitingPlan", "PW", "The facility has not written this child's plan yet, or the plan "
           "has fewer workers than replicas (re-planning)."),
    Reason(INVALID_PLAN := "InvalidPlan", "PW", "The plan in status.plan does not parse; the child waits for a valid "
           "one."),
    Reason(FACILITY_NOT_FOUND := "FacilityNotFound", "PWC", "facilityRef names an AnalysisFacility that does not "
           "exist in the namespace."),
    Reason(FACILITY_NOT_READY := "FacilityNotReady", "PW", "The facility could not plan (refused, or its planning "
           "failed): the child waits for its plan."),
    Reason(AWAITING_STAGING := "AwaitingStaging", "W", "The S3Staging the fleet names is missing or invalid."),

    # Starting up.
    Reason(CHILDREN_NOT_READY := "ChildrenNotReady", "F", "Some of the facility's children are not Ready yet."),
    Reason(HOSTS_STARTING := "HostsStarting", "P", "Fewer cache hosts are ready than planned."),
    Reason(WORKERS_STARTING := "WorkersStarting", "W", "Fewer workers are ready than planned."),
    Reason(RAMPING_UP := "RampingUp", "W", "Workers are being started, at most rampUp.maxStartsPerSecond."),
    Reason(MINIO_STARTING := "MinIOStarting", "S", "Fewer embedded MinIO servers are ready than asked for."),

    # What the plan, or the running objects, have to do without.
    Reason(INSUFFICIENT_CAPACITY := "InsufficientCapacity", "W", "Some of the fleet's workers fit no node of the "
           "facility's switches."),
    Reason(WORKERS_UNPLACED := "WorkersUnplaced", "F", "Degraded: workers of a fleet fit no node (the fleet is "
           "named)."),
    Reason(NODES_NOT_READY := "NodesNotReady", "F", "Degraded: nodes on the facility's switches are NotReady and "
           "left out of the plan."),
    Reason(NODES_ON_UNKNOWN_SWITCH := "NodesOnUnknownSwitch", "F", "Degraded: nodes carry a switch label value not "
           "in spec.network.switches."),
    Reason(CHILD_DEGRADED := "ChildDegraded", "F", "Degraded: a child, or an attached fleet, is Degraded."),
    Reason(PREDICTION_DRIFT := "PredictionDrift", "F", "Degraded: the bytes measured on a switch or uplink "
           "direction have stayed away from the plan's prediction (a Warning event when it begins).", event=True),
    Reason(DISK_NOT_MOUNTED := "DiskNotMounted", "P", "Degraded: a planned host's cache data or meta path is on the "
           "node's root filesystem, not a mounted disk; that host's cache does not start.", event=True),
    Reason(HOSTS_NOT_READY := "HostsNotReady", "P", "Degraded: a switch's cache pods all exist but not all are "
           "ready.", event=True),
    Reason(SPACE_PAST_HIGH_WATERMARK := "SpacePastHighWatermark", "P", "Degraded: a host's cache disk is above its "
           "high water mark.", event=True),
    Reason(ROUTING_UNAVAILABLE := "RoutingUnavailable", "W", "Degraded: the fleet's image, checked by its "
           "routing-check init container, cannot route root:// reads through the pool.", event=True),
    Reason(OVER_QUOTA := "OverQuota", "S", "Degraded: a bucket is over its byte or object quota (a Warning event "
           "lists the buckets).", event=True),

    # Writing the children.
    Reason(CHILD_REFUSED := "ChildRefused", "FPWSC", "The API server refused a child (admission, a policy) for a "
           "reason a retry alone will not mend."),
    Reason(CHILD_NAME_TAKEN := "ChildNameTaken", "FPWSC", "A child's name is held by an object of another owner; no "
           "child is written."),
    Reason(RECONCILE_FAILED := "ReconcileFailed", "FPWSC", "The operator raised on this object; the reconcile runs "
           "again at the next tick."),

    # The S3 endpoint (Ready=False and Degraded=True).
    Reason(ENDPOINT_UNREACHABLE := "EndpointUnreachable", "S", "The S3 endpoint does not answer (connection or "
           "timeout)."),
    Reason(ENDPOINT_TLS_ERROR := "EndpointTLSError", "S", "TLS with the S3 endpoint fails."),
    Reason(ACCESS_DENIED := "AccessDenied", "S", "The S3 endpoint refuses the credentials."),
    Reason(LIFECYCLE_UNSUPPORTED := "LifecycleUnsupported", "S", "The S3 endpoint does not implement a call "
           "switchyard needs (lifecycle rules)."),
    Reason(ENDPOINT_THROTTLING := "EndpointThrottling", "S", "The S3 endpoint asks to slow down."),
    Reason(ENDPOINT_FULL := "EndpointFull", "S", "The S3 endpoint is out of space or over its own quota."),
    Reason(BUCKET_CONFLICT := "BucketConflict", "S", "A bucket name is taken, or a conflicting operation runs."),
    Reason(S3_ERROR := "S3Error", "S", "Another S3 failure (its message says which)."),

    # A CachePrestage.
    Reason(POOL_NOT_FOUND := "PoolNotFound", "C", "poolRef names an XCachePool that does not exist in the "
           "namespace: the prestage's Job, if any, is removed (it would read for a pool that is gone)."),
    Reason(POOL_INVALID := "PoolInvalid", "C", "The XCachePool poolRef names has a spec that does not validate "
           "(the pool's own InvalidSpec says why): the prestage's Job is removed until it is fixed."),
    Reason(FACILITY_INVALID := "FacilityInvalid", "C", "The pool's AnalysisFacility has a spec that does not "
           "validate, so it gives no WAN capacity to pace by: the prestage's Job is removed until it is fixed."),
    Reason(AWAITING_RING := "AwaitingRing", "C", "No WorkerFleet has workers reading through the pool by its ring "
           "(hashed routing), so no ring names the caches each file's readers will read it from: the prestage "
           "waits for one (a Job already running goes on, its progress still reported)."),
    Reason(PRESTAGING := "Prestaging", "C", "The prestage Job reads the files through their caches (the message "
           "counts files and bytes done)."),
    Reason(FILES_FAILED := "FilesFailed", "C", "The prestage ended with files no cache of the ring could read "
           "(status.failedUrls names a few; its Job is Complete, not retried for them): Degraded."),
    Reason(PRESTAGE_FAILED := "PrestageFailed", "C", "The prestage Job failed (its pod could not run, or every "
           "retry read no file at all): Degraded."),

    # Deleting an S3Staging with reclaimPolicy Delete.
    Reason(DELETING := "Deleting", "S", "The buckets could not be deleted yet; retrying."),
    Reason(DELETION_BLOCKED := "DeletionBlocked", "S", "Degraded: the buckets still cannot be deleted after the "
           "operator's patience; the message says how to release the object.", event=True),

    # Events only.
    Reason(RECOVERED := "Recovered", "P", "Normal event: the pool is no longer Degraded.", condition=False,
           event=True),
    Reason(RING_CHANGED := "RingChanged", "P", "Normal event: a cache host left the published hash ring (no Ready "
           "cache pod on it: xrootd down, the pod deleted) or came back; the message names the hosts out and in.",
           condition=False, event=True),
    Reason(HOT_FILES_CHANGED := "HotFilesChanged", "P", "Normal event: the pool's hot files (status.hotFiles, "
           "decided from its exporters' per-file read rates) changed; the message names the files added and "
           "removed and the replica counts that moved.", condition=False, event=True),
    Reason(RING_WEIGHTS_CHANGED := "RingWeightsChanged", "P", "Normal event: a ring host's weight was lowered for "
           "its measured load (above its planned share while another host had room) or restored (status.ringWeights, "
           "desired/ringload.py); the message names the hosts and their factors before and after.",
           condition=False, event=True),
    Reason(PREDICTION_AGREES := "PredictionAgrees", "F", "Normal event: a prediction drift cleared (observed and "
           "predicted agree again, or the facility is idle).", condition=False, event=True),
    Reason(RESCHEDULED := "Rescheduled", "PW", "Normal event: a planned pod on a node gone, NotReady or moved to "
           "another switch was deleted, so it starts where the plan says.", condition=False, event=True),
    Reason(BUCKET_CREATED := "BucketCreated", "S", "Normal event: a bucket was created.", condition=False,
           event=True),
    Reason(LIFETIME_SET := "LifetimeSet", "S", "Normal event: a bucket's lifetime was set as a lifecycle rule.",
           condition=False, event=True),
    Reason(SWEPT := "Swept", "S", "Normal event: expired objects were removed from a bucket.", condition=False,
           event=True),
    Reason(WITHIN_QUOTA := "WithinQuota", "S", "Normal event: every bucket is within its quota again.",
           condition=False, event=True),
    Reason(DELETION_RETRYING := "DeletionRetrying", "S", "Warning event: the first attempt to delete the buckets "
           "failed; retrying.", condition=False, event=True),
    Reason(RECLAIMED := "Reclaimed", "S", "Normal event: the buckets and their objects were deleted (reclaimPolicy "
           "Delete).", condition=False, event=True),
    Reason(RETAINED := "Retained", "S", "Normal event: the S3Staging is gone, its buckets and data kept "
           "(reclaimPolicy Retain).", condition=False, event=True),
    Reason(LEADER_ELECTION := "LeaderElection", "L", "Normal event on the Lease: an operator pod became leader.",
           condition=False, event=True),
)

REGISTRY: dict[str, Reason] = {reason.value: reason for reason in _ALL}
assert len(REGISTRY) == len(_ALL), "a reason is registered twice"
