"""The spine, end to end on a real control plane: apply, converge, edit, delete, refuse."""

from __future__ import annotations

import localcluster
import pytest
import yaml

from support import ready_condition, wait_for, wait_ready
from facilities import INVALID, facility

pytestmark = pytest.mark.e2e

CHILD_KINDS = ("XCachePool", "WorkerFleet")
WORKLOAD_KINDS = ("StatefulSet", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget")


def managed(cluster, ns, kinds):
    return [o for kind in kinds for o in cluster.kube.list(kind, ns, {"app.kubernetes.io/managed-by": "switchyard"})]


def test_explain_prints_descriptions(cluster):
    out = cluster.kubectl("explain", "analysisfacility.spec.network")
    assert "switchLabel" in out and "Node label whose value names the switch" in out
    assert "uplink" in out.lower()


@pytest.mark.parametrize("description,obj,field", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_facility_is_refused_naming_the_field(cluster, namespace, description, obj, field):
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    with pytest.raises(RuntimeError) as err:
        _kubectl_create(cluster, obj)
    assert field in str(err.value), str(err.value)
    assert cluster.kube.get("AnalysisFacility", namespace, "bad") is None


def _kubectl_create(cluster, obj):
    """Create as a user does: kubectl validates strictly (unknown fields are errors)."""
    return localcluster.kubectl(cluster.name, "create", "-f", "-", input=yaml.safe_dump(obj))


def test_name_too_long_is_refused(cluster, namespace):
    obj = facility("a" * 45)
    obj["metadata"]["namespace"] = namespace
    with pytest.raises(RuntimeError) as err:
        _kubectl_create(cluster, obj)
    assert "metadata.name" in str(err.value)


def test_apply_edit_delete(cluster, operator, namespace):
    obj = facility(workers=6)
    obj["metadata"]["namespace"] = namespace
    cluster.kube.apply(obj)
    af = wait_ready(cluster, namespace)

    # Children exist and are owned by the facility.
    uid = af["metadata"]["uid"]
    for kind in CHILD_KINDS:
        children = cluster.kube.list(kind, namespace)
        assert children, f"no {kind}"
        for child in children:
            assert child["metadata"]["ownerReferences"][0]["uid"] == uid
            assert ready_condition(child).get("status") == "True"

    # Every cache and worker pod runs on a node of the switch its workload names.
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in cluster.kube.list("Node")}
    pods = [p for p in cluster.kube.list("Pod", namespace) if p["status"].get("phase") == "Running"]
    assert sum(1 for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/component") == "worker") == 6
    assert sum(1 for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/component") == "xcache") == 6
    for pod in pods:
        switch = pod["metadata"]["labels"]["switchyard.dev/switch"]
        assert nodes[pod["spec"]["nodeName"]]["switchyard.dev/switch"] == switch
        if pod["metadata"]["labels"]["app.kubernetes.io/component"] == "xcache":
            assert "switchyard.dev/nvme" in nodes[pod["spec"]["nodeName"]]

    # The pool: one cache host per planned NVMe node, a Service per switch and one
    # for the pool, and ready counts per switch in its status.
    pool = cluster.kube.get("XCachePool", namespace, "af-xcache")
    per_switch = {s["switch"]: s for s in pool["status"]["switches"]}
    assert pool["status"]["readyHosts"] == pool["status"]["hosts"] == 6
    assert all(s["ready"] == s["desired"] for s in per_switch.values())
    services = {s["metadata"]["name"] for s in cluster.kube.list("Service", namespace, {"switchyard.dev/pool": "af-xcache"})}
    assert services == {"af-xcache"} | {f"af-xcache-{sw}" for sw in per_switch}
    assert pool["status"]["endpoint"] == f"af-xcache.{namespace}.svc:1094"

    # kubectl get shows meaningful columns.
    table = cluster.kubectl("get", "analysisfacility", "-n", namespace)
    header = table.splitlines()[0].split()
    assert header[:8] == ["NAME", "READY", "SWITCHES", "CACHES", "WORKERS", "PREDICTED-GBPS", "GAP", "TARGET-GBPS"]
    row = table.splitlines()[1].split()
    assert row[:5] == ["af", "True", "3", "6", "6"] and float(row[6]) == af["status"]["plan"].get("gap", 0)
    wide = cluster.kubectl("get", "analysisfacility", "-n", namespace, "-o", "wide").splitlines()[0].split()
    assert "FAIR-SHARE-GBPS" in wide and "BOTTLENECK" in wide

    # Edit: more workers and a new block size; children converge, observedGeneration follows.
    obj["spec"]["fleets"][0]["replicas"] = 9
    obj["spec"]["cachePools"][0]["pfc"] = {"blockSizeKiB": 2048}
    cluster.kube.apply(obj)
    af = wait_ready(cluster, namespace, generation=af["metadata"]["generation"] + 1)
    deployments = cluster.kube.list("Deployment", namespace, {"switchyard.dev/fleet": "af-dask"})
    assert sum(d["spec"]["replicas"] for d in deployments) == 9
    config = cluster.kube.get("ConfigMap", namespace, "af-xcache-xrootd")
    assert "pfc.blocksize 2048k" in config["data"]["xcache.cfg"]
    wait_for(lambda: sum(1 for p in cluster.kube.list("Pod", namespace, {"switchyard.dev/fleet": "af-dask"})
                         if p["status"].get("phase") == "Running") == 9, what="9 running workers")
    for child in cluster.kube.list("WorkerFleet", namespace):
        assert child["status"]["observedGeneration"] == child["metadata"]["generation"]

    # Delete: every child and grandchild goes (garbage collection through owner references).
    cluster.kube.delete("AnalysisFacility", namespace, "af")
    wait_for(lambda: not managed(cluster, namespace, CHILD_KINDS + WORKLOAD_KINDS), timeout=120,
             what="no switchyard objects left")
    wait_for(lambda: not cluster.kube.list("Pod", namespace), timeout=120, what="no pods left")


def test_unsatisfiable_facility_reports_and_creates_nothing(cluster, operator, namespace):
    obj = facility()
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["cachePools"][0]["nvmeLabel"] = "example.org/no-such-disk"
    cluster.kube.apply(obj)

    def reported():
        af = cluster.kube.get("AnalysisFacility", namespace, "af")
        cond = ready_condition(af or {})
        return af if cond.get("status") == "False" and cond.get("reason") == "NoEligibleCacheNodes" else None
    af = wait_for(reported, what="Ready=False NoEligibleCacheNodes")
    assert "pool xcache" in ready_condition(af)["message"] and "NVMe" in ready_condition(af)["message"]
    assert not managed(cluster, namespace, CHILD_KINDS + WORKLOAD_KINDS)
    # `kubectl describe` shows why, as a warning event with the reason.
    wait_for(lambda: any(e.get("reason") == "NoEligibleCacheNodes" and e.get("type") == "Warning"
                         for e in cluster.kube.list("Event", namespace)), timeout=30, what="a warning event")


def test_bad_update_leaves_running_children_untouched(cluster, operator, namespace):
    obj = facility()
    obj["metadata"]["namespace"] = namespace
    cluster.kube.apply(obj)
    af = wait_ready(cluster, namespace)
    before = {(o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
              for o in managed(cluster, namespace, CHILD_KINDS + WORKLOAD_KINDS)}
    pods_before = sorted(p["metadata"]["uid"] for p in cluster.kube.list("Pod", namespace))

    # Valid for the API server, impossible for the planner.
    obj["spec"]["cachePools"][0]["nvmeLabel"] = "example.org/no-such-disk"
    cluster.kube.apply(obj)

    def refused():
        cur = cluster.kube.get("AnalysisFacility", namespace, "af")
        cond = ready_condition(cur)
        return cur if cond.get("status") == "False" and cur["status"]["observedGeneration"] == af["metadata"]["generation"] + 1 else None
    cur = wait_for(refused, what="Ready=False on the bad update")
    assert ready_condition(cur)["reason"] == "NoEligibleCacheNodes"
    # The last good plan is still reported.
    assert cur["status"]["caches"] == 6 and cur["status"]["workers"] == 6

    after = {(o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
             for o in managed(cluster, namespace, CHILD_KINDS + WORKLOAD_KINDS)}
    # Only status subresource writes may have happened to the children; compare specs via generation.
    assert set(after) == set(before)
    for kind in ("StatefulSet", "Deployment", "XCachePool", "WorkerFleet"):
        for o in cluster.kube.list(kind, namespace):
            assert o["metadata"]["generation"] == 1, f"{kind} {o['metadata']['name']} was changed"
    assert sorted(p["metadata"]["uid"] for p in cluster.kube.list("Pod", namespace)) == pods_before
