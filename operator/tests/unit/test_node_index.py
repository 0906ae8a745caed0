"""The node index (handlers/indexes.py): a Node's client networks changing must change its indexed value.

kopf keeps a stored index value that compares equal to the new one, and
NodeInfo leaves its client networks out of its equality; without the pairing a
pod CIDR set after the operator started never reached the pools' client maps.
"""

from __future__ import annotations

from switchyard.handlers.indexes import node_index, nodes_of


def node(pod_cidr: str | None = None, address: str = "10.0.0.5") -> dict:
    return {"metadata": {"name": "rack-b-worker", "labels": {"switchyard.dev/switch": "rack-b"}},
            "spec": {"podCIDR": pod_cidr} if pod_cidr else {},
            "status": {"addresses": [{"type": "InternalIP", "address": address}],
                       "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def test_a_pod_cidr_or_address_change_changes_the_indexed_value():
    before = node_index(body=node())
    assert node_index(body=node("10.214.0.2/32")) != before
    assert node_index(body=node(address="10.0.0.6")) != before
    assert node_index(body=node()) == before


def test_nodes_of_gives_the_node_infos_with_their_networks():
    index = {"rack-b-worker": [node_index(body=node("10.214.0.2/32"))["rack-b-worker"]]}
    [info] = nodes_of(index)
    assert info.name == "rack-b-worker" and info.client_networks == ("10.0.0.5", "10.214.0.2/32")
