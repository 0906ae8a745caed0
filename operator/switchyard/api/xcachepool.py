"""XCachePool: XRootD caching proxies on a facility's NVMe nodes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from .plans import NodeName, PoolPlan
from .units import MIN_GBPS
from .base import (
    DNS_NAME_PATTERN,
    PORT_PATTERN,
    CommonStatus,
    DnsLabel,
    HostName,
    ImageRef,
    LabelKey,
    LabelValue,
    Model,
    ObjectRef,
    Port,
    Toleration,
    cel,
    rules,
    tolerations_field,
)

DEFAULT_XCACHE_IMAGE = "hub.opensciencegrid.org/opensciencegrid/xcache:23-release"
# Requests of the metrics exporter that runs beside xrootd in every cache pod:
# the planner counts them in a cache host's footprint, as the scheduler does.
EXPORTER_REQUESTS = {"cpu": "50m", "memory": "64Mi"}

# An absolute, normalised path: segments of plain path characters that do not
# start with a dot, so no '.', '..', '//', trailing '/' or hidden segment can
# alias another path. It becomes a hostPath volume and lines of the xrootd
# config; which prefixes are allowed at all is the site admin's setting
# (SWITCHYARD_ALLOWED_HOST_PATHS, see hostpaths.py).
AbsPath = Annotated[
    str,
    StringConstraints(min_length=2, max_length=200, pattern=r"^(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$"),
]


_QUANTITY_FACTORS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                     "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity_bytes(quantity: str) -> float:
    """Bytes in a Kubernetes memory quantity as Resources allows it ('16Gi', '500M')."""
    number = quantity.rstrip("KMGTi")
    return float(number) * _QUANTITY_FACTORS[quantity[len(number):]]


class Origin(Model):
    """Where cache misses are fetched from."""

    model_config = rules(
        cel("self.mode == 'forward' || has(self.host)", "origin.host is required when mode is 'fixed'", ".host"),
    )

    mode: Literal["fixed", "forward"] = Field(
        default="fixed",
        description="fixed: every miss goes to host:port (pss.origin). forward: the cache acts as a "
        "forwarding proxy and clients name the origin in the URL.",
    )
    host: HostName | None = Field(default=None, description="Origin (or redirector) host name, for mode 'fixed'.")
    port: Port = Field(default=1094, description="Origin XRootD port.")
    connect_window_seconds: int = Field(
        default=10, ge=1, le=300,
        description="pss.setopt ConnectTimeout: seconds the cache tries to reach the origin per attempt, "
        "and (ReconnectWait) how soon it tries again after the origin was unreachable.",
    )
    connect_retries: int = Field(
        default=2, ge=1, le=20,
        description="pss.setopt ConnectionRetry: connection attempts of connectWindowSeconds each before a "
        "client gets an error while the origin is down.",
    )


class Storage(Model):
    """The NVMe disks a cache host uses, as paths on the node."""

    model_config = rules(
        cel("!(self.metaPath in self.dataPaths)", "storage.metaPath must differ from every data path", ".metaPath"),
        cel("self.dataPaths.all(p, !p.startsWith(self.metaPath + '/') && !self.metaPath.startsWith(p + '/'))",
            "storage.metaPath and a data path must not lie inside one another", ".metaPath"),
        cel("self.dataPaths.all(a, self.dataPaths.all(b, !a.startsWith(b + '/')))",
            "storage.dataPaths must not lie inside one another", ".dataPaths"),
    )

    data_paths: list[AbsPath] = Field(
        default=["/mnt/nvme0"],
        min_length=1,
        max_length=32,
        description="One host path per data disk (JBOD); each becomes an 'oss.space data' entry so every disk is used.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    meta_path: AbsPath = Field(
        default="/mnt/xcache-meta",
        description="Host path for the cache's metadata: the .cinfo space lives in <metaPath>/meta and the "
        "namespace (symlinks into the data disks) in <metaPath>/namespace.",
    )
    allow_root_disk: bool = Field(
        default=False,
        description="false (the default): every data and meta path must be a filesystem mounted on the node; "
        "a path that is a plain directory on the node's root filesystem (a disk failed or not mounted) is never "
        "written: that host's cache does not start and the pool shows Degraded=True, reason DiskNotMounted, "
        "naming host and path. The paths must exist (hostPath type Directory). true: the check is off and the "
        "kubelet creates missing paths (DirectoryOrCreate), for a site that caches on its root disk on purpose.",
    )

    @model_validator(mode="after")
    def _distinct_data_paths(self) -> "Storage":
        # The API server refuses repeats through the list type 'set'; the model must too.
        if len(set(self.data_paths)) != len(self.data_paths):
            raise ValueError("storage.dataPaths must not repeat a path")
        return self


# OSG's XCache images (the default image) make their xrootd user with
# `groupadd -o -g 10940 xrootd; useradd -o -u 10940 -g 10940 xrootd`.
OSG_XROOTD_UID = 10940
MAX_ID = 2**31 - 1  # what runAsUser and runAsGroup accept


EXPORTER_UID = 65532  # the cache pod's exporter sidecar runs as the operator image's user


class XrootdUser(Model):
    """Who xrootd runs as: the pod starts it as this uid and gid (runAsUser, runAsGroup), never as root."""

    # The cache pod shares one process namespace (builders/xcachepool.py: xrootd must not be PID 1), where a
    # process may signal, trace and read the environment of another of its own uid: the exporter, which
    # parses what arrives on its UDP port, must not share xrootd's.
    model_config = rules(cel(f"self.uid != {EXPORTER_UID}",
                             f"uid {EXPORTER_UID} is the cache pod's exporter's: xrootd must run as another user",
                             ".uid"))

    uid: int = Field(default=OSG_XROOTD_UID, ge=1, le=MAX_ID, description=(
        "User ID xrootd runs as, and owner of the directories the prepare step makes on the disks. The "
        "default is the xrootd user of OSG's XCache images; switchyard's own image uses 1094; for another image, "
        "its xrootd user's uid (`id -u xrootd` in the image). Not 0: xrootd refuses to serve as root."))
    gid: int = Field(default=OSG_XROOTD_UID, ge=1, le=MAX_ID, description=(
        "Group ID xrootd runs as, and group of the directories the prepare step makes (`id -g xrootd` in the image)."))


class Pfc(Model):
    """XrdPfc (proxy file cache) tuning, as XRootD 5 documents it."""

    model_config = rules(
        cel("self.lowWatermark < self.highWatermark", "pfc.lowWatermark must be below pfc.highWatermark", ".lowWatermark"),
    )

    block_size_kib: int = Field(
        default=1024,
        ge=4,
        le=524288,
        multiple_of=4,
        description="pfc.blocksize in KiB: from 4 KiB to 512 MiB in multiples of 4 KiB.",
    )
    prefetch_blocks: int = Field(default=10, ge=0, le=128, description="pfc.prefetch: blocks read ahead per file (XRootD accepts 0-128); 0 turns prefetch off.")
    ram_gib: int = Field(default=8, ge=1, le=256, description="pfc.ram: memory for in-flight blocks, in GiB (XRootD accepts 1-256).")
    low_watermark: float = Field(default=0.90, gt=0, lt=1, description="pfc.diskusage low water mark: purging stops below this fraction of the disks.")
    high_watermark: float = Field(default=0.95, gt=0, le=1, description="pfc.diskusage high water mark: purging starts above this fraction of the disks.")
    purge_interval_seconds: int = Field(default=300, ge=60, le=3600, description="pfc.diskusage purgeinterval: how often the cache checks disk usage and purges (XRootD accepts 60-3600 s).")
    write_queue_blocks: int = Field(default=16, ge=1, le=1024, description="pfc.writequeue: blocks queued for writing to disk (XRootD accepts 1-1024).")
    write_queue_threads: int = Field(default=4, ge=1, le=64, description="pfc.writequeue: threads writing blocks to disk.")


class Auth(Model):
    """Client authorisation at the cache."""

    model_config = rules(
        cel("self.mode == 'none' || size(self.issuers) > 0", "auth.issuers needs at least one issuer when mode is 'scitokens'", ".issuers"),
        cel("self.mode == 'none' || has(self.tlsSecret)", "auth.tlsSecret is required when mode is 'scitokens' (ZTN only runs over TLS)", ".tlsSecret"),
    )

    mode: Literal["none", "scitokens"] = Field(default="none", description="none: open read access. scitokens: require a SciToken (over ZTN).")
    issuers: list[Annotated[str, StringConstraints(max_length=200, pattern=rf"^https://{DNS_NAME_PATTERN}(:{PORT_PATTERN})?(/[A-Za-z0-9._~/-]*)?$")]] = Field(
        default=[], max_length=8, description="Accepted token issuer URLs (https).",
    )
    audiences: list[Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._~:/-]*$")]] = Field(
        default=[], max_length=8,
        description="Token audiences the cache accepts (the 'aud' claim); empty accepts the issuers' defaults.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    tls_secret: DnsLabel | None = Field(
        default=None,
        description="Name of a kubernetes.io/tls Secret holding the host certificate and key (and ca.crt); "
        "required for scitokens because ZTN only runs over TLS.",
    )


class Resources(Model):
    """Requested CPU and memory per pod."""

    cpu: Annotated[str, StringConstraints(max_length=16, pattern=r"^[0-9]+(\.[0-9]+)?m?$")] = Field(
        default="4", description="CPU request, a Kubernetes quantity (e.g. '4' or '500m')."
    )
    memory: Annotated[str, StringConstraints(max_length=16, pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$")] = Field(
        default="16Gi", description="Memory request and limit, a Kubernetes quantity (e.g. '16Gi')."
    )


class XCachePoolBody(Model):
    """Everything that describes a pool, inline in a facility or standalone."""

    image: ImageRef = Field(default=DEFAULT_XCACHE_IMAGE, description="Container image running xrootd; defaults to OSG's maintained XCache image.")
    nvme_label: LabelKey = Field(
        default="switchyard.dev/nvme",
        description="Node label that marks NVMe nodes eligible to host a cache (any value but 'false').",
    )
    node_selector: dict[LabelKey, LabelValue] = Field(max_length=16,
        default={}, description="Further node labels a cache host must carry.",
    )
    tolerations: list[Toleration] = tolerations_field("the cache pods")
    max_hosts_per_switch: int = Field(default=8, ge=0, le=1000, description="Upper bound on cache hosts on one switch.")
    serve_gbps: float = Field(default=40.0, ge=MIN_GBPS, le=800, description="What one cache host can serve, in Gbps (capped by the node's NIC; at least 0.001).")
    serve_headroom: float = Field(default=0.0, ge=0, le=0.5, description=(
        "Share of serveGbps the planner keeps free on every cache host: it plans and predicts each host at "
        "serveGbps x (1 - serveHeadroom) at most. Sequential readers lose throughput on a host near its cap "
        "(measured: hosts planned to 92-95% of their cap delivered 0.83-0.87 of the prediction)."))
    miss_ratio: float = Field(default=0.1, ge=0, le=1, description="Expected fraction of served bytes fetched from the origin.")
    port: Port = Field(default=1094, description="Port the cache serves XRootD on (host network).")
    origin: Origin = Field(description="Where misses are fetched from.")
    storage: Storage = Field(default_factory=Storage, description="Data and metadata disks on each host.")
    xrootd_user: XrootdUser = Field(default_factory=XrootdUser, description=(
        "The uid and gid the pod runs xrootd as (the defaults match the default image, OSG's). The pod spec "
        "alone makes xrootd unprivileged: it needs no wrapper or start as root in the image."))
    pfc: Pfc = Field(default_factory=Pfc, description="Proxy file cache tuning.")
    auth: Auth = Field(default_factory=Auth, description="Client authorisation.")
    resources: Resources = Field(default_factory=Resources, description="CPU and memory per cache host.")

    @property
    def planned_serve_gbps(self) -> float:
        """What the planner counts one cache host to serve, its headroom kept free (before the NIC cap)."""
        return self.serve_gbps * (1.0 - self.serve_headroom)

    @model_validator(mode="after")
    def _ram_fits_memory(self) -> "XCachePoolBody":
        # pfc.ram is allocated on top of xrootd's own needs; a RAM setting at or
        # above the memory limit gets the cache OOM-killed under load.
        if self.pfc.ram_gib * 2**30 >= quantity_bytes(self.resources.memory):
            raise ValueError(
                f"pfc.ramGiB ({self.pfc.ram_gib} GiB) must be below resources.memory ({self.resources.memory})"
            )
        return self


class XCachePoolSpec(XCachePoolBody):
    """Desired state of an XCachePool."""

    facility_ref: ObjectRef = Field(description="The AnalysisFacility whose network and planner place this pool.")


class InlinePool(XCachePoolBody):
    """A pool declared inside a facility; it becomes XCachePool '<facility>-<name>'."""

    name: DnsLabel = Field(description="Pool name, unique within the facility.")


class SwitchCount(Model):
    """A count on one switch."""

    switch: str = Field(description="Switch name.")
    desired: int = Field(default=0, description="Planned count.")
    started: int = Field(default=0, description="Count the workloads run now (below desired while ramping up).")
    ready: int = Field(default=0, description="Ready count.")


class HostDiskUsage(Model):
    """The data space of one cache host, as its exporter reports it."""

    host: str = Field(description="Node name of the cache host.")
    switch: str = Field(default="", description="Switch of the cache host.")
    used_bytes: int = Field(default=0, description="Bytes used on the data space's filesystems.")
    total_bytes: int = Field(default=0, description="Size of the data space's filesystems.")
    used_percent: float = Field(default=0, description="Used share of the data space, in percent.")
    past_high_watermark: bool = Field(default=False, description="Above pfc.diskusage's high water mark: XRootD is purging.")


class PoolDiskUsage(Model):
    """Disk usage of the pool's data spaces, read from the cache hosts' exporters."""

    used_bytes: int = Field(default=0, description="Bytes used, summed over the reporting hosts.")
    total_bytes: int = Field(default=0, description="Data space size, summed over the reporting hosts.")
    used_percent: float = Field(default=0, description="Used share over the reporting hosts, in percent.")
    high_watermark_percent: float = Field(default=0, description="pfc.diskusage high water mark, in percent.")
    hosts_reporting: int = Field(default=0, description="Ready hosts whose exporter answered.")
    hosts_unreachable: list[str] = Field(default=[], description="Ready hosts whose exporter did not answer (network policy, or the sidecar is down).")
    hosts: list[HostDiskUsage] = Field(default=[], description="Every reporting host.")
    observed_at: str = Field(default="", description="When the exporters were read (RFC 3339).")


# The hot list the routing ConfigMaps publish (builders/workerfleet.py, key `hot`): bounded so the
# ConfigMap stays far below its 1 MiB (256 lines of at most ~1 KiB) and each reader's lookup stays small.
MAX_HOT_FILES = 256
MAX_HOT_REPLICAS = 16


class HotFile(Model):
    """A file read often enough to get more than one home cache (planner/hashing.py, steps 5-7)."""

    path: Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=r"^/[^/\s?#][^\s?#]*$")] = Field(
        description="The file's path as the hashing rule hashes it: the URL's path with one leading slash, "
                    "no query, no white space (a line of the routing ConfigMap's `hot` key).")
    replicas: int = Field(ge=2, le=MAX_HOT_REPLICAS, description=(
        "How many caches serve it: each reader reads it from one of the first `replicas` caches of its "
        "ring order (capped at the ring's size), picked by a hash of the reader and the file."))


class XCachePoolStatus(CommonStatus):
    """Observed state of an XCachePool."""

    hosts: int = Field(default=0, description="Planned cache hosts.")
    ready_hosts: int = Field(default=0, description="Cache hosts ready to serve.")
    switches: list[SwitchCount] = Field(default=[], description="Planned and ready hosts per switch.")
    serving_gbps: float = Field(default=0, description="Serving capacity of the ready hosts, in Gbps.")
    endpoint: str = Field(default="", description="The pool-wide Service address (host:port).")
    ring_out: list[NodeName] = Field(default=[], description="Planned hosts out of the published hash ring: no "
                                     "Ready cache pod on them (readers hash over the rest).")
    ring_weights: dict[NodeName, Annotated[float, Field(gt=0, lt=1)]] = Field(default={}, description=(
        "Ring hosts whose rendezvous weight is lowered for their measured load, and by what factor (written by "
        "the operator only; desired/ringload.py): the fleets publish the plan's weight times the factor; a host "
        "not listed keeps its planned weight."))
    hot_files: list[HotFile] = Field(default=[], max_length=MAX_HOT_FILES, description=(
        "Files read from more than one cache, with their replica counts (written by the operator only): "
        "published to the readers of the pool's fleets beside the ring; empty, every file has one home."))
    disk: PoolDiskUsage | None = Field(default=None, description="Disk usage of the data spaces; absent until the exporters were read.")
    plan: PoolPlan | None = Field(default=None, description="Where the facility places the hosts (written by the operator only).")
