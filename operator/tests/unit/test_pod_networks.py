"""Pod address ranges of network plugins with an IPAM of their own (Calico's BlockAffinities, Cilium's
CiliumNodes) reach the pools' client maps under their node's switch, and a cluster without either plugin
is read as before: the lists' 404s give no ranges, and are not repeated within READ_SECONDS."""

from __future__ import annotations

import logging

import pytest

from switchyard.apply import ApiError
from switchyard.desired.xcachepool import client_networks
from switchyard.handlers import podnetworks
from switchyard.handlers.memory import PoolMemory
from switchyard.topology import (calico_block_networks, cilium_node_networks, node_info, pod_networks_by_node,
                                 with_pod_networks)

LABEL = "switchyard.dev/switch"


def block(node: str, cidr: str, state: str = "confirmed", **spec) -> dict:
    """A BlockAffinity as Calico writes it (libcalico-go's CRD: spec.node, cidr, state, deleted as a string)."""
    return {"apiVersion": "crd.projectcalico.org/v1", "kind": "BlockAffinity",
            "metadata": {"name": f"{node}-{cidr.replace('/', '-')}"},
            "spec": {"node": node, "cidr": cidr, "state": state, "deleted": "false", **spec}}


def cilium_node(name: str, pod_cidrs=(), pools=()) -> dict:
    ipam = {"podCIDRs": list(pod_cidrs)}
    if pools:
        ipam["pools"] = {"allocated": [{"pool": "default", "cidrs": list(pools)}]}
    return {"apiVersion": "cilium.io/v2", "kind": "CiliumNode", "metadata": {"name": name}, "spec": {"ipam": ipam}}


def node(name: str, switch: str | None, address: str, pod_cidr: str | None = None):
    return node_info({"metadata": {"name": name, "labels": {LABEL: switch} if switch else {}},
                      "spec": {"podCIDR": pod_cidr} if pod_cidr else {},
                      "status": {"addresses": [{"type": "InternalIP", "address": address}],
                                 "conditions": [{"type": "Ready", "status": "True"}]}})


def test_a_confirmed_host_block_is_its_nodes_and_no_other_is():
    assert calico_block_networks(block("n1", "192.168.10.0/26")) == ("n1", ("192.168.10.0/26",))
    assert calico_block_networks(block("n1", "192.168.10.0/26", type="host")) == ("n1", ("192.168.10.0/26",))
    for other in (block("n1", "192.168.10.0/26", "pending"), block("n1", "192.168.10.0/26", "pendingDeletion"),
                  block("n1", "192.168.10.0/26", deleted="true"), block("n1", "192.168.10.0/26", deleted=True),
                  block("n1", "192.168.10.0/26", type="virtual"), block("", "192.168.10.0/26"),
                  {"spec": {"node": "n1", "state": "confirmed"}}, {}):
        assert calico_block_networks(other) is None, other


def test_a_cilium_nodes_pod_cidrs_are_its_nodes():
    assert cilium_node_networks(cilium_node("n1", ["10.0.3.0/24", "fd00:3::/96"])) == (
        "n1", ("10.0.3.0/24", "fd00:3::/96"))
    assert cilium_node_networks(cilium_node("n1", pools=["10.20.0.0/27"])) == ("n1", ("10.20.0.0/27",))
    assert cilium_node_networks(cilium_node("n1")) is None  # not given its CIDRs yet
    assert cilium_node_networks({"metadata": {"name": "n1"}}) is None
    # what the CRD's schema would refuse is none, never an error (a reconcile reads every object)
    for odd in ({"metadata": {"name": "n1"}, "spec": {"ipam": {"podCIDRs": "10.0.3.0/24"}}},
                {"metadata": {"name": "n1"}, "spec": {"ipam": {"pools": {"allocated": ["x", None, {"cidrs": 5}]}}}},
                {"metadata": "n1", "spec": []}, {"metadata": {"name": 7}, "spec": {"ipam": {"podCIDRs": ["10.0.3.0/24"]}}}):
        assert cilium_node_networks(odd) is None, odd
    assert calico_block_networks({"spec": {"node": ["n1"], "cidr": "192.168.10.0/26", "state": "confirmed"}}) is None


def test_a_nodes_blocks_gather_under_it():
    found = [calico_block_networks(block("n1", "192.168.10.64/26")), calico_block_networks(block("n1", "192.168.10.0/26")),
             calico_block_networks(block("n2", "192.168.11.0/26", "pending")), cilium_node_networks(cilium_node("n3", ["10.0.3.0/24"]))]
    assert pod_networks_by_node(found) == {"n1": ("192.168.10.0/26", "192.168.10.64/26"), "n3": ("10.0.3.0/24",)}


