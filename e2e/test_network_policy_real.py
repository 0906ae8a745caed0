"""The operator's NetworkPolicies, enforced on real nodes (issue 26, part 3 acceptance).

A kwokctl cluster of e2e/topologies/real-netpol.yaml: two real kubelet nodes (e2e/realnodes.py),
each on a switch of its own, beside two simulated ones. On each real node, in its network
namespace, runs kube-router v2.1.0's network policy controller, firewall only (no router, no
service proxy): the real nodes' CNI (the plain bridge plugin) enforces no policy by itself.
kube-router is for tests only (hack/build-kube-router.sh says why).

The operator (run on the host, its release namespace set to the namespace where the test's
"gateway" pods run) makes a facility whose Dask fleet has `createScheduler` and names one client
namespace; the simulated nodes get a PreferNoSchedule taint so that the scheduler lands on a real node. Probe pods
on both real nodes (the scheduler's, over its bridge; the other, routed through the switches)
open TCP to the scheduler's pod IP on 8786:
- refused: a pod in another namespace, an unlabelled pod in the fleet's own namespace (the fleet
  names another client namespace), an unlabelled pod in the gateway's namespace;
- admitted: pods labelled as the fleet's workers (the labels of its worker Deployment's pods), pods
  labelled as the chart's dask-gateway in the release namespace, a pod in the client namespace.
Then the operator runs with SWITCHYARD_NETWORK_POLICIES=false, prunes the policy, and every
refused pod connects: the refusals were the policy's, not a broken network. At the end kube-router's
chains and ipsets are removed and the machine is as it was.

Needs root, hack/install-realnode-deps.sh (ipset), `make tools`, `make images` (pause, dask) and Go
(kube-router is built on first use). SWITCHYARD_REAL_NODES=1, like test_real_nodes.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time

import pytest

if not os.environ.get("SWITCHYARD_REAL_NODES"):
    pytest.skip("real-node e2e: SWITCHYARD_REAL_NODES=1 (needs root)", allow_module_level=True)

import localcluster  # noqa: E402
import realnodes  # noqa: E402
from harness import Cluster, start_operator, stop_operator  # noqa: E402
from support import wait_for  # noqa: E402
from test_real_nodes import _host_state  # noqa: E402

pytestmark = pytest.mark.e2e

CLUSTER = os.environ.get("SWITCHYARD_NETPOL_CLUSTER", "sy-netpol")
TOPOLOGY = localcluster.REPO / "e2e" / "topologies" / "real-netpol.yaml"
NODES = realnodes.from_topology(TOPOLOGY)
LOGS = localcluster.CACHE / "e2e-logs" / CLUSTER
COSTS = LOGS / "network-policy-costs.json"
DASK_IMAGE = "localhost/switchyard-dask:0.1.0"
PORT = 8786  # the scheduler's comm port (workerfleet.DASK_SCHEDULER_PORT)
FLEET_NS, OTHER_NS, CLIENT_NS, GATEWAY_NS = "np-fleet", "np-other", "np-clients", "np-release"
GATEWAY_LABELS = {"app.kubernetes.io/name": "switchyard", "app.kubernetes.io/instance": "sy",
                  "app.kubernetes.io/component": "dask-gateway"}  # charts/switchyard/templates/_helpers.tpl

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("open")
except socket.timeout:
    print("timeout")
except OSError as exc:
    print(f"refused errno {exc.errno}")
"""


@pytest.fixture(scope="module")
def np():
    nodes = realnodes.Cluster(CLUSTER, localcluster.kubeconfig_path(CLUSTER))
    nodes._take_host()   # before the machine's state is noted: another run's real nodes may be up until then
    realnodes.down(CLUSTER)  # whatever a run that died left behind
    localcluster.down(CLUSTER)
    before = _host_state()
    costs: dict = {}
    started = time.monotonic()
    built = subprocess.run(["bash", str(localcluster.REPO / "hack" / "build-kube-router.sh")], check=True,
                           capture_output=True, text=True)
    binary = pathlib.Path(built.stdout.strip().splitlines()[-1])
    costs["kube_router_build_or_cache_seconds"] = round(time.monotonic() - started, 1)
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    costs["kube_router_version"] = (version.stdout or version.stderr).strip().splitlines()[0]
    config = realnodes.kwokctl_config(localcluster.CACHE / "clusters" / CLUSTER / "realnodes-kwokctl.yaml")
    kubeconfig = localcluster.up(CLUSTER, TOPOLOGY, config=config)
    localcluster.install_crds(CLUSTER)
    operator = None
    try:
        nodes.up(NODES, images=["pause", "dask"])
        costs["kube_router_chains_after_start_seconds"] = nodes.enforce_network_policies(binary)
        LOGS.mkdir(parents=True, exist_ok=True)
        operator = {"proc": start_operator(kubeconfig, LOGS / "operator-netpol.log",
                                          SWITCHYARD_RELEASE_NAMESPACE=GATEWAY_NS)}
        yield Cluster(CLUSTER, kubeconfig), nodes, operator, before, costs
    finally:
        if operator:
            stop_operator(operator["proc"])
        objects = localcluster.kubectl(CLUSTER, "get", "analysisfacilities,workerfleets,networkpolicies,pods,events",
                                       "-A", "-o", "yaml", check=False)
        if objects:
            (LOGS / "objects-netpol.yaml").write_text(objects)
        COSTS.parent.mkdir(parents=True, exist_ok=True)
        COSTS.write_text(json.dumps(costs, indent=1))
        if os.environ.get("SWITCHYARD_KEEP_CLUSTER"):  # for a post-mortem; then realnodes.py down
            return
        nodes.down()   # and the host lock with it, for the next real-node module
        localcluster.down(CLUSTER)


