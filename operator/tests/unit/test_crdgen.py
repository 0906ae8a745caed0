"""CRD generation: structural, no $ref, CEL rules and defaults where Kubernetes needs them."""

import json

import pytest

from switchyard.api import KINDS
from switchyard.generate.crds import crd, model_schema
from switchyard.api.analysisfacility import AnalysisFacilitySpec
from switchyard.api.workerfleet import WorkerFleetSpec
from switchyard.api.xcachepool import XCachePoolSpec


def walk(node, path=""):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(kind):
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    text = json.dumps(schema)
    for forbidden in ("$ref", "anyOf", "allOf", "oneOf", "patternProperties", "propertyNames", '"title"', "$defs"):
        assert forbidden not in text, forbidden
    for path, node in walk(schema["properties"]["spec"]):
        if "properties" in node.get("properties", {}) or path.endswith(".properties"):
            continue
        if path.endswith("x-kubernetes-validations") or ".x-kubernetes" in path:
            continue
        if isinstance(node, dict) and ("description" in node and "type" not in node):
            pytest.fail(f"{path} has no type")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_spec_field_is_described(kind):
    schema = model_schema(kind.spec)
    for path, node in walk(schema):
        for name, prop in (node.get("properties") or {}).items():
            assert prop.get("description"), f"{kind.kind}{path}.{name} has no description"


def test_cross_field_rules_are_cel():
    pool = model_schema(XCachePoolSpec)
    rules = [r["rule"] for r in pool["properties"]["pfc"]["x-kubernetes-validations"]]
    assert "self.lowWatermark < self.highWatermark" in rules
    fleet = model_schema(WorkerFleetSpec)
    assert any("has(self.dask) != has(self.taskvine)" == r["rule"] for r in fleet["x-kubernetes-validations"])


def test_switch_names_are_a_map_list_so_duplicates_are_refused():
    switches = model_schema(AnalysisFacilitySpec)["properties"]["network"]["properties"]["switches"]
    assert switches["x-kubernetes-list-type"] == "map"
    assert switches["x-kubernetes-list-map-keys"] == ["name"]


def test_exclusive_minimum_is_openapi_v3_0():
    target = model_schema(AnalysisFacilitySpec)["properties"]["targetGbps"]
    assert target["minimum"] == 0 and target["exclusiveMinimum"] is True
    # an inclusive floor stays one (the capacities the planner divides by, at least 0.001 Gbps)
    uplink = model_schema(AnalysisFacilitySpec)["properties"]["network"]["properties"]["switches"]["items"]["properties"]["uplinkGbps"]
    assert uplink["minimum"] == 0.001 and "exclusiveMinimum" not in uplink


def test_optional_objects_default_to_empty_so_nested_defaults_apply():
    pool = model_schema(XCachePoolSpec)["properties"]
    assert pool["pfc"]["default"]["lowWatermark"] == 0.9
    assert pool["pfc"]["properties"]["blockSizeKiB"]["default"] == 1024
    # Engine sections are exclusive: they must not be defaulted into existence.
    fleet = model_schema(WorkerFleetSpec)["properties"]
    assert "default" not in fleet["dask"] and "default" not in fleet["taskvine"]


def test_workerfleet_has_scale_subresource():
    kind = next(k for k in KINDS if k.kind == "WorkerFleet")
    scale = crd(kind)["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                     "labelSelectorPath": ".status.selector"}


def test_maps_are_bounded_for_the_cel_cost_budget():
    selector = model_schema(XCachePoolSpec)["properties"]["nodeSelector"]
    assert selector["additionalProperties"]["type"] == "string"
    assert selector["maxProperties"] == 16
