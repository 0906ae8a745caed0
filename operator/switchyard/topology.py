"""Nodes → switches: the topology snapshot the planner works on.

Two ways in: live Node objects (through the operator's node index) and
topology files (`e2e/topologies/*.yaml`, used by `switchyard plan` and the
local cluster). Both end as the same immutable `Topology`.
"""

from __future__ import annotations

import functools
import pathlib
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

import yaml

from pydantic import Field, ValidationError

from .api.analysisfacility import AnalysisFacilitySpec, Network, OutsideReaders
from .api.base import OBJECT_NAME_MAX, OBJECT_NAME_PATTERN, REPELLING_EFFECTS, DnsLabel, LabelKey, LabelValue, Model, Taint, Toleration, admits
from .api.units import MAX_NIC_GBPS, MIN_GBPS

GIB = 1024**3
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}


def parse_quantity(text: str | int | float) -> float:
    """A Kubernetes quantity ('500m', '16Gi', '4') as a float."""
    if isinstance(text, (int, float)):
        return float(text)
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


@dataclass(frozen=True)
class NodeInfo:
    """What the operator keeps of a Node: enough to place on it."""

    name: str
    labels: Mapping[str, str]
    nic_gbps: float | None
    cpu_millis: int
    memory_bytes: int
    pods: int
    schedulable: bool = True
    annotations: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    # When the Ready condition left True (RFC 3339), for a node that is not Ready now.
    not_ready_since: str | None = None
    # Its taints (spec.taints), sorted.
    taints: tuple[Taint, ...] = ()
    # Where its clients' traffic comes from: InternalIPs and spec.podCIDR(s) (the exporters' client map); the
    # pool reconcile adds the ranges a network plugin's own IPAM gives it (with_pod_networks).
    # Not compared: an address change re-renders the map, it does not re-plan.
    client_networks: tuple[str, ...] = field(default=(), compare=False, hash=False)
    # Its InternalIPs in the Node's own order (the first is where its host-network pods listen for
    # others: the address hashed readers are told for a cache host). Not compared, as above.
    internal_ips: tuple[str, ...] = field(default=(), compare=False, hash=False)

    @property
    def address(self) -> str | None:
        """Where pods reach a host-network process on this node through no DNS: its first InternalIP."""
        return self.internal_ips[0] if self.internal_ips else None

    def label(self, key: str) -> str | None:
        return self.labels.get(key)

    def nic(self, annotation: str) -> float | None:
        """NIC Gbps from the facility's annotation, else from the default one. An annotation outside
        what the schema admits for a NIC (MIN_GBPS to MAX_NIC_GBPS: say '5e-324' or 'inf') is no NIC
        speed: the facility's default stands for it."""
        parsed = _positive_float(self.annotations.get(annotation))
        return parsed if parsed is not None and MIN_GBPS <= parsed <= MAX_NIC_GBPS else self.nic_gbps


def _positive_float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value and value > 0 else None


def node_taints(taints: Iterable[Mapping]) -> tuple[Taint, ...]:
    """A Node's spec.taints, sorted (read from the API server: not validated again)."""
    kept = {(t.get("key") or "", t.get("value") or "", t.get("effect") or "") for t in taints}
    return tuple(Taint.model_construct(key=k, value=v, effect=e) for k, v, e in sorted(kept))


def node_info(body: Mapping, nic_annotation: str = "switchyard.dev/nic-gbps") -> NodeInfo:
    """Project a Node object onto NodeInfo (pure; used by the kopf index)."""
    meta = body.get("metadata", {})
    status = body.get("status", {})
    alloc = status.get("allocatable") or status.get("capacity") or {}
    ready_condition = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
    ready = ready_condition.get("status") == "True"
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != "kubectl.kubernetes.io/last-applied-configuration"}
    return NodeInfo(
        name=meta["name"],
        labels=dict(sorted((meta.get("labels") or {}).items())),
        nic_gbps=_positive_float(annotations.get(nic_annotation)),
        cpu_millis=int(parse_quantity(alloc.get("cpu", 0)) * 1000),
        memory_bytes=int(parse_quantity(alloc.get("memory", 0))),
        pods=int(parse_quantity(alloc.get("pods", 110))),
        schedulable=ready and not body.get("spec", {}).get("unschedulable", False),
        annotations=annotations,
        not_ready_since=None if ready else ready_condition.get("lastTransitionTime") or "",
        taints=node_taints(body.get("spec", {}).get("taints") or ()),
        client_networks=node_client_networks(body),
        internal_ips=node_internal_ips(body),
    )


