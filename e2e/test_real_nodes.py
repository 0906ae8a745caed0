"""The operator from its chart, running for real on kubelet nodes beside the simulated ones.

A kwokctl cluster of the mini topology (12 simulated nodes) gets two real nodes
(e2e/realnodes.py: containerd + kubelet v1.31.4 + kube-proxy each, in network
namespaces behind their switches' bridges, CoreDNS for names). `helm install`
puts the operator, from the image `make images` built here, into a namespace
enforcing Pod Security `restricted`, with a toleration and node selector that
put it on a real node. The kubelet runs its probes; the operator reaches the API
server through the `kubernetes` Service (kube-proxy) and makes a facility Ready;
its /metrics is fetched through the API server's proxy. At the end every process,
mount, namespace, cgroup and sysctl the real nodes made must be gone.

Needs root, the packages of hack/install-realnode-deps.sh, `make tools` and
`make images`. Not part of the default run yet: `make e2e-real` runs it
(SWITCHYARD_REAL_NODES=1).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import time

import pytest

if not os.environ.get("SWITCHYARD_REAL_NODES"):
    pytest.skip("real-node e2e: run `make e2e-real` (SWITCHYARD_REAL_NODES=1)", allow_module_level=True)

import localcluster  # noqa: E402
import realnodes  # noqa: E402
from facilities import facility  # noqa: E402
from harness import Cluster, temporary_namespace  # noqa: E402
from support import TOPOLOGY, wait_for, wait_ready  # noqa: E402

pytestmark = pytest.mark.e2e

CLUSTER = os.environ.get("SWITCHYARD_REAL_CLUSTER", "sy-real")
CHART = localcluster.REPO / "charts" / "switchyard"
RELEASE = "sy"
NODES = [realnodes.RealNode("real-a", "rack-a"), realnodes.RealNode("real-b", "rack-b")]
COSTS = localcluster.CACHE / "e2e-logs" / CLUSTER / "real-node-costs.json"


def _host_state() -> dict:
    """What of the machine the real nodes must leave as they found it."""
    run = pathlib.Path("/run/netns")
    netns = sorted(p.name for p in run.iterdir() if p.name.startswith(("syr-", "cni-"))) if run.exists() else []
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout or "[]")
    return {
        "sysctls": {k: pathlib.Path("/proc/sys", k).read_text().strip() for k in realnodes.KUBELET_SYSCTLS},
        "netns": netns,
        "links": sorted(link["ifname"] for link in links),
        "routes": subprocess.run(["ip", "route"], capture_output=True, text=True).stdout,
        "iptables": "\n".join(line for line in iptables.splitlines() if not line.startswith(("#", ":"))),
        "mounts": sorted(line.split()[4] for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()
                         if "switchyard-realnodes" in line or "/run/netns" in line),
    }


@pytest.fixture(scope="module")
def real():
    realnodes.down(CLUSTER)  # whatever a run that died left behind
    localcluster.down(CLUSTER)
    before = _host_state()
    config = realnodes.kwokctl_config(localcluster.CACHE / "clusters" / CLUSTER / "realnodes-kwokctl.yaml")
    kubeconfig = localcluster.up(CLUSTER, TOPOLOGY, config=config)
    localcluster.install_crds(CLUSTER)
    nodes = realnodes.Cluster(CLUSTER, kubeconfig)
    try:
        nodes.up(NODES, images=["pause", "operator"])
        yield Cluster(CLUSTER, kubeconfig), nodes, before
    finally:
        realnodes.down(CLUSTER)
        if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):
            localcluster.down(CLUSTER)


def helm(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(localcluster.tools() / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _probe_counts(cluster: Cluster, node: str, pod: str) -> dict[tuple[str, str], float]:
    """The kubelet's own prober counters for `pod`: {(probe_type, result): count}."""
    text = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics/probes")
    out = {}
    for line in text.splitlines():
        if line.startswith("prober_probe_total{") and f'pod="{pod}"' in line:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            out[(labels["probe_type"], labels["result"])] = float(line.rsplit(" ", 1)[1])
    return out


