"""A Calico block reaches the pool's client map under its node's switch, on a real kube-apiserver.

A local cluster (kwokctl: real kube-apiserver, etcd; kwok nodes from
e2e/topologies/mini.yaml) gets a minimal BlockAffinity CRD (Calico's group,
version and kind; the schema keeps unknown fields) and two blocks of a
rack-b worker: one `confirmed`, one `pending`. The operator (`switchyard
run`) reconciles a facility; its pool's clients ConfigMap must list the
confirmed block under rack-b and the pending one nowhere: the path a Calico
site's pod addresses take (handlers/podnetworks.py lists the CRD's objects,
topology.calico_block_networks parses them, the pool renders the map).

The cluster is SWITCHYARD_E2E_CLUSTER (default switchyard-cni), reused when
running and removed afterwards unless SWITCHYARD_KEEP_CLUSTER is set.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
import yaml
from kwokcluster import local_cluster, running_operator, still_running
from xrootd_fixtures import free_port, wait_until

from switchyard.apply import Kube
from switchyard.builders.xcachepool import client_map_name
from switchyard.observe.clientmap import KEY

pytestmark = pytest.mark.integration

CLUSTER = os.environ.get("SWITCHYARD_E2E_CLUSTER", "switchyard-cni")
NODE, SWITCH = "rack-b-worker-0", "rack-b"
CONFIRMED, PENDING = "192.168.77.0/26", "192.168.78.0/26"

# Enough of projectcalico/calico's libcalico-go/config/crd/crd.projectcalico.org_blockaffinities.yaml to serve
# the objects: the group, version, kind and scope, and a schema that keeps the spec as written.
BLOCK_AFFINITY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "blockaffinities.crd.projectcalico.org"},
    "spec": {"group": "crd.projectcalico.org", "scope": "Cluster",
             "names": {"kind": "BlockAffinity", "listKind": "BlockAffinityList", "plural": "blockaffinities",
                       "singular": "blockaffinity"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def block(cidr: str, state: str) -> dict:
    return {"apiVersion": "crd.projectcalico.org/v1", "kind": "BlockAffinity",
            "metadata": {"name": f"{NODE}-{cidr.replace('/', '-').replace('.', '-')}"},
            "spec": {"node": NODE, "cidr": cidr, "state": state, "deleted": "false"}}


@pytest.fixture(scope="module")
def cluster():
    import localcluster

    for kubeconfig in local_cluster(CLUSTER):
        localcluster.kubectl(CLUSTER, "apply", "--server-side", "-f", "-", input=yaml.safe_dump(BLOCK_AFFINITY_CRD))
        localcluster.kubectl(CLUSTER, "wait", "--for=condition=Established", "--timeout=60s",
                             "crd/blockaffinities.crd.projectcalico.org")
        yield kubeconfig


def test_a_confirmed_calico_block_is_listed_under_its_nodes_switch(cluster):
    import localcluster
    from facilities import facility

    kube = Kube.from_environment(str(cluster))
    # Before the operator starts: its first pool reconcile lists the blocks (then every READ_SECONDS).
    localcluster.kubectl(CLUSTER, "apply", "--server-side", "-f", "-",
                         input=yaml.safe_dump_all([block(CONFIRMED, "confirmed"), block(PENDING, "pending")]))
    namespace = f"cni-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    log_path = localcluster.CACHE / "e2e-logs" / CLUSTER / "operator-cni.log"
    obj = facility("af", workers=6)
    obj["metadata"]["namespace"] = namespace
    try:
        with running_operator(cluster, namespace, free_port(), log_path, {"SWITCHYARD_TIMER_SECONDS": "2"}) as operator:
            kube.apply(obj)

            def switches() -> dict | None:
                still_running(operator, log_path)
                found = kube.get("ConfigMap", namespace, client_map_name("af-xcache")) or {}
                text = (found.get("data") or {}).get(KEY)
                return json.loads(text)["switches"] if text else None

            wait_until(lambda: CONFIRMED in (switches() or {}).get(SWITCH, ()), timeout=120, interval=1,
                       what=f"the client map to list {CONFIRMED} under {SWITCH}")
            placed = switches()
        assert [s for s, networks in placed.items() if CONFIRMED in networks] == [SWITCH]
        assert not any(PENDING in networks for networks in placed.values())
        # The node's own InternalIP stays beside its block.
        node = kube.get("Node", None, NODE)
        address = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        assert address in placed[SWITCH]
    finally:
        kube.delete("Namespace", None, namespace)
        localcluster.kubectl(CLUSTER, "delete", "blockaffinities.crd.projectcalico.org", "--all", check=False)
