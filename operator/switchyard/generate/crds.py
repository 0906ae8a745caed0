"""Turn the pydantic models into structural CustomResourceDefinitions.

Kubernetes wants OpenAPI v3.0 without `$ref`, with `exclusiveMinimum` as a
boolean, and with defaults on object fields so nested defaults apply; this
module rewrites pydantic's JSON Schema into that shape.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from ..api import GROUP, KINDS, VERSION, Kind
from ..api.base import OBJECT_NAME_MAX, OBJECT_NAME_PATTERN

_DROP = {"title", "discriminator"}


def _resolve(node: Any, defs: dict) -> Any:
    """Inline every $ref and collapse Optional[X] to X."""
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").split("/")[-1]])
        target.update(node)  # field-level description, default, extensions win
        node = target
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        node = {**_resolve(inner, defs), **node}
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            del node["anyOf"]
            node = {**_resolve(options[0], defs), **node}
    return {k: _resolve(v, defs) for k, v in node.items() if k not in ("$defs",)}


def _to_openapi(node: Any) -> Any:
    """Rewrite JSON Schema 2020 keywords into the Kubernetes OpenAPI v3.0 subset."""
    if isinstance(node, list):
        return [_to_openapi(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    rules = list(node.get("x-kubernetes-validations", []))
    for key, value in node.items():
        if key in _DROP or key == "x-kubernetes-validations" or (key == "default" and value is None):
            continue
        if key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "patternProperties":
            # Structural schemas have no patternProperties. A CEL check of
            # every key costs more than the API server's budget allows inside
            # lists, so keys are checked by the models (Ready=False InvalidSpec).
            (_, value_schema), = value.items()
            out["additionalProperties"] = _to_openapi(value_schema)
        elif key == "propertyNames":
            continue  # see patternProperties
        elif key == "properties":
            out[key] = {name: _to_openapi(sub) for name, sub in value.items()}
        else:
            out[key] = _to_openapi(value)
    if out.get("type") == "object" and "properties" in out:
        out.pop("additionalProperties", None)
        raw_props = node.get("properties", {})
        for name, sub in out["properties"].items():
            # An object field with a default factory gets its fully defaulted
            # value, so the API server fills it in (and its CEL rules, which
            # run on defaults too, see every key). Optional sections (default
            # None) stay absent.
            if sub.get("type") == "object" and "properties" in sub and "default" not in raw_props.get(name, {}) \
                    and name not in out.get("required", []):
                default = _object_default(sub)
                if default is not None:
                    sub["default"] = default
    if rules:
        out["x-kubernetes-validations"] = rules
    return out


def _object_default(schema: dict) -> dict | None:
    """The value the API server would build from nested defaults, or None if a required field has none."""
    out = {}
    for name, sub in schema.get("properties", {}).items():
        if "default" in sub:
            out[name] = sub["default"]
        elif name in schema.get("required", []):
            return None
    return out


def model_schema(model: type[BaseModel]) -> dict:
    """The structural OpenAPI schema of one model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _to_openapi(_resolve(raw, defs))


def crd(kind: Kind) -> dict:
    """The CustomResourceDefinition of one kind."""
    spec_schema = model_schema(kind.spec)
    spec_schema["description"] = kind.spec.__doc__.strip()
    status_schema = model_schema(kind.status)
    status_schema["description"] = kind.status.__doc__.strip()
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{kind.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "switchyard"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": list(kind.short_names),
                "categories": ["switchyard"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": list(kind.printer_columns),
                    "subresources": subresources,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": kind.description,
                            "required": ["spec"],
                            "x-kubernetes-validations": [
                                {"rule": f"size(self.metadata.name) <= {OBJECT_NAME_MAX}",
                                 "message": f"metadata.name must be at most {OBJECT_NAME_MAX} characters (it prefixes child object names)"},
                                {"rule": f"self.metadata.name.matches('{OBJECT_NAME_PATTERN}')",
                                 "message": "metadata.name must be a DNS-1035 label: lower-case letters, digits and '-', "
                                            "starting with a letter (it names Services and prefixes child names)"},
                            ],
                            "properties": {
                                "apiVersion": {"type": "string", "description": "APIVersion of this object."},
                                "kind": {"type": "string", "description": "Kind of this object."},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def all_crds() -> list[dict]:
    return [crd(k) for k in KINDS]
