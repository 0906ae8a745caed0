"""The exporters' client map: from Nodes to a ConfigMap, mounted in the sidecar, outside the config checksum."""

from __future__ import annotations

from switchyard.api import XCachePoolSpec
from switchyard.builders.xcachepool import CHECKSUM_ANNOTATION, build_pool, client_map_name
from switchyard.observe.clientmap import KEY, ClientMap
from switchyard.desired.xcachepool import client_networks
from switchyard.observe.exporterspec import CLIENT_MAP_DIR
from switchyard.topology import node_info

LABEL = "switchyard.dev/switch"
SPEC = XCachePoolSpec.model_validate({"facilityRef": {"name": "af"}, "origin": {"host": "origin.example.org"},
                                      "storage": {"dataPaths": ["/mnt/a"], "metaPath": "/mnt/meta"}})


def _node(name: str, switch: str | None, ip: str, pod_cidr: str | None) -> dict:
    return {"metadata": {"name": name, "labels": {LABEL: switch} if switch else {}},
            "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr] if pod_cidr else []},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_nodes_become_a_map_of_switch_to_addresses_and_pod_cidrs():
    nodes = [node_info(_node("n1", "sw1", "10.0.0.1", "10.244.1.0/24")),
             node_info(_node("n2", "sw2", "10.0.0.2", "10.244.2.0/24")),
             node_info(_node("n3", "sw1", "10.0.0.3", None)),
             node_info(_node("n5", "sw2", "not-an-ip", "10.244.5.0/99")),     # garbage: left out, never raises
             node_info(_node("n4", None, "10.0.0.4", "10.244.4.0/24"))]   # no switch label: not in the map
    assert client_networks(nodes, LABEL) == {"sw1": ["10.0.0.1", "10.0.0.3", "10.244.1.0/24"],
                                             "sw2": ["10.0.0.2", "10.244.2.0/24"]}


def test_the_map_is_a_child_mounted_in_the_exporter_and_outside_the_checksum():
    hosts = {"sw1": ["n1"]}
    first = build_pool("p", SPEC, hosts, LABEL, "img:1", clients={"sw1": ["10.0.0.1"], "sw2": ["10.244.2.0/24"]})
    churned = build_pool("p", SPEC, hosts, LABEL, "img:1", clients={"sw1": ["10.0.0.9"]})
    [clients] = [o for o in first if o["metadata"]["name"] == client_map_name("p")]
    parsed = ClientMap.from_json(clients["data"][KEY])
    assert parsed.switch_of("[::10.244.2.7]") == "sw2" and parsed.switch_of("[::10.0.0.1]") == "sw1"
    sts = next(o for o in first if o["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    exporter = next(c for c in pod["containers"] if c["name"] == "exporter")
    mount = next(m for m in exporter["volumeMounts"] if m["name"] == "clients")
    assert mount["mountPath"] == CLIENT_MAP_DIR and "subPath" not in mount
    assert f"{CLIENT_MAP_DIR}/{KEY}" in exporter["args"]
    volume = next(v for v in pod["volumes"] if v["name"] == "clients")
    assert volume["configMap"] == {"name": client_map_name("p"), "optional": True}
    # Node churn changes the map, never the pods' checksum (no rolling restart of cache hosts).
    annotation = lambda objs: next(o for o in objs if o["kind"] == "StatefulSet")["spec"]["template"]["metadata"][  # noqa: E731
        "annotations"][CHECKSUM_ANNOTATION]
    assert annotation(first) == annotation(churned)
    assert [o for o in churned if o["metadata"]["name"] == client_map_name("p")][0]["data"] != clients["data"]
