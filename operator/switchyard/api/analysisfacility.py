"""AnalysisFacility: the network, the target and the inline children of one facility."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Cidr, CommonStatus, DnsLabel, LabelKey, LabelValue, Model, cel, rules
from .s3staging import S3StagingBody
from .units import MAX_NIC_GBPS, MIN_GBPS
from .uplinkscore import IN, OUT
from .workerfleet import InlineFleet
from .xcachepool import InlinePool

Routing = Literal["local", "hashed", "auto"]


class Switch(Model):
    """One network switch (rack or top-of-rack) and its uplink to the spine."""

    name: LabelValue = Field(description="Switch name: the value of the switch label on the nodes behind it.")
    uplink_gbps: float = Field(ge=MIN_GBPS, le=100000, description="Uplink capacity to the spine in Gbps, each direction (at least 0.001).")


class Network(Model):
    """How the facility's nodes are wired: which switch each node sits on and what its links carry."""

    switch_label: LabelKey = Field(
        default="switchyard.dev/switch",
        description="Node label whose value names the switch a node is cabled to.",
    )
    nic_gbps_annotation: LabelKey = Field(
        default="switchyard.dev/nic-gbps",
        description="Node annotation giving the node's NIC speed in Gbps.",
    )
    default_nic_gbps: float = Field(default=25.0, ge=MIN_GBPS, le=MAX_NIC_GBPS, description="NIC speed assumed for nodes without the annotation (at least 0.001).")
    wan_gbps: float = Field(default=100.0, ge=MIN_GBPS, le=100000, description="Capacity towards the origins (cache fills), in Gbps (at least 0.001).")
    switches: list[Switch] = Field(
        min_length=1,
        max_length=1000,
        description="The switches workloads may be placed behind, with their uplink capacity. Names must be unique.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class OutsideReaders(Model):
    """Readers switchyard does not run (HTCondor jobs, say), counted by the planner as fixed demand on their switch."""

    name: DnsLabel = Field(description="Name of the group, unique within the facility.")
    switch: LabelValue = Field(description=(
        "The switch they sit behind: one of spec.network.switches. It may be a switch with no Kubernetes node "
        "(an HTCondor rack): its uplink is planned all the same."))
    count: int = Field(ge=1, le=100000, description="How many readers read at once.")
    read_gbps: float = Field(ge=MIN_GBPS, le=MAX_NIC_GBPS, description="What each reads while busy, in Gbps.")
    cidrs: list[Cidr] = Field(min_length=1, max_length=32, description=(
        "The address ranges they read from (CIDRs, e.g. 10.8.0.0/22): how the caches' traffic is told apart "
        "from the pods'."))
    pool: DnsLabel | None = Field(default=None, description=(
        "The cache pool they read through: one of spec.cachePools (default: the first). They read its ring "
        "(rendezvous hashing over all its cache hosts, at their node addresses, as hashed workers do): a "
        "per-switch cache Service is a cluster name and address that a batch node neither resolves nor reaches."))


class AnalysisFacilitySpec(Model):
    """Desired state of an analysis facility."""

    model_config = rules(
        cel(
            "!has(self.fleets) || !has(self.cachePools) || self.fleets.all(f, !has(f.pool) || self.cachePools.exists(p, p.name == f.pool))",
            "every fleet's pool must name one of spec.cachePools",
            ".fleets",
        ),
        cel(
            "!has(self.outsideReaders) || self.outsideReaders.all(r, self.network.switches.exists(s, s.name == r.switch))",
            "every outside reader group's switch must name one of spec.network.switches",
            ".outsideReaders",
        ),
        cel(
            "!has(self.outsideReaders) || self.outsideReaders.all(r, !has(r.pool) || "
            "(has(self.cachePools) && self.cachePools.exists(p, p.name == r.pool)))",
            "every outside reader group's pool must name one of spec.cachePools",
            ".outsideReaders",
        ),
    )

    network: Network = Field(description="Switches, uplinks and NIC speeds: the input to placement.")
    target_gbps: float = Field(default=200.0, gt=0, le=100000, description="The aggregate read throughput the facility aims for, in Gbps.")
    routing: Routing = Field(
        default="auto",
        description="How workers pick a cache: local (their switch's caches), hashed (rendezvous hash over all caches), auto (per switch by headroom).",
    )
    cache_pools: list[InlinePool] = Field(
        default=[],
        max_length=16,
        description="XCache pools; each becomes an owned XCachePool named '<facility>-<name>'.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    fleets: list[InlineFleet] = Field(
        default=[],
        max_length=64,
        description="Worker fleets; each becomes an owned WorkerFleet named '<facility>-<name>'.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    staging: S3StagingBody | None = Field(default=None, description="The staging area; becomes an owned S3Staging named '<facility>-staging'.")
    outside_readers: list[OutsideReaders] = Field(
        default=[],
        max_length=64,
        description=("Groups of readers the facility does not run (HTCondor overflow, say): fixed demand the planner "
                     "places caches and workers around, and routes through their pool's ring."),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class SwitchPlan(Model):
    """The plan for one switch."""

    name: str = Field(description="Switch name.")
    caches: int = Field(default=0, description="Planned cache hosts.")
    workers: int = Field(default=0, description="Planned workers, all fleets.")
    in_gbps: float = Field(default=0, description="Predicted uplink load towards the switch, Gbps.")
    out_gbps: float = Field(default=0, description="Predicted uplink load away from the switch, Gbps.")
    utilisation: float = Field(default=0, description="Predicted peak uplink utilisation (0..1).")
    routing: str = Field(default="local", description="Routing mode chosen for the switch.")
    serve_gbps: float = Field(default=0, description="Predicted Gbps served by this switch's cache hosts (fair share).")
    fair_in_gbps: float = Field(default=0, description=(
        "Predicted uplink load towards the switch when competing TCP flows share the links (max-min fair share), "
        "link Gbps: what observed traffic should match. inGbps is the LP optimum's."))
    fair_out_gbps: float = Field(default=0, description=(
        "Predicted uplink load away from the switch when competing TCP flows share the links (max-min fair share), "
        "link Gbps. outGbps is the LP optimum's."))
    full_hosts_behind_in: int = Field(default=0, ge=0, description=(
        "When the fair share fills the uplink towards the switch: how many cache hosts, also at their cap, send "
        "flows through it. TCP gives flows that queue at both less of such a host, so expect the uplink to carry "
        "less than fairInGbps; `switchyard plan` names the hosts."))
    full_hosts_behind_out: int = Field(default=0, ge=0, description=(
        "As fullHostsBehindIn, for the uplink away from the switch and fairOutGbps."))
    full_both_ways: bool = Field(default=False, description=(
        "Whether the fair share fills the switch's uplink in both directions at once. There each direction's ACKs "
        "wait behind the other's data: on cache nodes whose TCP congestion control is BBR such an uplink carried "
        "0.75-0.86 of its capacity, with CUBIC 0.94-0.99; `switchyard plan` cautions."))
    outside_readers: int = Field(default=0, ge=0, description=(
        "Readers of spec.outsideReaders behind the switch (not pods: workers counts those)."))
    outside_gbps: float = Field(default=0, description=(
        "What those outside readers would read unhindered, Gbps (their count times readGbps)."))
    outside_fair_gbps: float = Field(default=0, description=(
        "What the fair share predicts those outside readers get, Gbps."))


class PlanSummary(Model):
    """What the planner predicts for the current placement."""

    predicted_gbps: float = Field(default=0, description=(
        "Predicted deliverable aggregate Gbps: the most the placement's routing allows (LP optimum), link Gbps."))
    fair_share_gbps: float = Field(default=0, description=(
        "Predicted aggregate Gbps competing TCP flows deliver with this placement (max-min fair share, each file "
        "served by one cache host), link Gbps; at most predictedGbps. A full link carries ~0.956 of it as TCP "
        "payload at 1500 MTU."))
    bound_gbps: float = Field(default=0, description="Upper bound on any placement's Gbps (LP relaxation).")
    optimal: bool = Field(default=False, description=(
        "Whether the planner proved predictedGbps the most its placement model allows (within 0.01%). "
        "False: its search stopped at a deterministic limit, and gap says how far from the bound the plan may be."))
    gap: float = Field(default=0, ge=0, le=1, description=(
        "Proven relative gap to the bound: no placement delivers more than predictedGbps / (1 - gap)."))
    bottleneck: str = Field(default="", description="What limits the plan (e.g. 'uplink sw2', 'cache serving', 'demand').")
    target: str = Field(default="", description=(
        "The plan against spec.targetGbps in words: met, or how far short, what binds it (the workers' demand, "
        "which uplink in which direction, the cache hosts' serving, the WAN) and what would lift it; the same "
        "sentence `switchyard plan` prints."))
    planner: str = Field(default="", description="Planner that produced the plan.")
    switches: list[SwitchPlan] = Field(default=[], description="Per-switch plan.")


class PendingDrift(Model):
    """A streak of the drift check under way, kept so that a new leader carries it on from when it began."""

    switch: str = Field(description="Switch name.")
    direction: Literal["serve", IN, OUT] = Field(description=(
        "What is compared: serve (what the switch's cache hosts serve), in / out (its uplink, each way)."))
    toward: Literal["Drift", "Clear"] = Field(description=(
        "Drift: out of the raising band, PredictionDrift is set after sustainSeconds; Clear: drifting and back "
        "within the clearing band, cleared after clearSeconds."))
    since: str = Field(description="When the streak began (RFC 3339, the operator's wall clock).")


class DriftStatus(Model):
    """What the prediction drift check has under way (the standing drift is in the Degraded condition)."""

    pending: list[PendingDrift] = Field(default=[], max_length=3000, description=(
        "Streaks under way, sorted by switch and direction: a new leader carries them on instead of starting "
        "them again."))


class AnalysisFacilityStatus(CommonStatus):
    """Observed state of an analysis facility."""

    switches: int = Field(default=0, description="Switches with nodes.")
    caches: int = Field(default=0, description="Planned cache hosts.")
    workers: int = Field(default=0, description="Planned workers.")
    plan: PlanSummary | None = Field(default=None, description="The current plan.")
    drift: DriftStatus | None = Field(default=None, description="The prediction drift check's streaks under way.")