def _probe(cluster: Cluster, namespace: str, name: str, node: str, labels: dict | None = None) -> dict:
    return cluster.kube.apply({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node, "tolerations": [realnodes.TOLERATION], "terminationGracePeriodSeconds": 0,
                 "automountServiceAccountToken": False, "enableServiceLinks": False,
                 "containers": [{"name": "c", "image": DASK_IMAGE, "imagePullPolicy": "Never",
                                 "command": ["sleep", "infinity"]}]},
    })


def _reach(cluster: Cluster, pod: tuple[str, str], ip: str) -> str:
    """open, timeout or refused: a TCP connect from inside `pod` (namespace, name) to ip:8786."""
    out = cluster.kubectl("exec", "-n", pod[0], pod[1], "--", "python", "-c", CONNECT, ip, str(PORT))
    return out.strip().splitlines()[-1]


def _scheduler(cluster: Cluster) -> dict:
    pods = [p for p in cluster.kube.list("Pod", FLEET_NS, {"app.kubernetes.io/component": "scheduler"})]
    return pods[0] if len(pods) == 1 else {}


def test_other_namespaces_cannot_reach_the_scheduler_its_workers_and_the_gateway_can(np):
    cluster, nodes, operator, _, costs = np
    test_started = time.monotonic()
    # The plan puts the pool and the workers on rack-c (simulated); the Dask scheduler, which the plan does
    # not place, is steered to a real node (it tolerates their taint; the simulated ones are disfavoured:
    # the planner honours NoSchedule taints, so a NoSchedule one would leave the pool no node).
    cluster.kubectl("taint", "nodes", "-l", "type=kwok", "--overwrite", "switchyard.dev/simulated=true:PreferNoSchedule")
    for ns in (FLEET_NS, OTHER_NS, CLIENT_NS, GATEWAY_NS):
        cluster.kubectl("create", "namespace", ns)
    cluster.kube.apply({
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility",
        "metadata": {"name": "af", "namespace": FLEET_NS},
        "spec": {
            "targetGbps": 2, "routing": "local",
            "network": {"switches": [{"name": "rack-c", "uplinkGbps": 80}]},
            "cachePools": [{"name": "xcache", "serveGbps": 5, "origin": {"host": "origin.example.org"},
                            "storage": {"dataPaths": ["/mnt/nvme0"]}, "resources": {"cpu": "1", "memory": "12Gi"}}],
            # The fleet names another namespace for its clients: its own namespace at large is not admitted,
            # so an unlabelled pod there is refused and the worker-labelled pods are admitted as workers.
            "fleets": [{"name": "dask", "image": DASK_IMAGE, "replicas": 1, "cores": 1, "memoryGiB": 1,
                        "readGbps": 1, "dask": {"createScheduler": True, "clientNamespaces": [CLIENT_NS]},
                        "tolerations": [realnodes.TOLERATION]}],
        },
    })
    scheduler = wait_for(lambda: (p := _scheduler(cluster)) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])) and p,
        timeout=240, what="the Dask scheduler Ready on a real node")
    sched_node, sched_ip = scheduler["spec"]["nodeName"], scheduler["status"]["podIP"]
    assert sched_node in nodes.nodes and sched_ip.startswith("10.244."), (sched_node, sched_ip)
    other_node = next(n for n in nodes.nodes if n != sched_node)
    policy = wait_for(lambda: cluster.kube.list("NetworkPolicy", FLEET_NS), timeout=60, what="the scheduler's policy")
    assert [p["metadata"]["name"] for p in policy] == ["af-dask-scheduler"], policy
    worker_deployments = cluster.kube.list("Deployment", FLEET_NS, {"app.kubernetes.io/component": "worker"})
    assert worker_deployments, "no worker Deployment"
    worker_labels = worker_deployments[0]["spec"]["template"]["metadata"]["labels"]

    # (namespace, name) -> node; which may connect and which not.
    admitted = {(FLEET_NS, "worker-same"): (sched_node, worker_labels),
                (FLEET_NS, "worker-other"): (other_node, worker_labels),
                (GATEWAY_NS, "gateway-same"): (sched_node, GATEWAY_LABELS),
                (GATEWAY_NS, "gateway-other"): (other_node, GATEWAY_LABELS),
                (CLIENT_NS, "client-other"): (other_node, {})}
    refused = {(OTHER_NS, "outsider-same"): (sched_node, {}),
               (OTHER_NS, "outsider-other"): (other_node, {}),
               # The worker's labels do not help in another namespace.
               (OTHER_NS, "fake-worker-other"): (other_node, worker_labels),
               (FLEET_NS, "unlabelled-other"): (other_node, {}),
               (GATEWAY_NS, "unlabelled-other"): (other_node, {})}
    for (ns, name), (node, labels) in {**admitted, **refused}.items():
        _probe(cluster, ns, name, node, labels)
    for ns, name in {**admitted, **refused}:
        wait_for(lambda: (cluster.kube.get("Pod", ns, name) or {}).get("status", {}).get("phase") == "Running",
                 timeout=120, interval=0.5, what=f"probe pod {ns}/{name} Running")

    # kube-router applies the policy within its sync: every refused pod is refused.
    started = time.monotonic()
    seen: dict = {}

    def all_refused() -> bool:
        seen.update({f"{ns}/{name}": _reach(cluster, (ns, name), sched_ip) for ns, name in refused})
        return all(seen[f"{ns}/{name}"] != "open" for ns, name in refused)
    try:
        wait_for(all_refused, timeout=90, interval=1, what="every pod the policy does not admit refused")
    finally:
        print("refused phase:", seen)
    costs["refused_all_after_pods_running_seconds"] = round(time.monotonic() - started, 1)
    costs["refused"] = dict(seen)
    # ... and every admitted pod connects, on the scheduler's node (bridged) and across the switches (routed).
    reached = {f"{ns}/{name}": _reach(cluster, (ns, name), sched_ip) for ns, name in admitted}
    costs["admitted"] = reached
    assert all(v == "open" for v in reached.values()), reached
    again = {f"{ns}/{name}": _reach(cluster, (ns, name), sched_ip) for ns, name in refused}
    assert all(v != "open" for v in again.values()), again
    # The kubelet's probes come from the node, which the policy leaves alone: the scheduler stays Ready.
    scheduler = _scheduler(cluster)
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in scheduler["status"]["conditions"]), scheduler
    assert scheduler["status"]["containerStatuses"][0]["restartCount"] == 0, scheduler["status"]
    # The rules are kube-router's, in the scheduler's node's namespace.
    rules = subprocess.run(["nsenter", f"--net=/run/netns/{nodes.nodes[sched_node]['netns']}", "--", "iptables-save",
                            "-t", "filter"], capture_output=True, text=True, check=True).stdout
    assert "KUBE-NWPLCY-" in rules and sched_ip in rules, rules[-3000:]

    # Without the policy (the operator told to make none prunes it), the same pods connect: the
    # refusals above were the policy's, not a broken network.
    stop_operator(operator["proc"])
    operator["proc"] = start_operator(cluster.kubeconfig, LOGS / "operator-netpol-off.log",
                                      SWITCHYARD_RELEASE_NAMESPACE=GATEWAY_NS, SWITCHYARD_NETWORK_POLICIES="false")
    wait_for(lambda: not cluster.kube.list("NetworkPolicy", FLEET_NS), timeout=120, what="the policy pruned")
    started = time.monotonic()
    opened: dict = {}

    def all_open() -> bool:
        opened.update({f"{ns}/{name}": _reach(cluster, (ns, name), sched_ip) for ns, name in refused})
        return all(v == "open" for v in opened.values())
    try:
        wait_for(all_open, timeout=90, interval=1, what="every formerly refused pod connecting without the policy")
    finally:
        print("policy pruned:", opened)
    costs["open_after_policy_pruned_seconds"] = round(time.monotonic() - started, 1)
    costs["test_seconds"] = round(time.monotonic() - test_started, 1)
    print(json.dumps(costs, indent=1))


def test_teardown_removes_the_enforcer_and_leaves_the_machine_as_it_was(np):
    cluster, nodes, operator, before, costs = np
    stop_operator(operator["proc"])
    operator.clear()
    # The check sees kube-router's chains and ipsets while it runs ...
    assert nodes.kube_router_leftovers(), "no kube-router chains or ipsets found while it runs"
    costs["cleanup"] = nodes.stop_network_policies()
    # ... and none once it is stopped, the nodes still up.
    assert nodes.kube_router_leftovers() == []
    realnodes.down(CLUSTER)
    assert realnodes.leftovers(CLUSTER) == []
    after = _host_state()
    for key in ("sysctls", "netns", "routes", "iptables", "links", "mounts"):
        assert after[key] == before[key], key