def test_operator_from_the_chart_runs_on_a_real_node(real):
    cluster, nodes, _ = real
    costs = {"nodes": nodes.nodes}
    # Real nodes registered by their kubelets, labelled like simulated ones, tainted, untouched by kwok.
    for node in NODES:
        obj = cluster.kube.get("Node", None, node.name)
        assert obj["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.4"
        assert obj["metadata"]["labels"]["switchyard.dev/switch"] == node.switch
        assert realnodes.REAL_TAINT["key"] in [t["key"] for t in obj["spec"].get("taints", [])]
        assert "kwok.x-k8s.io/node" not in obj["metadata"].get("annotations", {})

    namespace = "sy-operator"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    started = time.monotonic()
    helm(cluster, "install", RELEASE, str(CHART), "-n", namespace, "--wait", "--timeout", "5m",
         "--set", "image.repository=localhost/switchyard", "--set", "image.tag=0.1.0",
         "--set", "image.pullPolicy=Never",
         "--set-json", f"tolerations=[{json.dumps(realnodes.TOLERATION)}]",
         "--set-json", f'nodeSelector={{"{realnodes.REAL_LABEL}": "true"}}')
    pod = cluster.kube.list("Pod", namespace, {"app.kubernetes.io/instance": RELEASE})[0]
    name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
    costs["operator_pod_ready_after_helm_install_seconds"] = round(time.monotonic() - started, 1)
    assert node in nodes.nodes, f"the operator pod landed on {node}, not on a real node"
    status = pod["status"]
    assert status["podIP"].startswith("10.244."), status.get("podIP")
    assert status["containerStatuses"][0]["state"].get("running"), status["containerStatuses"][0]
    assert status["containerStatuses"][0]["imageID"], "no image ID: the container did not run from an image"

    # The kubelet probed the container: liveness and readiness succeeded, none failed.
    counts = wait_for(lambda: (c := _probe_counts(cluster, node, name)).get(("Liveness", "successful"), 0) >= 1 and c,
                      timeout=120, what="a successful liveness probe by the kubelet")
    assert counts.get(("Readiness", "successful"), 0) >= 1, counts
    assert counts.get(("Liveness", "failed"), 0) == 0 and counts.get(("Liveness", "unknown"), 0) == 0, counts

    # /metrics and /healthz, served by the process in the container (through the API server's pod proxy).
    metrics = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}:8080/proxy/metrics")
    assert "# TYPE switchyard_" in metrics, metrics[:500]
    health = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}:8081/proxy/healthz")
    assert health.strip(), "empty /healthz"

    # In the container: the chart's ServiceAccount, names resolved by the cluster's DNS.
    resolved = cluster.kubectl("exec", "-n", namespace, name, "--", "python", "-c",
                               "import socket; print(socket.gethostbyname('kubernetes.default.svc.cluster.local'))")
    assert resolved.strip() == realnodes.SERVICE_IP
    whoami = cluster.kubectl("exec", "-n", namespace, name, "--", "cat",
                             "/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    assert whoami.strip() == namespace

    # The operator, talking to the API server through the `kubernetes` Service, makes a facility Ready.
    af_namespace = next(temporary_namespace(cluster.kube, "real-af"))
    obj = facility(workers=4)
    obj["metadata"]["namespace"] = af_namespace
    cluster.kube.apply(obj)
    af = wait_ready(cluster, af_namespace, timeout=240)
    assert af["status"]["workers"] == 4
    logs = cluster.kubectl("logs", "-n", namespace, name)
    assert "Created StatefulSet af-xcache-rack-a" in logs and "Ready=True" in logs, logs[-2000:]
    pod = cluster.kube.get("Pod", namespace, name)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0

    costs["memory_mib_per_node"] = nodes.memory_mib()
    COSTS.parent.mkdir(parents=True, exist_ok=True)
    COSTS.write_text(json.dumps(costs, indent=1))
    print(json.dumps(costs, indent=1))


def test_teardown_leaves_the_machine_as_it_was(real):
    cluster, nodes, before = real
    realnodes.down(CLUSTER)
    assert realnodes.leftovers(CLUSTER) == []
    after = _host_state()
    assert after["sysctls"] == before["sysctls"]
    assert after["netns"] == before["netns"]
    assert after["routes"] == before["routes"]
    assert after["iptables"] == before["iptables"]
    assert after["links"] == before["links"]
    assert after["mounts"] == before["mounts"]
