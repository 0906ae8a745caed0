"""Shared pieces of every switchyard API model.

The models are the single source of truth: the CRD generator turns them into
OpenAPI schemas, and the operator validates every object through them before
anything is planned or built.
"""

from __future__ import annotations

from typing import Annotated, Iterable, Literal

import functools
import ipaddress
import os
import re

import celpy
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

GROUP = "switchyard.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# The name of a switchyard object: a DNS-1035 label (it names a pool's Service
# itself and prefixes every child's name and label values), short enough that
# '<facility>-<pool>-<switch>' rarely needs shortening.
OBJECT_NAME_MAX = 40
OBJECT_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

_LABEL_KEY_PATTERN = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE_PATTERN = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
# DNS-1123 label: what Kubernetes accepts as a name that also becomes part of
# child object names and label values.
DnsLabel = Annotated[
    str,
    StringConstraints(min_length=1, max_length=40, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
]
# A label value (e.g. a switch name as it appears on nodes).
LabelValue = Annotated[
    str,
    StringConstraints(min_length=1, max_length=63, pattern=rf"^{_LABEL_VALUE_PATTERN}$"),
]
# A qualified label or annotation key such as "switchyard.dev/switch".
LabelKey = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=253,
        pattern=rf"^{_LABEL_KEY_PATTERN}$",
    ),
]
# A TCP port number written inside an address (1-65535).
PORT_PATTERN = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# A container image reference, by the distribution reference grammar: an
# optional registry host (with port), lower-case path components joined by one
# separator each ('.', '_', '__' or dashes), then a tag and/or a sha256 digest.
# No '..', empty or look-alike segments, so an allowlist prefix cannot be dodged.
_IMAGE_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_REGISTRY = rf"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*(:{PORT_PATTERN})?"
IMAGE_PATTERN = (rf"^({_REGISTRY}/)?{_IMAGE_COMPONENT}(/{_IMAGE_COMPONENT})*"
                 r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$")
ImageRef = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=IMAGE_PATTERN)]
# A DNS name (labels of at most 63 characters) or an IPv4 address; an IPv6
# literal is hex digits and colons, checked in full by the models (_check_host).
DNS_NAME_PATTERN = r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*"


def _check_host(host: str) -> str:
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is neither a DNS name nor an IP address (give a port in its own field)") from None
    return host


HostName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253, pattern=rf"^({DNS_NAME_PATTERN}|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*)$"),
    AfterValidator(_check_host),
]
Port = Annotated[int, Field(ge=1, le=65535)]


def _check_cidr(text: str) -> str:
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an address range (CIDR): {exc}") from None
    return text


# An address range ('10.1.0.0/16', 'fd00:1::/64'): the pattern is what the API server checks, the model
# checks it in full (an octet above 255, host bits set) and so refuses it with Ready=False InvalidSpec.
Cidr = Annotated[
    str,
    StringConstraints(min_length=3, max_length=49, pattern=r"^([0-9.]+/[0-9]{1,2}|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*/[0-9]{1,3})$"),
    AfterValidator(_check_cidr),
]



def wire_name(field: str) -> str:
    """snake_case → camelCase, with binary units spelled as users write them (memoryGiB)."""
    name = to_camel(field)
    for unit in ("Kib", "Mib", "Gib", "Tib"):
        if name.endswith(unit):
            name = name[: -len(unit)] + unit[0] + "iB"
    return name


