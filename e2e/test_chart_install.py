"""The Helm chart on the local cluster, with the operator running under the chart's own RBAC.

`helm install` puts the operator Deployment (simulated by kwok: its pod is
admitted and marked Running, but does not execute), the ServiceAccount, RBAC,
Service and dashboards into a namespace enforcing Pod Security `restricted`.
The operator then runs here as a subprocess with a token of that
ServiceAccount (`kubectl create token`), so every API call it makes is
authorised by the chart's Roles and nothing else; the sample facility must
become Ready without a single "forbidden". `helm uninstall` must then leave
nothing behind but the CRDs, as the chart's NOTES and docs/admin-guide.md say.

Run alone on its own cluster: SWITCHYARD_E2E_CLUSTER=sy-chart pytest e2e/test_chart_install.py
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import localcluster
import pytest
import yaml

from facilities import facility
from harness import temporary_namespace
from support import wait_for, wait_ready

pytestmark = pytest.mark.e2e

CHART = localcluster.REPO / "charts" / "switchyard"
RELEASE = "sy"
LOGS = localcluster.CACHE / "e2e-logs"
# Every kind the chart creates, and where to look for leftovers.
NAMESPACED = ("deployments", "replicasets", "pods", "services", "configmaps", "serviceaccounts", "roles", "rolebindings")
CLUSTER_SCOPED = ("clusterroles", "clusterrolebindings")


def helm(cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(localcluster.tools() / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
                            capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def token_kubeconfig(cluster, namespace: str, service_account: str, path: pathlib.Path) -> pathlib.Path:
    """A kubeconfig that authenticates as the ServiceAccount, with the cluster's server and CA."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    token = cluster.kubectl("create", "token", service_account, "-n", namespace, "--duration", "1h").strip()
    assert token.count(".") == 2, "kubectl create token did not print a JWT"
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "local", "cluster": {k: v for k, v in server.items()
                                                    if k in ("server", "certificate-authority", "certificate-authority-data")}}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": service_account}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def can_i(cluster, kubeconfig: pathlib.Path, *args: str) -> bool:
    result = subprocess.run([str(localcluster.tools() / "kubectl"), "--kubeconfig", str(kubeconfig), "auth", "can-i", *args],
                            capture_output=True, text=True, timeout=30)
    return result.stdout.strip() == "yes"


def leftovers(cluster, release_namespace: str) -> list[str]:
    selector = f"app.kubernetes.io/instance={RELEASE}"
    found = []
    for resource in NAMESPACED:
        out = cluster.kubectl("get", resource, "-A", "-l", selector, "-o", "name")
        found += [line for line in out.splitlines() if line]
    for resource in CLUSTER_SCOPED:
        out = cluster.kubectl("get", resource, "-l", selector, "-o", "name")
        found += [line for line in out.splitlines() if line]
    # Pods of the Deployment carry the selector labels too; anything else in the namespace?
    rest = cluster.kubectl("get", "deployments,services,configmaps,roles,rolebindings", "-n", release_namespace, "-o", "name")
    found += [line for line in rest.splitlines() if line and "kube-root-ca.crt" not in line]
    return sorted(set(found))


@pytest.fixture
def facility_namespace(cluster):
    """Where the facility lives: a namespace that allows cache hosts (host network and paths)."""
    yield from temporary_namespace(cluster.kube, "chart-af")


