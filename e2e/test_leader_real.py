"""The active operator's node dies: a standby on another real node takes over (issue #29).

A kwokctl cluster of e2e/topologies/real.yaml: two real kubelet nodes (e2e/realnodes.py) on
switches of their own beside 8 simulated ones. `helm install` runs the chart's two operator
replicas (from the image `make images` builds) on the two real nodes; one holds the leader Lease.
A facility on the simulated nodes is made Ready. Then the leader's node dies
(`realnodes.Cluster.stop_node`: its link cut at the switch and every process of it SIGKILLed:
kubelet, containerd, its pods), and the facility's fleet is scaled at once: the standby takes the
Lease once the dead leader's has expired and reconciles the change. Before that, `helm upgrade`
rolls both replicas while the fleet is rescaled every few seconds: the Lease passes from pod to pod
and every change is reconciled. Reported, not asserted: the time from the death to the new leader's
Lease and to its first reconcile (the issue's target is 20 s with the chart's default lease
timings), the longest a change waited for a leader during the roll, and each replica's resident
memory.

Needs root, the packages of hack/install-realnode-deps.sh, `make tools` and `make images`;
`make test` runs it (SWITCHYARD_REAL_NODES=1).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import threading
import time

import pytest

if not os.environ.get("SWITCHYARD_REAL_NODES"):
    pytest.skip("real-node e2e: run `make e2e-real` (SWITCHYARD_REAL_NODES=1)", allow_module_level=True)

import localcluster  # noqa: E402
import realnodes  # noqa: E402
from facilities import facility  # noqa: E402
from harness import Cluster  # noqa: E402
from realchecks import host_state  # noqa: E402
from support import wait_for, wait_ready  # noqa: E402

pytestmark = pytest.mark.e2e

CLUSTER = os.environ.get("SWITCHYARD_LEADER_REAL_CLUSTER", "sy-lead-real")
TOPOLOGY = localcluster.REPO / "e2e" / "topologies" / "real.yaml"
NODES = realnodes.from_topology(TOPOLOGY)
CHART = localcluster.REPO / "charts" / "switchyard"
RELEASE, OPERATOR_NAMESPACE, NAMESPACE = "sy", "sy-operator", "lead"
LEASE = f"{RELEASE}-switchyard-leader"
LOGS = localcluster.CACHE / "e2e-logs" / CLUSTER
COSTS = LOGS / "leader-real-costs.json"


@pytest.fixture(scope="module")
def real():
    nodes = realnodes.Cluster(CLUSTER, localcluster.kubeconfig_path(CLUSTER))
    nodes._take_host()   # before the machine's state is noted: another run's real nodes may be up until then
    realnodes.down(CLUSTER)  # whatever a run that died left behind
    localcluster.down(CLUSTER)
    before = host_state()
    LOGS.mkdir(parents=True, exist_ok=True)
    try:
        config = realnodes.kwokctl_config(localcluster.CACHE / "clusters" / CLUSTER / "realnodes-kwokctl.yaml")
        kubeconfig = localcluster.up(CLUSTER, TOPOLOGY, config=config)
        localcluster.install_crds(CLUSTER)
        nodes.up(NODES, images=["pause", "operator"])
        yield Cluster(CLUSTER, kubeconfig), nodes, before
    finally:
        objects = localcluster.kubectl(CLUSTER, "get", "leases,pods,events", "-n", OPERATOR_NAMESPACE, "-o", "yaml",
                                       check=False)
        if objects:
            (LOGS / "objects-leader-real.yaml").write_text(objects)
        if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):  # else: `realnodes.py down`, `localcluster.py down`
            nodes.down()
            localcluster.down(CLUSTER)


def _lease(cluster: Cluster) -> dict:
    return (cluster.kube.get("Lease", OPERATOR_NAMESPACE, LEASE) or {}).get("spec") or {}


def _micro_time(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def _helm(cluster: Cluster, *args: str) -> None:
    subprocess.run([str(localcluster.tools() / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args,
                    "-n", OPERATOR_NAMESPACE, "--wait", "--timeout", "5m"], check=True, capture_output=True, text=True,
                   timeout=400)


def _operator_pods(cluster: Cluster) -> dict[str, dict]:
    """The operator's pods that run (not those on their way out)."""
    return {p["metadata"]["name"]: p for p in cluster.kube.list("Pod", OPERATOR_NAMESPACE, {"app.kubernetes.io/name": "switchyard"})
            if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"}


class Rescaler:
    """Rescales the facility's fleet (4, 5, 4, ...) one change at a time, each a second after the last was
    reconciled, noting how long each waited; and reads the Lease every 0.2 s throughout, noting each
    record with a new holder (or none)."""

    def __init__(self, cluster: Cluster, obj: dict):
        self.cluster, self.obj = cluster, obj
        self.waits: list[float] = []
        self.leases: list[dict] = []       # each record whose holderIdentity differs from the last one's
        self.last: dict[str, dict] = {}    # each holder's last record seen
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _watch_lease(self) -> None:
        spec = _lease(self.cluster)
        holder = spec.get("holderIdentity") or ""
        if not self.leases or (self.leases[-1].get("holderIdentity") or "") != holder:
            self.leases.append(spec)
        self.last[holder] = spec

    def _run(self) -> None:
        while not self.stop.is_set():
            fleet = self.obj["spec"]["fleets"][0]
            fleet["replicas"] = 5 if fleet["replicas"] == 4 else 4
            generation = self.cluster.kube.apply(self.obj)["metadata"]["generation"]
            applied = time.monotonic()
            while (self.cluster.kube.get("AnalysisFacility", NAMESPACE, "af")["status"].get("observedGeneration", 0)
                   < generation):
                self._watch_lease()
                time.sleep(0.2)
            self.waits.append(time.monotonic() - applied)
            for _ in range(5):
                self._watch_lease()
                if self.stop.wait(0.2):
                    break

    def hand_overs(self) -> list[float]:
        """Seconds from each holder's last renewal seen to its successor's acquisition (one lease at most
        after a SIGTERM's release; a release clears the holder, so a successor need not wait it out)."""
        holders = [spec["holderIdentity"] for spec in self.leases if spec.get("holderIdentity")]
        return [round(_micro_time(self.last[new]["acquireTime"]) - _micro_time(self.last[old]["renewTime"]), 1)
                for old, new in zip(holders, holders[1:])]


def test_a_standby_on_another_node_takes_over_when_the_leaders_node_dies(real):
    cluster, nodes, _ = real
    costs: dict = {}
    cluster.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    cluster.kubectl("label", "namespace", OPERATOR_NAMESPACE, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    _helm(cluster, "install", RELEASE, str(CHART), "--set", "image.repository=localhost/switchyard",
          "--set", "image.tag=0.1.0", "--set", "image.pullPolicy=Never",
          "--set-json", f"tolerations=[{json.dumps(realnodes.TOLERATION)}]",
          "--set-json", f'nodeSelector={{"{realnodes.REAL_LABEL}": "true"}}')
    wait_for(lambda: _lease(cluster).get("holderIdentity"), timeout=90, what="a leader")
    cluster.kubectl("create", "namespace", NAMESPACE)
    obj = facility(workers=4)
    obj["spec"]["network"]["switches"] = [{"name": "rack-c", "uplinkGbps": 80}, {"name": "rack-d", "uplinkGbps": 80}]
    obj["metadata"]["namespace"] = NAMESPACE
    cluster.kube.apply(obj)
    wait_ready(cluster, NAMESPACE, timeout=240)

    # helm upgrade rolls both replicas (one more pod at a time, none unavailable) while the fleet is rescaled.
    before_roll = set(_operator_pods(cluster))
    rescaler = Rescaler(cluster, obj)
    rescaler.thread.start()
    _helm(cluster, "upgrade", RELEASE, str(CHART), "--reuse-values",
          "--set-json", 'podAnnotations={"switchyard.dev/rolled": "1"}')
    wait_for(lambda: len(pods := _operator_pods(cluster)) == 2 and not set(pods) & before_roll, timeout=180,
             what="both operator pods replaced")
    wait_for(lambda: _lease(cluster).get("holderIdentity") in _operator_pods(cluster), timeout=90,
             what="a new pod leading")
    time.sleep(5)   # a change or two more under the new leader
    rescaler.stop.set()
    rescaler.thread.join(timeout=120)
    assert not rescaler.thread.is_alive(), "a change made during the roll was never reconciled"
    hand_overs = rescaler.hand_overs()
    costs["upgrade"] = {"changes": len(rescaler.waits), "longest_wait_seconds": round(max(rescaler.waits), 1),
                        "lease_holders": [spec.get("holderIdentity") or "" for spec in rescaler.leases],
                        "hand_over_seconds": hand_overs}
    # The lease passed from an old pod to a new one while changes were made, and every change was
    # reconciled (how long each waited, and each hand-over, are reported).
    assert len(rescaler.waits) >= 3 and hand_overs, costs["upgrade"]

    leader = _lease(cluster)["holderIdentity"]
    pods = _operator_pods(cluster)
    if len({pod["spec"]["nodeName"] for pod in pods.values()}) == 1:
        # The roll may leave both on one node (the chart's anti-affinity is preferred, for rolls on one
        # node); the standby, deleted, comes back on the other.
        cluster.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, next(n for n in pods if n != leader), "--wait=true")
        pods = wait_for(lambda: len(p := _operator_pods(cluster)) == 2 and p, timeout=120, what="the standby back")
    assert leader in pods, (leader, list(pods))
    node_of = {name: pod["spec"]["nodeName"] for name, pod in pods.items()}
    # The standby is on the other real node.
    assert sorted(node_of.values()) == sorted(nodes.nodes), node_of
    standby = next(name for name in pods if name != leader)
    # Which one leads, on the pods themselves (kubectl get pods -L switchyard.dev/leader).
    labels = wait_for(lambda: (found := {n: (cluster.kube.get("Pod", OPERATOR_NAMESPACE, n)["metadata"].get("labels") or {})
                                         .get("switchyard.dev/leader") for n in pods})
                      == {leader: "true", standby: "false"} and found, timeout=60, what="the leader label on both pods")
    costs["leader_labels"] = labels
    wait_ready(cluster, NAMESPACE, timeout=240)
    # Resident memory of each replica's operator process, the leader (reconciling) beside the standby.
    costs["rss_mib"] = {role: sum(nodes.pod_processes(node_of[name], "switchyard").values())
                        for role, name in (("leader", leader), ("standby", standby))}
    lease_before = _lease(cluster)

    # The leader's node dies; the fleet is scaled while no one leads.
    died = time.time()
    costs["killed_processes"] = nodes.stop_node(node_of[leader])
    obj["spec"]["fleets"][0]["replicas"] = 6     # neither 4 nor 5: the rescaler's
    generation = cluster.kube.apply(obj)["metadata"]["generation"]

    lease = wait_for(lambda: (spec := _lease(cluster)).get("holderIdentity") == standby and spec, timeout=120,
                     what="the standby holding the Lease")
    costs["lease_taken_seconds_after_death"] = round(_micro_time(lease["acquireTime"]) - died, 1)
    af = wait_for(lambda: (af := cluster.kube.get("AnalysisFacility", NAMESPACE, "af"))["status"].get(
        "observedGeneration") == generation and af, timeout=120, what="the change reconciled by the new leader")
    costs["first_reconcile_seconds_after_death"] = round(time.time() - died, 1)
    assert af["status"]["workers"] == 6
    # It took over only once the dead leader's lease had run out: no two leaders at once.
    assert lease["leaseTransitions"] == lease_before.get("leaseTransitions", 0) + 1
    assert _micro_time(lease["acquireTime"]) >= _micro_time(lease_before["renewTime"]) + lease_before["leaseDurationSeconds"]
    wait_ready(cluster, NAMESPACE, generation=generation, timeout=240)
    labels = (cluster.kube.get("Pod", OPERATOR_NAMESPACE, standby)["metadata"].get("labels") or {})
    assert labels.get("switchyard.dev/leader") == "true", labels
    COSTS.write_text(json.dumps(costs, indent=1))
    print(json.dumps(costs, indent=1))


def test_teardown_leaves_the_machine_as_it_was(real):
    cluster, nodes, before = real
    nodes.down()
    assert realnodes.leftovers(CLUSTER) == []
    assert host_state() == before