class Model(BaseModel):
    """Base for all API models: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=wire_name,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )

    def to_wire(self) -> dict:
        """The object as the API server stores it (camelCase, no unset Nones)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    @model_validator(mode="after")
    def _check_cel_rules(self):
        """Evaluate this model's CEL rules, the very ones the CRD carries, so
        offline tools refuse what the API server would refuse."""
        extra = self.model_config.get("json_schema_extra") or {}
        rules = extra.get("x-kubernetes-validations", []) if isinstance(extra, dict) else []
        for rule in rules:
            # Only the fields the rule reads go to CEL: converting a facility's 1,000 switches for a rule
            # about its fleets would cost more than the rest of its validation.
            fields = _fields_read(rule["rule"])
            wire = self.to_wire() if fields is None else self.model_dump(
                by_alias=True, exclude_none=True, mode="json", include=self._fields_by_wire_name(fields))
            if not _cel_program(rule["rule"]).evaluate({"self": celpy.json_to_cel(wire)}):
                raise ValueError(rule["message"])
        return self

    @classmethod
    def _fields_by_wire_name(cls, wire_names: frozenset[str]) -> set[str]:
        return {name for name, info in cls.model_fields.items() if (info.alias or name) in wire_names}

    @model_validator(mode="after")
    def _check_list_map_keys(self):
        """A list the CRD declares `x-kubernetes-list-type: map` holds each key once: the API server refuses a
        duplicate, and so do offline tools (two fleets of one name would plan twice and render twice)."""
        for name, info in type(self).model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            if extra.get("x-kubernetes-list-type") != "map":
                continue
            keys = extra["x-kubernetes-list-map-keys"]
            seen: set[tuple] = set()
            for item in getattr(self, name) or ():
                key = tuple(getattr(item, k) for k in keys)
                if key in seen:
                    raise ValueError(f"{wire_name(name)}: duplicate {', '.join(keys)} {', '.join(map(str, key))}: "
                                     "each must be unique")
                seen.add(key)
        return self


@functools.lru_cache(maxsize=None)
def _fields_read(rule: str) -> frozenset[str] | None:
    """The fields of `self` a CEL rule reads ('self.fleets', 'has(self.pool)'); None when it reads `self`
    whole (then every field goes to CEL)."""
    if re.search(r"\bself\b(?!\.\w)", rule):
        return None
    return frozenset(re.findall(r"\bself\.(\w+)", rule))


@functools.lru_cache(maxsize=None)
def _cel_program(rule: str):
    _cel_parser()
    env = celpy.Environment()
    return env.program(env.compile(rule))


@functools.lru_cache(maxsize=None)
def _cel_parser() -> None:
    """celpy builds its one parser (CELParser.CEL_PARSER) from the CEL grammar on first use: ~0.1 s of CPU
    for the LALR tables in every process that checks a rule, a twentieth of `switchyard plan` at 20,000
    nodes. Built here as celpy builds it, with lark's own cache of those tables in the user's cache
    directory (read back in ~5 ms; lark rebuilds and rewrites it when the grammar, its options, lark or
    Python change, and carries on without it when it cannot read or write it). Where that directory
    cannot be made, celpy builds the parser itself."""
    from celpy import celparser

    path = _user_cache_file("cel-grammar.lark")
    lark = getattr(celparser, "Lark", None)
    if celparser.CELParser.CEL_PARSER is not None or path is None or lark is None:
        return
    celparser.Lark = functools.partial(lark, cache=path)
    try:
        celparser.CELParser()
    finally:
        celparser.Lark = lark