def node_internal_ips(body: Mapping) -> tuple[str, ...]:
    """A Node's InternalIPs, in status.addresses' order (the kubelet lists its primary first)."""
    found = [a.get("address") for a in (body.get("status") or {}).get("addresses") or () if a.get("type") == "InternalIP"]
    return tuple(dict.fromkeys(a for a in found if a))


def node_client_networks(body: Mapping) -> tuple[str, ...]:
    """A Node's InternalIPs and pod CIDRs, sorted: the addresses its pods and host-network processes read from."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    addresses = {a.get("address") for a in status.get("addresses") or () if a.get("type") == "InternalIP"}
    cidrs = set(spec.get("podCIDRs") or ()) | ({spec["podCIDR"]} if spec.get("podCIDR") else set())
    return tuple(sorted(n for n in addresses | cidrs if n))


# Pod address ranges a network plugin's own IPAM hands a node, outside its spec.podCIDR(s).
NodeNetworks = tuple[str, tuple[str, ...]]   # (node name, its ranges)


def calico_block_networks(body: Mapping) -> NodeNetworks | None:
    """A Calico BlockAffinity (crd.projectcalico.org/v1; spec.node, spec.cidr, spec.state) as (node, (its
    block,)) while the block is that node's: state "confirmed" (not "pending" or "pendingDeletion"), not
    marked deleted (a string in the CRD: "true"), and a host affinity (a "virtual" one names no node)."""
    spec = _mapping(body.get("spec"))
    node, cidr = spec.get("node"), spec.get("cidr")
    if (spec.get("state") != "confirmed" or str(spec.get("deleted", "")).lower() == "true"
            or spec.get("type") not in (None, "", "host") or not isinstance(node, str) or not isinstance(cidr, str)
            or not node or not cidr):
        return None
    return node, (cidr,)


def cilium_node_networks(body: Mapping) -> NodeNetworks | None:
    """A CiliumNode (cilium.io/v2, named after its Node) as (node, its pod CIDRs): spec.ipam.podCIDRs
    (the cluster-pool IPAM's per-node CIDRs) and spec.ipam.pools.allocated[].cidrs (multi-pool's)."""
    ipam = _mapping(_mapping(body.get("spec")).get("ipam"))
    allocated = _mapping(ipam.get("pools")).get("allocated")
    pooled = [c for a in (allocated if isinstance(allocated, list) else ()) for c in _strings(_mapping(a).get("cidrs"))]
    cidrs = tuple(sorted({*_strings(ipam.get("podCIDRs")), *pooled}))
    name = _mapping(body.get("metadata")).get("name")
    return (name, cidrs) if isinstance(name, str) and name and cidrs else None


def _mapping(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _strings(value: Any) -> tuple[str, ...]:
    """The non-empty strings of a list (anything else in an object the API server did not check: none)."""
    return tuple(v for v in value if isinstance(v, str) and v) if isinstance(value, list) else ()


def pod_networks_by_node(found: Iterable[NodeNetworks | None]) -> dict[str, tuple[str, ...]]:
    """node -> its ranges, sorted, from every parsed object (a Calico node has a block per object)."""
    out: dict[str, set[str]] = {}
    for item in found:
        if item:
            out.setdefault(item[0], set()).update(item[1])
    return {node: tuple(sorted(cidrs)) for node, cidrs in sorted(out.items())}


def with_pod_networks(nodes: Iterable[NodeInfo], pod_networks: Mapping[str, Iterable[str]]) -> list[NodeInfo]:
    """`nodes` with each one's `pod_networks` (by node name) among its client networks: the pools' client maps
    then place those pods on its switch. Client networks are not compared, so nothing re-plans."""
    return [replace(n, client_networks=tuple(sorted({*n.client_networks, *pod_networks[n.name]})))
            if pod_networks.get(n.name) else n for n in nodes]


@dataclass(frozen=True)
class Host:
    """A node as the planner sees it: on one switch, with its capacities."""

    name: str
    switch: str
    nic_gbps: float
    cpu_millis: int
    memory_bytes: int
    pods: int
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    taints: tuple[Taint, ...] = field(default=(), compare=False, hash=False)   # NoSchedule, NoExecute

    def admits(self, tolerations: Iterable[Toleration]) -> bool:
        """Whether pods with these tolerations may be scheduled here (every NoSchedule/NoExecute taint tolerated)."""
        return not self.taints or admits(self.taints, tolerations)

    def matches(self, selector: Mapping[str, str]) -> bool:
        return all(self.labels.get(k) == v for k, v in selector.items())

    def has_nvme(self, nvme_label: str) -> bool:
        value = self.labels.get(nvme_label)
        return value is not None and value.lower() != "false"


@dataclass(frozen=True)
class SwitchNodes:
    name: str
    uplink_gbps: float
    hosts: tuple[Host, ...]


@dataclass(frozen=True)
class OutsideGroup:
    """Readers the facility does not run, on one switch (spec.outsideReaders): fixed demand for the planner."""

    name: str
    switch: str
    count: int
    read_gbps: float
    pool: str | None          # None: the facility's first pool

    @property
    def demand_gbps(self) -> float:
        return self.count * self.read_gbps


@dataclass(frozen=True)
class Topology:
    """Switches with their uplinks and the schedulable hosts behind each."""

    switches: tuple[SwitchNodes, ...]
    wan_gbps: float
    # Schedulable nodes whose switch label names no declared switch.
    unknown_switch_nodes: tuple[str, ...] = ()
    # Nodes on declared switches that are NotReady: capacity the plan has lost
    # (a cordoned node is the admin's choice and is not listed).
    not_ready_nodes: tuple[str, ...] = ()
    # Readers outside Kubernetes, by name: they load their switch's uplink, nobody places them.
    outside: tuple[OutsideGroup, ...] = ()

    def outside_on(self, switch: str) -> tuple[OutsideGroup, ...]:
        return tuple(g for g in self.outside if g.switch == switch)

    def switch(self, name: str) -> SwitchNodes:
        return next(s for s in self.switches if s.name == name)

    @functools.cached_property
    def hosts(self) -> tuple[Host, ...]:
        # Kept once built: the planner and the fair share ask for it a dozen times (20,000 hosts each).
        return tuple(h for s in self.switches for h in s.hosts)


def snapshot(nodes: Iterable[NodeInfo], network: Network, outside: Iterable[OutsideReaders] = ()) -> Topology:
    """Group schedulable nodes by the facility's switches (deterministic order); `outside`: the facility's
    spec.outsideReaders, which sit on its switches beside (or instead of) nodes."""
    declared = {s.name: s for s in network.switches}
    by_switch: dict[str, list[Host]] = {name: [] for name in declared}
    unknown: list[str] = []
    not_ready: list[str] = []
    switch_label, annotation, default_nic = network.switch_label, network.nic_gbps_annotation, network.default_nic_gbps
    for node in sorted(nodes, key=lambda n: n.name):
        switch = node.labels.get(switch_label)
        if node.not_ready_since is not None and switch in declared:
            not_ready.append(node.name)
        if not node.schedulable or switch is None:
            continue
        if switch not in declared:
            unknown.append(node.name)
            continue
        by_switch[switch].append(Host(
            name=node.name, switch=switch, nic_gbps=node.nic(annotation) or default_nic,
            cpu_millis=node.cpu_millis, memory_bytes=node.memory_bytes, pods=node.pods, labels=node.labels,
            # Only the taints that keep pods off; PreferNoSchedule merely steers the scheduler.
            taints=tuple(t for t in node.taints if t.effect in REPELLING_EFFECTS) if node.taints else (),
        ))
    return Topology(
        switches=tuple(SwitchNodes(n, declared[n].uplink_gbps, tuple(by_switch[n])) for n in sorted(declared)),
        wan_gbps=network.wan_gbps,
        unknown_switch_nodes=tuple(unknown),
        not_ready_nodes=tuple(not_ready),
        outside=tuple(OutsideGroup(g.name, g.switch, g.count, g.read_gbps, g.pool)
                      for g in sorted(outside, key=lambda g: g.name)),
    )


# ---------------------------------------------------------------- topology files

class NodeGroup(Model):
    """Identical nodes behind one switch."""

    name: DnsLabel = Field(description="Name prefix; nodes are named '<switch>-<name>-<i>' (or '<switch>-<name>' when count is 1).")
    count: int = Field(default=1, ge=1, le=10000, description="How many such nodes.")
    nic_gbps: float = Field(default=25.0, ge=MIN_GBPS, le=MAX_NIC_GBPS, description="NIC speed in Gbps.")
    cpu: int = Field(default=32, ge=1, le=4096, description="Allocatable CPU cores.")
    memory_gib: int = Field(default=128, ge=1, le=65536, description="Allocatable memory in GiB.")
    pods: int = Field(default=110, ge=1, le=10000, description="Allocatable pods.")
    nvme_disks: int = Field(default=0, ge=0, le=64, description="NVMe data disks; nodes with any are labelled as NVMe nodes.")
    labels: dict[LabelKey, LabelValue] = Field(default={}, max_length=16, description="Extra node labels.")
    taints: list[Taint] = Field(default=[], max_length=16, description="Node taints, e.g. {key: dedicated, value: xcache, effect: NoSchedule}.")
    real: bool = Field(default=False, description="Local test clusters only: run these nodes with a real kubelet and "
                       "containerd (e2e/realnodes.py) instead of simulating them; keep it to a handful (about 200 MiB "
                       "each). Their CPU and memory are the machine's. Elsewhere a real node is a node like any other.")

    def node_names(self, switch: str) -> list[str]:
        return [(f"{switch}-{self.name}" if self.count == 1 else f"{switch}-{self.name}-{i}").lower()
                for i in range(self.count)]


class TopologySwitch(Model):
    name: LabelValue = Field(description="Switch name (the switch label's value on its nodes).")
    uplink_gbps: float = Field(ge=MIN_GBPS, le=100000, description="Uplink capacity to the spine in Gbps.")
    nodes: list[NodeGroup] = Field(default=[], description="Node groups cabled to this switch.")


class TopologyFile(Model):
    """A facility's physical layout: switches and the nodes behind them."""

    switch_label: LabelKey = Field(default="switchyard.dev/switch", description="Label carrying the switch name.")
    nvme_label: LabelKey = Field(default="switchyard.dev/nvme", description="Label marking NVMe nodes (value: disk count).")
    nic_gbps_annotation: LabelKey = Field(default="switchyard.dev/nic-gbps", description="Annotation carrying the NIC speed.")
    wan_gbps: float = Field(default=100.0, ge=MIN_GBPS, description="Capacity towards the origins, Gbps.")
    switches: list[TopologySwitch] = Field(min_length=1, description="Switches and their nodes.")

    def node_infos(self) -> list[NodeInfo]:
        """The nodes this file describes, as the operator would see them."""
        out = []
        for switch in self.switches:
            for group in switch.nodes:
                # What a group's nodes share is worked out once per group (a 20,000-node file has 800 groups).
                labels = {**group.labels, self.switch_label: switch.name}
                if group.nvme_disks:
                    labels[self.nvme_label] = str(group.nvme_disks)
                labels = dict(sorted(labels.items()))
                taints = node_taints(t.to_wire() for t in group.taints)
                cpu_millis, memory_bytes = group.cpu * 1000, group.memory_gib * GIB
                out.extend(NodeInfo(name=name, labels=dict(labels), nic_gbps=group.nic_gbps, cpu_millis=cpu_millis,
                                    memory_bytes=memory_bytes, pods=group.pods, taints=taints)
                           for name in group.node_names(switch.name))
        return out

    def network(self) -> Network:
        """The network section a facility on this topology would declare."""
        return Network(
            switch_label=self.switch_label, nic_gbps_annotation=self.nic_gbps_annotation, wan_gbps=self.wan_gbps,
            switches=[{"name": s.name, "uplink_gbps": s.uplink_gbps} for s in self.switches],
        )


