"""The NetworkPolicies the operator owns (issue 26, part 3): they select the pods they guard and admit
the pods they name, read against the labels of the pods switchyard and the chart actually make.

Whether a network plugin enforces them is a property of the cluster, not of these objects: here the
selectors are evaluated as the API server defines them (matchLabels and matchExpressions, an empty
selector matching everything, a peer without namespaceSelector meaning the policy's namespace).
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

import rendered
from switchyard.api import WorkerFleetSpec
from switchyard.api.plans import FleetPlan
from switchyard.builders import s3staging, workerfleet
from switchyard.gateway import manifests as gateway
from switchyard.builders.common import NAMESPACE_NAME_LABEL
from switchyard.cli.render import render_files
from switchyard.policy.settings import Settings
from test_chart import render

NAMESPACE = "analysis"  # rendered.WIDE's
RELEASE_NAMESPACE = "sy"


def selects(selector: dict | None, labels: dict) -> bool:
    """A label selector against a label set, as Kubernetes evaluates it (In, NotIn, Exists, DoesNotExist)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def admits(policy: dict, pod_labels: dict, pod_namespace: str, port: int) -> bool:
    """Whether the policy lets a pod (its labels, its namespace) in on `port`."""
    policy_namespace = policy["metadata"]["namespace"]
    namespace_labels = {NAMESPACE_NAME_LABEL: pod_namespace}
    for rule in policy["spec"].get("ingress", []):
        if rule.get("ports") and port not in [p["port"] for p in rule["ports"]]:
            continue
        for peer in rule.get("from", []):
            if "namespaceSelector" in peer:
                in_namespace = selects(peer["namespaceSelector"], namespace_labels)
            else:
                in_namespace = pod_namespace == policy_namespace
            if in_namespace and selects(peer.get("podSelector", {}), pod_labels):
                return True
    return False


def pods(objs: list[dict]) -> list[tuple[str, dict]]:
    """(workload name, its pods' labels) of every workload among objs."""
    return [(o["metadata"]["name"], rendered.pod_template(o)["metadata"]["labels"])
            for o in objs if rendered.pod_template(o) is not None]


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> list[dict]:
    return rendered.render_facility(rendered.WIDE, tmp_path_factory.mktemp("np"))


def policies(objs: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkPolicy"}


def test_each_policy_selects_exactly_the_pods_it_guards(wide):
    found = policies(wide)
    assert set(found) == {"wide-dask-scheduler", "minio-wide-staging"}
    for name, policy in found.items():
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        selected = [w for w, labels in pods(wide) if selects(policy["spec"]["podSelector"], labels)]
        assert selected == [name], (name, selected)


def test_the_scheduler_admits_its_workers_and_its_namespace_and_no_other(wide):
    policy = policies(wide)["wide-dask-scheduler"]
    labels = dict(pods(wide))
    comm, dashboard = workerfleet.DASK_SCHEDULER_PORT, workerfleet.DASK_DASHBOARD_PORT
    own_workers = [labels[n] for n in ("wide-dask-rack-a", "wide-dask-rack-c")]
    for pod in own_workers:
        assert admits(policy, pod, NAMESPACE, comm)
    # A pod in another namespace, even one labelled as this fleet's worker, is refused.
    assert not admits(policy, own_workers[0], "elsewhere", comm)
    assert not admits(policy, {}, "elsewhere", comm) and not admits(policy, {}, "elsewhere", dashboard)
    # A client (a notebook) in the fleet's own namespace may connect: the default clientNamespaces.
    assert admits(policy, {"app": "jupyter"}, NAMESPACE, comm) and admits(policy, {}, NAMESPACE, dashboard)
    # Only the scheduler's ports.
    assert not admits(policy, own_workers[0], NAMESPACE, 22)


def with_client_namespaces(names: list[str]) -> dict:
    """rendered.WIDE with its Dask fleet's clientNamespaces set."""
    dask, vine = rendered.WIDE["spec"]["fleets"]
    fleets = [{**dask, "dask": {"createScheduler": True, "clientNamespaces": names}}, vine]
    return {**rendered.WIDE, "spec": {**rendered.WIDE["spec"], "fleets": fleets}}


def test_client_namespaces_replace_the_fleets_own(tmp_path):
    objs = rendered.render_facility(with_client_namespaces(["jupyter"]), tmp_path)
    policy = policies(objs)["wide-dask-scheduler"]
    labels = dict(pods(objs))
    comm = workerfleet.DASK_SCHEDULER_PORT
    assert admits(policy, labels["wide-dask-rack-a"], NAMESPACE, comm)  # its own workers, always
    assert admits(policy, {}, "jupyter", comm)
    # The namespace at large is no longer in: another fleet's workers there are refused.
    assert not admits(policy, {}, NAMESPACE, comm)
    assert not admits(policy, labels["wide-vine-rack-b"], NAMESPACE, comm)


def test_minio_admits_its_namespace_and_not_others(wide):
    policy = policies(wide)["minio-wide-staging"]
    labels = dict(pods(wide))
    for workload in ("wide-dask-rack-a", "wide-vine-rack-b", "minio-wide-staging"):  # consumers, and its peers
        assert admits(policy, labels[workload], NAMESPACE, s3staging.MINIO_PORT), workload
    assert not admits(policy, labels["wide-dask-rack-a"], "elsewhere", s3staging.MINIO_PORT)


@pytest.mark.parametrize("release_namespace", [RELEASE_NAMESPACE, None])
def test_the_charts_gateway_and_operator_pods_are_admitted(tmp_path, release_namespace):
    chart = render("gateway.enabled=true", "gateway.facility=af", namespace=RELEASE_NAMESPACE)
    chart_pods = {name.removeprefix("rel-"): labels for name, labels in pods(chart)}
    assert set(chart_pods) == {"switchyard", "switchyard-gateway"}
    objs = rendered.render_facility(rendered.WIDE, tmp_path) if release_namespace is None else render_with(
        tmp_path, Settings(release_namespace=release_namespace))
    found = policies(objs)
    scheduler, minio = found["wide-dask-scheduler"], found["minio-wide-staging"]
    assert admits(scheduler, chart_pods["switchyard-gateway"], RELEASE_NAMESPACE, workerfleet.DASK_SCHEDULER_PORT)
    assert admits(minio, chart_pods["switchyard"], RELEASE_NAMESPACE, s3staging.MINIO_PORT)
    # Each only the one it needs: the operator is no client of a scheduler, the gateway none of MinIO.
    assert not admits(scheduler, chart_pods["switchyard"], RELEASE_NAMESPACE, workerfleet.DASK_SCHEDULER_PORT)
    assert not admits(minio, chart_pods["switchyard-gateway"], RELEASE_NAMESPACE, s3staging.MINIO_PORT)
    # With the release namespace known, the same labels elsewhere are not the chart's pods.
    other = admits(scheduler, chart_pods["switchyard-gateway"], "elsewhere", workerfleet.DASK_SCHEDULER_PORT)
    assert other is (release_namespace is None)


def render_with(tmp_path, settings: Settings) -> list[dict]:
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(rendered.WIDE))
    return render_files(str(path), str(rendered.TOPOLOGY), settings)