def _user_cache_file(name: str) -> str | None:
    """A file in the user's own cache directory ($XDG_CACHE_HOME/switchyard, else ~/.cache/switchyard; made
    for the user alone when it is not there); None when there is none to write (a read-only home, as in the
    operator's image)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):     # no home ('~' left as it is for a user without a passwd entry)
        return None
    directory = os.path.join(base, "switchyard")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return os.path.join(directory, name) if os.access(directory, os.W_OK) else None


def cel(rule: str, message: str, field_path: str | None = None) -> dict:
    """One CEL validation rule, as the CRD generator places it."""
    out = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out


def rules(*items: dict) -> ConfigDict:
    """Model config carrying CEL rules into the generated schema."""
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": list(items)})


class ObjectRef(Model):
    """A reference to another switchyard object in the same namespace."""

    name: DnsLabel = Field(description="Name of the referenced object, in the same namespace.")


class Condition(Model):
    """A standard Kubernetes condition."""

    type: str = Field(description="Condition type: Ready, Progressing or Degraded.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="A CamelCase word that explains the status.")
    message: str = Field(default="", description="A human-readable explanation.")
    observed_generation: int = Field(default=0, description="The .metadata.generation the condition was computed from.")
    last_transition_time: str = Field(default="", description="When the status last changed (RFC 3339).")


class CommonStatus(Model):
    """Status fields every kind carries."""

    observed_generation: int = Field(default=0, description="The .metadata.generation last reconciled.")
    conditions: list[Condition] = Field(default=[], description="Ready, Progressing and Degraded conditions.")


# --------------------------------------------------------------- taints, tolerations

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
# The effects that keep a pod off a node; PreferNoSchedule only steers the scheduler.
REPELLING_EFFECTS = ("NoSchedule", "NoExecute")
MAX_TOLERATIONS = 16


class Taint(Model):
    """A node taint (as in a Node's spec.taints)."""

    key: LabelKey = Field(description="Taint key, e.g. 'dedicated'.")
    value: Annotated[str, StringConstraints(max_length=63, pattern=rf"^({_LABEL_VALUE_PATTERN})?$")] = Field(
        default="", description="Taint value, e.g. 'xcache'.")
    effect: TaintEffect = Field(description="NoSchedule, PreferNoSchedule or NoExecute.")


class Toleration(Model):
    """A Kubernetes toleration: lets the pods onto nodes with a matching taint."""

    model_config = rules(
        cel("self.operator != 'Exists' || self.value == ''", "a toleration with operator 'Exists' must not set a value", ".value"),
        cel("self.key != '' || self.operator == 'Exists'", "a toleration with an empty key must use operator 'Exists'", ".operator"),
        cel("!has(self.tolerationSeconds) || self.effect == 'NoExecute'",
            "tolerationSeconds needs effect 'NoExecute'", ".tolerationSeconds"),
    )

    key: Annotated[str, StringConstraints(max_length=253, pattern=rf"^({_LABEL_KEY_PATTERN})?$")] = Field(
        default="", description="Taint key to tolerate; empty (with operator Exists) tolerates every taint.")
    operator: Literal["Equal", "Exists"] = Field(
        default="Equal", description="Equal: the taint's value must equal value. Exists: any value.")
    value: Annotated[str, StringConstraints(max_length=63, pattern=rf"^({_LABEL_VALUE_PATTERN})?$")] = Field(
        default="", description="Taint value to tolerate (operator Equal only).")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="", description="Taint effect to tolerate; empty tolerates every effect.")
    toleration_seconds: int | None = Field(
        default=None, ge=0, le=31_536_000,
        description="With effect NoExecute: how long the pod stays bound after the taint appears; unset: forever.")

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' matching rule (ToleratesTaint): effect, then key, then value by operator."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value

    def to_pod(self) -> dict:
        """The toleration as a pod spec carries it (empty fields left out, as the API server stores them)."""
        return {k: v for k, v in self.to_wire().items() if v != ""}


def admits(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> bool:
    """Whether pods with these tolerations may be scheduled onto a node with these taints:
    every NoSchedule or NoExecute taint is tolerated (PreferNoSchedule never keeps a pod off)."""
    tolerations = tuple(tolerations)
    return all(any(t.tolerates(taint) for t in tolerations) for taint in taints if taint.effect in REPELLING_EFFECTS)


def tolerations_field(what: str):
    """The `tolerations` field of a kind whose pods may need to land on tainted nodes."""
    return Field(
        default=[], max_length=MAX_TOLERATIONS,
        description=f"Tolerations of {what}, as in a pod spec. The planner only places them on nodes whose "
        "NoSchedule and NoExecute taints these tolerate.",
    )
