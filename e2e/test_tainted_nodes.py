"""Taints and tolerations on a real control plane: a rack whose nodes are tainted gets no cache or
worker of a pool and fleet that do not tolerate the taint, and is used once they do; the real
scheduler binds every planned pod (none stays Pending on a node it cannot tolerate)."""

from __future__ import annotations

import localcluster
import pytest
import yaml

from facilities import facility
from support import wait_for, wait_ready

pytestmark = pytest.mark.e2e

SWITCH = "switchyard.dev/switch"
TAINTED = "rack-c"
TAINT = "dedicated=xcache:NoSchedule"
TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "xcache", "effect": "NoSchedule"}


def rack_nodes(cluster, switch: str) -> list[str]:
    return sorted(n["metadata"]["name"] for n in cluster.kube.list("Node", None, {SWITCH: switch}))


@pytest.fixture
def tainted_rack(cluster):
    """Every node of TAINTED carries TAINT for the test (removed after, for the tests that follow)."""
    nodes = rack_nodes(cluster, TAINTED)
    assert nodes
    for node in nodes:
        cluster.kubectl("taint", "node", node, TAINT, "--overwrite")
    yield nodes
    for node in nodes:
        cluster.kubectl("taint", "node", node, "dedicated:NoSchedule-", check=False)


def planned(af: dict) -> tuple[dict, dict]:
    switches = af["status"]["plan"]["switches"]
    return ({s["name"]: s["caches"] for s in switches if s["caches"]},
            {s["name"]: s["workers"] for s in switches if s["workers"]})


def running(cluster, namespace) -> dict[str, list[dict]]:
    """Running cache and worker pods of the namespace, by component."""
    out: dict[str, list[dict]] = {"xcache": [], "worker": []}
    for pod in cluster.kube.list("Pod", namespace):
        component = pod["metadata"]["labels"].get("app.kubernetes.io/component")
        if component in out and pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
            out[component].append(pod)
    return out


def realised(cluster, namespace, caches: int, workers: int):
    pods = running(cluster, namespace)
    return pods if len(pods["xcache"]) == caches and len(pods["worker"]) == workers else None


def apply_facility(cluster, namespace, tolerate: bool) -> dict:
    obj = facility(workers=6)
    obj["metadata"]["namespace"] = namespace
    if tolerate:
        obj["spec"]["cachePools"][0]["tolerations"] = [TOLERATION]
        obj["spec"]["fleets"][0]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    cluster.kube.apply(obj)
    return wait_ready(cluster, namespace)


def test_a_tainted_rack_is_used_only_by_pools_and_fleets_that_tolerate_it(cluster, operator, namespace, tainted_rack):
    # Without tolerations: nothing planned, built or running on the tainted rack.
    af = apply_facility(cluster, namespace, tolerate=False)
    caches, workers = planned(af)
    assert TAINTED not in caches and TAINTED not in workers
    assert sum(caches.values()) == 4 and sum(workers.values()) == 6
    statefulsets = cluster.kube.list("StatefulSet", namespace, {"switchyard.dev/pool": "af-xcache"})
    assert sorted(s["metadata"]["labels"][SWITCH] for s in statefulsets) == ["rack-a", "rack-b"]
    assert all("tolerations" not in s["spec"]["template"]["spec"] for s in statefulsets)
    pods = wait_for(lambda: realised(cluster, namespace, 4, 6), what="4 caches and 6 workers running")
    assert not [p for ps in pods.values() for p in ps if p["spec"]["nodeName"] in tainted_rack]

    # Start over with the toleration: the rack's NVMe nodes host caches, and their pods are bound there.
    cluster.kube.delete("AnalysisFacility", namespace, "af")
    wait_for(lambda: not any(cluster.kube.list(kind, namespace) for kind in ("XCachePool", "WorkerFleet", "Pod")),
             timeout=120, what="no children or pods left")
    af = apply_facility(cluster, namespace, tolerate=True)
    caches, workers = planned(af)
    assert caches.get(TAINTED) == 2 and sum(caches.values()) == 6
    sts = cluster.kube.get("StatefulSet", namespace, f"af-xcache-{TAINTED}")
    assert sts["spec"]["template"]["spec"]["tolerations"] == [TOLERATION]
    for dep in cluster.kube.list("Deployment", namespace, {"switchyard.dev/fleet": "af-dask"}):
        assert dep["spec"]["template"]["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    pods = wait_for(lambda: realised(cluster, namespace, 6, sum(workers.values())), what="6 caches running")
    on_rack = [p for p in pods["xcache"] if p["spec"]["nodeName"] in tainted_rack]
    assert len(on_rack) == 2 and all(p["metadata"]["labels"][SWITCH] == TAINTED for p in on_rack)


@pytest.mark.parametrize("toleration, field", [
    ({"key": "dedicated", "operator": "Exists", "value": "xcache"}, "tolerations[0].value"),
    ({"value": "xcache"}, "tolerations[0].operator"),
    ({"key": "dedicated", "effect": "Sometimes"}, "tolerations[0].effect"),
])
def test_a_bad_toleration_is_refused_by_the_api_server(cluster, namespace, toleration, field):
    obj = facility("bad")
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["cachePools"][0]["tolerations"] = [toleration]
    with pytest.raises(RuntimeError) as err:
        localcluster.kubectl(cluster.name, "create", "-f", "-", input=yaml.safe_dump(obj))
    assert f"spec.cachePools[0].{field}" in str(err.value), str(err.value)