def test_policies_off_makes_none_and_prunes_those_made(tmp_path):
    objs = render_with(tmp_path, dataclasses.replace(Settings(), network_policies=False))
    assert not policies(objs)
    # Off prunes what was made: the kinds each reconcile prunes include the policies.
    assert "NetworkPolicy" in workerfleet.CHILD_KINDS and "NetworkPolicy" in s3staging.CHILD_KINDS


def test_settings_from_the_charts_environment():
    assert Settings.from_environment({}).network_policies is True
    assert Settings.from_environment({}).release_namespace is None
    off = Settings.from_environment({"SWITCHYARD_NETWORK_POLICIES": "false", "SWITCHYARD_RELEASE_NAMESPACE": "sy"})
    assert off.network_policies is False and off.release_namespace == "sy"


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_the_chart_passes_the_switch_and_its_namespace(enabled):
    deployment = next(d for d in render(f"networkPolicies.enabled={enabled}", namespace=RELEASE_NAMESPACE)
                      if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    settings = Settings.from_environment({k: v for k, v in env.items() if v is not None})
    assert settings.network_policies is (enabled == "true") and settings.release_namespace == RELEASE_NAMESPACE


def test_a_gateway_clusters_scheduler_admits_its_workers_and_the_charts_gateway(tmp_path):
    # The gateway cluster's objects, rendered as the backend creates them, against the chart's gateway pod.
    cluster = rendered.GATEWAY_CLUSTER
    policy = gateway.scheduler_policy(cluster)
    scheduler_pods = [labels for _, labels in pods(gateway.scheduler(cluster))]
    assert scheduler_pods and all(selects(policy["spec"]["podSelector"], p) for p in scheduler_pods)
    chart_gateway = next(labels for name, labels in pods(render("gateway.enabled=true", "gateway.facility=af",
                                                                namespace=cluster.namespace))
                         if name.endswith("-gateway"))
    port = gateway.SCHEDULER_PORT
    assert admits(policy, chart_gateway, cluster.namespace, port)
    # Its workers: the pods of the cluster's WorkerFleet, as the operator builds them.
    fleet = gateway.fleet(cluster, replicas=2)
    spec = WorkerFleetSpec.model_validate({**fleet["spec"], "facilityRef": {"name": "wide"}})
    plan = FleetPlan(facility="wide", workers={"rack-a": 2})
    workers = [labels for _, labels in pods(workerfleet.build_fleet(fleet["metadata"]["name"], cluster.namespace, spec,
                                                                     plan, helper_image="img:1"))]
    assert workers and all(admits(policy, w, cluster.namespace, port) for w in workers)
    # Nobody else: not a client elsewhere or in the same namespace, not the workers of another fleet.
    assert not admits(policy, {}, cluster.namespace, port)
    assert not admits(policy, chart_gateway, "elsewhere", port)
    other = dict(pods(rendered.render_facility(rendered.WIDE, tmp_path)))["wide-dask-rack-a"]
    assert not admits(policy, other, cluster.namespace, port)
