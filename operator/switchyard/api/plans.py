"""The plan a facility hands each child: the one contract between the controllers.

A facility writes each of its pools' and fleets' slice of the plan into that
child's `status.plan`, as field manager `switchyard-plan`. It lives in status,
not in an annotation, because the status subresource is authorised apart
from the object: a user who may edit a WorkerFleet or XCachePool (`edit`
grants `update` on the object, never on `<kind>/status`) cannot write it, so
cannot steer where pods go or which disks are mounted; the API server drops a
`status` sent with a create or update of the object itself. The schema below
types every field, so the API server refuses a malformed plan, and a child
that still finds one (written by someone granted status rights) reports
`Ready=False InvalidPlan` naming the field. A plan also names the facility
that wrote it: a fleet that moves to another facility waits for that one's.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, ValidationError

from .base import Cidr, LabelKey, Model, Port

PLAN_FIELD_MANAGER = "switchyard-plan"

NodeName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
SwitchName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")]
ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


class PlanProblem(Model):
    """Why the facility placed none of this child: the child's own Ready=False reason."""

    reason: Annotated[str, StringConstraints(max_length=64, pattern=r"^[A-Z][A-Za-z0-9]*$")] = Field(
        description="CamelCase reason.")
    message: Annotated[str, StringConstraints(max_length=1024)] = Field(default="", description="What to change.")


class PoolPlan(Model):
    """Where a cache pool's hosts go."""

    facility: ObjectName = Field(description="The AnalysisFacility that wrote this plan.")
    switch_label: LabelKey = Field(default="switchyard.dev/switch", description="Node label naming a node's switch.")
    hosts: dict[SwitchName, list[NodeName]] = Field(default={}, description="Cache hosts (node names) per switch.")
    # Both None (absent) unless the facility declares spec.outsideReaders: a plan without them is unchanged.
    outside_networks: dict[SwitchName, list[Cidr]] | None = Field(default=None, description=(
        "The address ranges of the facility's readers outside Kubernetes (spec.outsideReaders), per switch: "
        "the exporters' client map places them there."))
    cache_ring: dict[NodeName, Annotated[float, Field(ge=0)]] | None = Field(default=None, description=(
        "The pool's ring (cache host -> weight) while readers outside Kubernetes read through it: its exporters "
        "serve it to them, as the fleets' routing ConfigMaps publish it."))


class FleetPlan(Model):
    """How many of a fleet's workers go behind each switch, and where they read."""

    facility: ObjectName = Field(description="The AnalysisFacility that wrote this plan.")
    switch_label: LabelKey = Field(default="switchyard.dev/switch", description="Node label naming a node's switch.")
    workers: dict[SwitchName, Annotated[int, Field(ge=0)]] = Field(default={}, description="Workers per switch.")
    hashed: dict[SwitchName, Annotated[int, Field(ge=0)]] = Field(
        default={}, description="Of those, the workers per switch that read over the pool's hash ring.")
    pool: ObjectName | None = Field(default=None, description="The XCachePool the workers read through.")
    pool_port: Port = Field(default=1094, description="The pool's XRootD port.")
    pool_origin_mode: Literal["fixed", "forward"] = Field(
        default="fixed", description="The pool's origin.mode: in 'forward' readers name the origin in the URL's path.")
    cache_switches: list[SwitchName] = Field(default=[], description="Switches with a host of the pool.")
    routing: dict[SwitchName, Literal["local", "hashed"]] = Field(default={}, description="Routing per switch.")
    cache_ring: dict[NodeName, Annotated[float, Field(ge=0)]] = Field(
        default={}, description="The ring hashed readers use: cache host (node name) -> weight.")
    unplaced: int = Field(default=0, ge=0, description="Workers no node of the facility's switches has room for.")
    problem: PlanProblem | None = Field(default=None, description="Set when the facility could not place this fleet.")


def decode(model: type[Model], status: dict | None, facility: str) -> tuple[Model | None, str]:
    """The child's plan from its status: (plan, "") if present and for `facility`; (None, why) if invalid.

    (None, "") means no plan yet (or one from another facility): wait for it.
    """
    raw = (status or {}).get("plan")
    if raw is None:
        return None, ""
    try:
        plan = model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "plan"
        return None, f"status.plan.{where}: {first['msg']}"
    return (plan, "") if plan.facility == facility else (None, "")
