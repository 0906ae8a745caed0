"""WorkerFleet: Dask or TaskVine workers placed on the facility's switches."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from .base import (
    DNS_NAME_PATTERN,
    PORT_PATTERN,
    CommonStatus,
    DnsLabel,
    HostName,
    ImageRef,
    Model,
    ObjectRef,
    Port,
    Toleration,
    cel,
    rules,
    tolerations_field,
)
from .plans import FleetPlan
from .units import MIN_GBPS
from .xcachepool import SwitchCount

DEFAULT_DASK_IMAGE = "ghcr.io/dask/dask:2024.12.1-py3.12"
DEFAULT_TASKVINE_IMAGE = "docker.io/cclnd/cctools-env:x86_64-almalinux9"

# Variables the operator gives every worker (beside its SWITCHYARD_* ones): a
# fleet's env may not shadow them (a duplicate key fails every apply).
RESERVED_ENV = ("POD_NAME", "POD_IP", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY")
RESERVED_ENV_CEL = "[" + ", ".join(f"'{n}'" for n in RESERVED_ENV) + "]"

EnvName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class Dask(Model):
    """Run `dask worker` processes."""

    model_config = rules(
        cel(
            "has(self.schedulerAddress) != self.createScheduler",
            "dask needs exactly one of schedulerAddress or createScheduler: true",
            ".schedulerAddress",
        ),
        cel(
            "!has(self.tlsSecret) || (has(self.schedulerAddress) && self.schedulerAddress.startsWith('tls://'))",
            "tlsSecret needs a tls:// schedulerAddress",
            ".tlsSecret",
        ),
    )

    scheduler_address: Annotated[str, StringConstraints(max_length=260, pattern=rf"^(tcp|tls)://{DNS_NAME_PATTERN}:{PORT_PATTERN}$")] | None = Field(
        default=None, description="Address of an existing Dask scheduler, e.g. tcp://scheduler.ns:8786.",
    )
    create_scheduler: bool = Field(default=False, description="Run a scheduler (Deployment and Service, dashboard on 8787) for this fleet.")
    tls_secret: DnsLabel | None = Field(
        default=None,
        description="Secret holding dask.crt and dask.pem (as dask-gateway's cluster credentials do): the workers "
                    "speak TLS with that pair, trusting dask.crt as the CA, and refuse unencrypted comms.",
    )
    client_namespaces: list[DnsLabel] = Field(
        default=[], max_length=32,
        description="Namespaces whose pods may connect to the scheduler this fleet creates (clients, notebooks), "
                    "beside its own workers and the chart's dask-gateway; empty: the fleet's own namespace. "
                    "Enforced by a NetworkPolicy where the cluster's network plugin enforces them.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class TaskVine(Model):
    """Run `vine_worker` processes."""

    model_config = rules(
        cel(
            "has(self.managerHost) != has(self.managerName)",
            "taskvine needs exactly one of managerHost or managerName",
            ".managerHost",
        ),
    )

    manager_host: HostName | None = Field(default=None, description="Manager host name; workers connect to managerHost:managerPort.")
    manager_port: Port = Field(default=9123, description="Manager port.")
    manager_name: Annotated[str, StringConstraints(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] | None = Field(
        default=None, description="Project name to find the manager through the catalog server (vine_worker -M).",
    )
    catalog: Annotated[str, StringConstraints(max_length=260, pattern=rf"^{DNS_NAME_PATTERN}:{PORT_PATTERN}$")] | None = Field(
        default=None, description="Catalog server as HOSTNAME:PORT (vine_worker -C), for managerName.",
    )
    transfer_port: Port = Field(default=9124, description="Port the worker serves peer transfers on.")
    disk_mib: int = Field(default=10240, ge=100, le=10_000_000, description="Disk the worker offers, in MiB.")


class RampUp(Model):
    """How fast new workers may start, to avoid start storms."""

    max_starts_per_second: float = Field(default=20.0, gt=0, le=10000, description="New workers started per second, at most, per fleet.")
    jitter_seconds: int = Field(default=10, ge=0, le=3600, description="Each worker waits a delay in [0, jitterSeconds) derived from its name before starting its engine.")


class EnvVar(Model):
    """An extra environment variable for every worker."""

    name: EnvName = Field(description="Variable name.")
    value: Annotated[str, StringConstraints(max_length=4096)] = Field(default="", description="Literal value (never interpreted by a shell).")


class WorkerFleetBody(Model):
    """Everything that describes a fleet, inline in a facility or standalone."""

    model_config = rules(
        cel("has(self.dask) != has(self.taskvine)", "exactly one engine section (dask or taskvine) must be set", ".dask"),
        cel("self.env.all(e, !e.name.startsWith('SWITCHYARD_') && !(e.name in " + RESERVED_ENV_CEL + "))",
            "env must not set a variable the operator sets (SWITCHYARD_*, " + ", ".join(RESERVED_ENV) + ")", ".env"),
    )

    replicas: int = Field(default=1, ge=0, le=100000, description="Number of workers.")
    dask: Dask | None = Field(default=None, description="Dask engine settings (exclusive with taskvine).")
    taskvine: TaskVine | None = Field(default=None, description="TaskVine engine settings (exclusive with dask).")
    image: ImageRef | None = Field(default=None, description="Worker image; defaults to the engine's image.")
    cores: int = Field(default=1, ge=1, le=256, description="CPU cores per worker (request and limit).")
    memory_gib: float = Field(default=4.0, ge=0.0625, le=4096, description="Memory per worker in GiB (request and limit), at least 0.0625 (64 MiB).")
    read_gbps: float = Field(default=0.2, ge=MIN_GBPS, le=400, description="Gbps one busy worker reads; the planner's demand per worker (at least 0.001).")
    pool: DnsLabel | None = Field(default=None, description="Name of the facility's cache pool to read through; defaults to the first pool.")
    staging: DnsLabel | None = Field(default=None, description="Name of an S3Staging whose endpoint and credentials the workers receive.")
    tolerations: list[Toleration] = tolerations_field("the workers (and of the Dask scheduler the fleet creates)")
    ramp_up: RampUp = Field(default_factory=RampUp, description="Start-storm shaping.")
    env: list[EnvVar] = Field(
        default=[], max_length=64, description="Extra environment for every worker.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class WorkerFleetSpec(WorkerFleetBody):
    """Desired state of a WorkerFleet."""

    facility_ref: ObjectRef = Field(description="The AnalysisFacility whose switches and caches the workers use.")


class InlineFleet(WorkerFleetBody):
    """A fleet declared inside a facility; it becomes WorkerFleet '<facility>-<name>'."""

    name: DnsLabel = Field(description="Fleet name, unique within the facility.")


class RoutingCheck(Model):
    """Whether the fleet's workers can route root:// reads through the caches, as their image's check said."""

    image: str = Field(description="The worker image the verdict is for.")
    routes: bool = Field(description="True: reads by origin URL go to the planned caches; False: to the origin.")
    message: str = Field(default="", description="What the check found in the image, or what the image lacks.")


class WorkerFleetStatus(CommonStatus):
    """Observed state of a WorkerFleet."""

    engine: str = Field(default="", description="dask or taskvine.")
    replicas: int = Field(default=0, description="Workers that exist (for the scale subresource).")
    ready_replicas: int = Field(default=0, description="Workers ready.")
    selector: str = Field(default="", description="Label selector of the fleet's pods (for the scale subresource).")
    switches: list[SwitchCount] = Field(default=[], description="Planned and ready workers per switch.")
    plan: FleetPlan | None = Field(default=None, description="Where the facility places the workers (written by the operator only).")
    routing: RoutingCheck | None = Field(default=None, description="What the workers' routing-check init container "
                                         "found in the fleet's image (a fleet that reads through a pool).")