class InputError(ValueError):
    """A file an admin hands the command line that cannot be used; the message names the file and the field."""


class TopologyError(InputError):
    """A topology file that cannot be used; the message names the field."""


def _repeated(names: Iterable[str]) -> list[str]:
    """Names that occur more than once, sorted (one pass: 20,000 nodes must not cost a quadratic count)."""
    counts = Counter(names)
    return sorted(n for n, c in counts.items() if c > 1)


def load_topology(data: Mapping, source: str = "topology") -> TopologyFile:
    """Validate a parsed topology file, with errors that name the field."""
    try:
        topo = TopologyFile.model_validate(data)
    except ValidationError as exc:
        raise TopologyError(format_validation_error(exc, source)) from None
    dupes = _repeated(s.name for s in topo.switches)
    if dupes:
        raise TopologyError(f"{source}: switches: duplicate switch name(s) {', '.join(dupes)}")
    dupes = _repeated(name for s in topo.switches for group in s.nodes for name in group.node_names(s.name))
    if dupes:
        raise TopologyError(f"{source}: switches[].nodes: duplicate node name(s) {', '.join(dupes[:5])}")
    return topo


def format_validation_error(exc: ValidationError, source: str) -> str:
    """pydantic errors as 'source: a.b[2].c: message' lines."""
    lines = []
    for err in exc.errors():
        path = ""
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        lines.append(f"{source}: {path or '(root)'}: {err['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


# ---------------------------------------------------------------- files an admin hands the command line

def read_yaml(path: str) -> Any:
    """A YAML file's one document; an unreadable file or a syntax error is an InputError naming the file."""
    try:
        # libyaml's loader where the wheel has it: PyYAML's pure-Python one costs ~0.3 s of CPU on a
        # 20,000-node topology file, the C one a sixth of that, same documents.
        return yaml.load(pathlib.Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise InputError(f"{path}:{where} not valid YAML: {problem}") from None


def load_facility(path: str) -> tuple[dict, AnalysisFacilitySpec]:
    """An AnalysisFacility file: the object and its validated spec. Refuses, naming the field, what the API server
    would refuse: another kind, a missing or unusable metadata.name, a spec its schema rejects."""
    doc = read_yaml(path)
    if not isinstance(doc, dict) or doc.get("kind") != "AnalysisFacility":
        raise InputError(f"{path}: kind: expected an AnalysisFacility object")
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if name is None:
        raise InputError(f"{path}: metadata.name: missing: the facility's name prefixes every object it makes")
    if not isinstance(name, str) or not re.match(OBJECT_NAME_PATTERN, name) or len(name) > OBJECT_NAME_MAX:
        raise InputError(f"{path}: metadata.name: {name!r} is not a facility name: at most {OBJECT_NAME_MAX} "
                         "characters, lower-case letters, digits and '-', starting with a letter")
    namespace = metadata.get("namespace", "default")
    if not isinstance(namespace, str) or not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", namespace):
        raise InputError(f"{path}: metadata.namespace: {namespace!r} is not a namespace name")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise InputError(f"{path}: spec: expected a mapping with the facility's network, pools and fleets")
    try:
        return doc, AnalysisFacilitySpec.model_validate(spec)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, f"{path}: spec")) from None