def test_the_ranges_join_their_nodes_client_networks_and_the_map_places_them_on_its_switch():
    nodes = [node("n1", "sw1", "10.0.0.1", "10.244.1.0/24"), node("n2", "sw2", "10.0.0.2"),
             node("n3", None, "10.0.0.3")]
    ranges = {"n1": ("192.168.10.0/26", "192.168.10.64/26"), "n2": ("192.168.11.0/26",), "n3": ("192.168.12.0/26",),
              "gone": ("192.168.13.0/26",)}
    merged = with_pod_networks(nodes, ranges)
    assert merged == nodes  # client networks are no part of a NodeInfo's equality: nothing re-plans
    assert merged[0].client_networks == ("10.0.0.1", "10.244.1.0/24", "192.168.10.0/26", "192.168.10.64/26")
    assert client_networks(merged, LABEL) == {
        "sw1": ["10.0.0.1", "10.244.1.0/24", "192.168.10.0/26", "192.168.10.64/26"],
        "sw2": ["10.0.0.2", "192.168.11.0/26"]}   # a node without the switch label is in no switch, as before
    assert with_pod_networks(nodes, {}) == nodes and [n.client_networks for n in with_pod_networks(nodes, {})] == [
        n.client_networks for n in nodes]


class FakeKube:
    def __init__(self, answers: dict):
        self.answers, self.calls = answers, []

    def list(self, kind, namespace=None, selector=None, keep=None):
        self.calls.append(kind)
        answer = self.answers[kind]
        if isinstance(answer, ApiError):
            raise answer
        return [keep(obj) for obj in answer]


def test_without_either_plugins_crd_there_are_no_ranges_and_no_list_again_within_the_interval(monkeypatch, caplog):
    missing = ApiError(404, "NotFound", "the server could not find the requested resource")
    fake = FakeKube({"BlockAffinity": missing, "CiliumNode": missing})
    clock = [1000.0]
    monkeypatch.setattr(podnetworks, "kube", lambda: fake)
    monkeypatch.setattr(podnetworks.time, "monotonic", lambda: clock[0])
    kept = PoolMemory("XCachePool", "ns", "pool")
    logger = logging.getLogger("test.podnetworks")
    with caplog.at_level(logging.WARNING):
        assert podnetworks.read_pod_networks(kept, logger) == {}
        clock[0] += podnetworks.READ_SECONDS - 1
        assert podnetworks.read_pod_networks(kept, logger) == {}
    assert fake.calls == ["BlockAffinity", "CiliumNode"] and not caplog.records
    clock[0] += 1
    fake.answers["BlockAffinity"] = [block("n1", "192.168.10.0/26"), block("n1", "192.168.10.64/26", "pending")]
    assert podnetworks.read_pod_networks(kept, logger) == {"n1": ("192.168.10.0/26",)}


def test_a_refused_list_keeps_what_the_last_one_found_and_warns_once(monkeypatch, caplog):
    fake = FakeKube({"BlockAffinity": [block("n1", "192.168.10.0/26")], "CiliumNode": [cilium_node("n2", ["10.0.2.0/24"])]})
    clock = [0.0]
    monkeypatch.setattr(podnetworks, "kube", lambda: fake)
    monkeypatch.setattr(podnetworks.time, "monotonic", lambda: clock[0])
    kept = PoolMemory("XCachePool", "ns", "pool")
    logger = logging.getLogger("test.podnetworks")
    assert podnetworks.read_pod_networks(kept, logger) == {"n1": ("192.168.10.0/26",), "n2": ("10.0.2.0/24",)}
    fake.answers["BlockAffinity"] = ApiError(403, "Forbidden", "cannot list resource \"blockaffinities\"")
    fake.answers["CiliumNode"] = [cilium_node("n2", ["10.0.9.0/24"])]
    clock[0] += podnetworks.READ_SECONDS
    with caplog.at_level(logging.WARNING):
        assert podnetworks.read_pod_networks(kept, logger) == {"n1": ("192.168.10.0/26",), "n2": ("10.0.9.0/24",)}
        clock[0] += podnetworks.READ_SECONDS   # refused again: not warned again
        assert podnetworks.read_pod_networks(kept, logger) == {"n1": ("192.168.10.0/26",), "n2": ("10.0.9.0/24",)}
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["BlockAffinity objects not listed"]
    assert fake.calls.count("BlockAffinity") == 3
    fake.answers["BlockAffinity"] = []   # granted again, and the blocks gone
    clock[0] += podnetworks.READ_SECONDS
    assert podnetworks.read_pod_networks(kept, logger) == {"n2": ("10.0.9.0/24",)}


def test_a_plain_text_404_is_an_api_error_so_a_cluster_without_the_plugins_reads_none(monkeypatch):
    """kube-apiserver answers a path of an API group it does not serve with a plain-text "404 page not found"
    (a JSON Status only since kubernetes/kubernetes#138219): the client must make it ApiError(404), which
    read_pod_networks takes as "not installed", not a JSON error that fails every pool reconcile."""
    from types import SimpleNamespace

    from switchyard.apply import Kube

    kube = Kube.__new__(Kube)
    kube.connection = SimpleNamespace(host="https://api.example", authorization=lambda: None)
    kube.pool = SimpleNamespace(request=lambda *a, **k: SimpleNamespace(status=404, data=b"404 page not found\n"))
    monkeypatch.setattr(podnetworks, "kube", lambda: kube)
    kept = PoolMemory("XCachePool", "ns", "pool")
    assert podnetworks.read_pod_networks(kept, logging.getLogger("test.podnetworks")) == {}
    with pytest.raises(ApiError) as refused:
        kube.list("CiliumNode")
    assert refused.value.status == 404 and refused.value.message == "404 page not found\n"