@pytest.mark.parametrize("mode", ["cluster", "namespaced"])
def test_chart_install_run_with_its_rbac_and_uninstall(cluster, namespace, facility_namespace, mode, tmp_path):
    # The operator's namespace enforces the strictest Pod Security level.
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest", "--overwrite")
    values = ["--set", f"watch.mode={mode}"]
    if mode == "namespaced":
        values += ["--set", f"watch.namespaces={{{facility_namespace}}}"]
    operator = None
    LOGS.joinpath(cluster.name).mkdir(parents=True, exist_ok=True)
    log_path = LOGS / cluster.name / f"operator-chart-{mode}.log"
    try:
        install = helm(cluster, "install", RELEASE, str(CHART), "-n", namespace, "--wait", "--timeout", "2m", *values)
        assert "Next steps" in install.stdout and "kubectl apply --server-side -f charts/switchyard/crds/" in install.stdout

        # The Deployment's pod was admitted under `restricted` and runs (kwok).
        pods = wait_for(lambda: [p for p in cluster.kube.list("Pod", namespace, {"app.kubernetes.io/instance": RELEASE})
                                 if p["status"].get("phase") == "Running"], timeout=60, what="the operator pod")
        assert pods[0]["spec"]["serviceAccountName"] == f"{RELEASE}-switchyard"
        maps = cluster.kube.list("ConfigMap", namespace, {"grafana_dashboard": "1"})
        assert len(maps) == 2

        kubeconfig = token_kubeconfig(cluster, namespace, f"{RELEASE}-switchyard", tmp_path / "sa.kubeconfig")
        # Least privilege, as the API server sees it.
        assert can_i(cluster, kubeconfig, "list", "nodes")
        assert can_i(cluster, kubeconfig, "patch", "analysisfacilities.switchyard.dev/status", "-n", facility_namespace)
        assert not can_i(cluster, kubeconfig, "delete", "nodes")
        assert not can_i(cluster, kubeconfig, "create", "clusterroles")
        assert not can_i(cluster, kubeconfig, "watch", "secrets", "-n", facility_namespace)
        assert not can_i(cluster, kubeconfig, "*", "*")
        other = "kube-system"
        assert can_i(cluster, kubeconfig, "list", "pods", "-n", other) == (mode == "cluster")
        assert can_i(cluster, kubeconfig, "get", "secrets", "-n", other) == (mode == "cluster")

        args = ["--namespace", facility_namespace] if mode == "namespaced" else []
        # Elect on the chart's Lease as its pods do, with only the chart's RBAC (kwok runs no container).
        args += ["--lease-namespace", namespace, "--lease-name", f"{RELEASE}-switchyard-leader",
                 "--identity", "e2e-candidate"]
        env = {**os.environ, "SWITCHYARD_TIMER_SECONDS": "2", "SWITCHYARD_RESYNC_SECONDS": "10"}
        env.pop("KUBECONFIG", None)
        with log_path.open("w") as log:
            operator = subprocess.Popen([*localcluster.operator_command(), "run", "--kubeconfig", str(kubeconfig),
                                         "--metrics-port", "0", "--health-port", "0", *args],
                                        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

        obj = facility(workers=4)
        obj["metadata"]["namespace"] = facility_namespace
        cluster.kube.apply(obj)
        af = wait_ready(cluster, facility_namespace, timeout=240)
        assert af["status"]["workers"] == 4
        assert operator.poll() is None, "the operator exited"
        lease = cluster.kube.get("Lease", namespace, f"{RELEASE}-switchyard-leader")
        assert lease["spec"]["holderIdentity"] == "e2e-candidate"
        text = log_path.read_text()
        refused = _forbidden(text)
        assert not refused, f"the chart's RBAC refused a call:\n{refused}"

        # Deleting the facility removes what the operator made (owner references).
        cluster.kube.delete("AnalysisFacility", facility_namespace, "af")
        wait_for(lambda: not cluster.kube.list("StatefulSet", facility_namespace)
                 and not cluster.kube.list("Deployment", facility_namespace), timeout=120, what="children removed")
    finally:
        if operator is not None:
            operator.terminate()
            try:
                operator.wait(timeout=20)
            except subprocess.TimeoutExpired:
                operator.kill()
        print(f"operator log: {log_path}")
        uninstall = helm(cluster, "uninstall", RELEASE, "-n", namespace, "--wait", "--timeout", "2m", check=False)

    assert uninstall.returncode == 0, uninstall.stderr
    wait_for(lambda: not leftovers(cluster, namespace), timeout=120,
             what=f"nothing left by the release (still: {leftovers(cluster, namespace)})")
    # What the docs say stays: the CRDs (Helm never deletes crds/).
    crds = cluster.kubectl("get", "crd", "-l", "app.kubernetes.io/part-of=switchyard", "-o", "name").split()
    assert sorted(c.split("/", 1)[1] for c in crds) == sorted(p.name.removeprefix("switchyard.dev_").removesuffix(".yaml")
                                                              + ".switchyard.dev" for p in (CHART / "crds").glob("*.yaml"))


def _forbidden(text: str) -> str:
    """Log lines where the API server refused a call, except events posted into a namespace other
    tests are deleting (also a 403, but the namespace's, not RBAC's)."""
    return "\n".join(line for line in text.splitlines()
                     if "forbidden" in line.lower() and "because it is being terminated" not in line)[:3000]
