"""The Helm chart: `helm lint` and `helm template` for default and other values, read as objects.

helm is the pinned binary `bash hack/build-tools.sh` builds into
~/.cache/switchyard/bin (skipped when it is missing, failed in CI).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest
import yaml

from switchyard.generate import alerts, chartvalues
from switchyard.api import KINDS
from switchyard.apply import RESOURCES

REPO = pathlib.Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "switchyard"
CACHE = pathlib.Path(os.environ.get("SWITCHYARD_CACHE", pathlib.Path.home() / ".cache" / "switchyard"))
KUBE_VERSION = "1.31.4"  # the local cluster's (a go-installed helm otherwise assumes v1.20)
MONITORING = ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
              "--api-versions", "monitoring.coreos.com/v1/PodMonitor",
              "--api-versions", "monitoring.coreos.com/v1/PrometheusRule"]


def pinned_binary(name: str) -> str:
    """A tool hack/build-tools.sh builds into the cache (else one on PATH); missing, the test is
    skipped, or failed in CI."""
    path = CACHE / "bin" / name
    if path.exists():
        return str(path)
    if shutil.which(name):
        return shutil.which(name)
    message = f"{name} is missing: run `bash hack/build-tools.sh`"
    pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)


def helm_binary() -> str:
    return pinned_binary("helm")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def render(*sets: str, extra: tuple[str, ...] = (), namespace: str = "sy") -> list[dict]:
    args = ["template", "rel", str(CHART), "-n", namespace, "--kube-version", KUBE_VERSION, *extra]
    for item in sets:
        args += ["--set", item]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str) -> dict:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


VALUE_SETS = {
    "default": (),
    "namespaced": ("watch.mode=namespaced", "watch.namespaces={team-a,team-b}"),
    "everything-on": ("metrics.serviceMonitor.enabled=true", "metrics.cachePodMonitor.enabled=true",
                      "metrics.serviceMonitor.labels.release=kps", "metrics.rules.enabled=true",
                      "metrics.rules.labels.release=kps", "dashboards.namespace=monitoring",
                      "dashboards.annotations.grafana_folder=switchyard", "image.tag=0.1.1",
                      "operator.verbose=true", "operator.extraEnv.FOO=bar", "imagePullSecrets={regcred}",
                      "podLabels.team=hep", "nodeSelector.role=infra"),
    "gateway": ("gateway.enabled=true", "gateway.facility=af"),
    "minimal": ("rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=existing",
                "metrics.service.enabled=false", "dashboards.enabled=false", "rbac.s3StagingSecrets=false"),
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint(name):
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION]
    for item in VALUE_SETS[name]:
        args += ["--set", item]
    out = helm(*args).stdout
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("bad", ["watch.mode=everywhere", "metrics.port=0", "operator.timerSeconds=0",
                                 "unknownKey=1", "metrics.serviceMonitor.interval=often", "image.pullPolicy=Sometimes"])
def test_schema_refuses_bad_values(bad):
    result = helm("template", "rel", str(CHART), "--kube-version", KUBE_VERSION, "--set", bad, check=False)
    assert result.returncode != 0
    assert "schema" in result.stderr, result.stderr


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_object_is_labelled_and_namespaced(name):
    extra = tuple(MONITORING) if name == "everything-on" else ()
    for doc in render(*VALUE_SETS[name], extra=extra):
        labels = doc["metadata"]["labels"]
        for key in ("name", "instance", "component", "part-of", "managed-by"):
            assert f"app.kubernetes.io/{key}" in labels, (doc["kind"], key)
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"].get("namespace"), doc["kind"]


def test_default_objects():
    docs = render()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap", "Deployment",
                     "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"]


def test_operator_pod_meets_restricted_pod_security():
    deployment = one(render(), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= {"emptyDir", "configMap", "secret", "projected", "downwardAPI"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["args"][:3] == ["run", "--metrics-port=8080", "--health-port=8081"]
    assert not any(a.startswith("--namespace") for a in container["args"])
    assert pod["serviceAccountName"] == one(render(), "ServiceAccount")["metadata"]["name"]


def test_values_reach_the_pod():
    deployment = one(render("metrics.port=9100", "health.port=9101", "operator.timerSeconds=2",
                            "operator.exporterImage=reg.example/exp:1", "image.repository=reg.example/sy"), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reg.example/sy:0.1.0"
    assert "--metrics-port=9100" in container["args"] and "--health-port=9101" in container["args"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["SWITCHYARD_TIMER_SECONDS"] == "2"
    assert env["SWITCHYARD_EXPORTER_IMAGE"] == "reg.example/exp:1"
    default_env = {e["name"]: e["value"] for e in one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
                   if "value" in e}
    assert default_env["SWITCHYARD_EXPORTER_IMAGE"] == "ghcr.io/switchyard-dev/switchyard:0.1.0"


def test_prediction_drift_values_become_the_operators_settings():
    from switchyard.observe.drift import DriftRules
    from switchyard.policy.settings import Settings

    def settings(*sets, extra=()):
        container = one(render(*sets, extra=extra), "Deployment")["spec"]["template"]["spec"]["containers"][0]
        return Settings.from_environment({e["name"]: e["value"] for e in container["env"] if "value" in e})
    defaults = settings()
    assert defaults.drift_check is True and defaults.drift == DriftRules()
    # helm --set reads 0.4 as a string; a values file or --set-json gives the number the schema wants.
    changed = settings("operator.predictionDrift.enabled=false", "operator.predictionDrift.sustainSeconds=900",
                       "operator.predictionDrift.floorGbps=5",
                       extra=("--set-json", "operator.predictionDrift.threshold=0.4"))
    assert changed.drift_check is False
    assert changed.drift == DriftRules(threshold=0.4, sustain_seconds=900, floor_gbps=5)
    refused = helm("template", "rel", str(CHART), "--kube-version", KUBE_VERSION,
                   "--set", "operator.predictionDrift.threshold=-1", check=False)
    assert refused.returncode != 0 and "schema" in refused.stderr


def test_image_allowlist_reaches_the_operator_only_when_set():
    def env_of(*sets):
        container = one(render(*sets), "Deployment")["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container["env"]}
    assert "SWITCHYARD_ALLOWED_IMAGES" not in env_of()  # empty list: every image allowed
    env = env_of("images.allowed={ghcr.io/switchyard/,opensciencegrid/xcache:}")
    assert env["SWITCHYARD_ALLOWED_IMAGES"] == "ghcr.io/switchyard/,opensciencegrid/xcache:"
    from switchyard.policy.imagepolicy import ImagePolicy
    assert ImagePolicy.parse(env["SWITCHYARD_ALLOWED_IMAGES"]).entries == ("ghcr.io/switchyard/", "opensciencegrid/xcache:")
    refused = helm("template", "rel", str(CHART), "--kube-version", KUBE_VERSION, "--set", "images.allowed={a b}", check=False)
    assert refused.returncode != 0 and "schema" in refused.stderr


def _rules(role: dict) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def test_cluster_mode_rbac_is_least_privilege_and_covers_what_the_operator_calls():
    docs = render()
    rules = _rules(one(docs, "ClusterRole"))
    assert [r["metadata"]["name"] for r in by_kind(docs, "Role")] == ["rel-switchyard-leader-election"]
    for (group, resource), verbs in rules.items():
        assert "*" not in verbs and group != "*" and resource != "*"
        assert not verbs & {"escalate", "bind", "impersonate", "deletecollection", "update"}, (resource, verbs)
    # Every kind switchyard.apply can address is granted, with the verbs that kind needs.
    for kind, res in RESOURCES.items():
        key = (_group(res.api_version), res.plural)
        if kind == "Lease":  # the leader election's, in the release namespace only
            assert key not in rules
            continue
        assert key in rules, f"{kind} is used by the operator but not granted"
    assert rules[("", "nodes")] == {"list", "watch"}
    assert rules[("", "pods")] == {"list", "watch", "delete"}
    assert rules[("", "events")] == {"create"}
    assert rules[("", "namespaces")] == {"list", "watch"}
    assert rules[("apiextensions.k8s.io", "customresourcedefinitions")] == {"list", "watch"}
    assert rules[("crd.projectcalico.org", "blockaffinities")] == rules[("cilium.io", "ciliumnodes")] == {"list"}
    assert rules[("switchyard.dev", "analysisfacilities/status")] == {"patch"}
    # Children are applied, listed and pruned, never read one by one.
    for key in (("apps", "deployments"), ("apps", "statefulsets"), ("", "configmaps"), ("", "services"),
                ("policy", "poddisruptionbudgets")):
        assert "get" not in rules[key], key
    assert rules[("", "secrets")] == {"get", "list", "create", "patch", "delete"}
    assert "watch" in rules[("apps", "deployments")] and "watch" in rules[("apps", "statefulsets")]
    assert "watch" not in rules[("", "secrets")]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-switchyard", "namespace": "sy"}]


def test_namespaced_mode_grants_only_the_watched_namespaces():
    docs = render(*VALUE_SETS["namespaced"])
    cluster_rules = _rules(one(docs, "ClusterRole"))
    watched = {("", "nodes"), ("", "namespaces"), ("apiextensions.k8s.io", "customresourcedefinitions")}
    listed = {("crd.projectcalico.org", "blockaffinities"), ("cilium.io", "ciliumnodes")}  # CNIs' pod ranges
    assert set(cluster_rules) == watched | listed
    assert all(verbs == ({"list"} if key in listed else {"list", "watch"}) for key, verbs in cluster_rules.items())
    roles = [r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "rel-switchyard"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    bindings = [b for b in by_kind(docs, "RoleBinding") if b["metadata"]["name"] == "rel-switchyard"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["subjects"][0]["namespace"] == "sy"
    for role in roles:
        rules = _rules(role)
        assert ("", "secrets") in rules and ("switchyard.dev", "analysisfacilities") in rules
        assert ("", "nodes") not in rules and ("", "namespaces") not in rules and ("", "pods") in rules
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=team-a", "--namespace=team-b"]


def test_namespaced_mode_defaults_to_the_release_namespace():
    docs = render("watch.mode=namespaced", namespace="facility-ns")
    roles = {r["metadata"]["name"]: r["metadata"]["namespace"] for r in by_kind(docs, "Role")}
    assert roles == {"rel-switchyard": "facility-ns", "rel-switchyard-leader-election": "facility-ns"}


@pytest.mark.parametrize("name", ["default", "namespaced"])
def test_leader_election_may_touch_only_its_lease_in_the_release_namespace(name):
    docs = render(*VALUE_SETS[name])
    (role,) = [r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "rel-switchyard-leader-election"]
    assert role["metadata"]["namespace"] == "sy"
    assert sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r.get("resourceNames", ())), tuple(r["verbs"]))
                  for r in role["rules"]) == [
        (("",), ("events",), (), ("create",)),
        (("",), ("pods",), (), ("patch",)),  # each pod's switchyard.dev/leader label
        (("coordination.k8s.io",), ("leases",), (), ("create",)),
        (("coordination.k8s.io",), ("leases",), ("rel-switchyard-leader",), ("get", "update"))]
    (binding,) = [b for b in by_kind(docs, "RoleBinding") if b["metadata"]["name"] == "rel-switchyard-leader-election"]
    assert binding["roleRef"]["name"] == "rel-switchyard-leader-election" and binding["metadata"]["namespace"] == "sy"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-switchyard", "namespace": "sy"}]
    others = [one(docs, "ClusterRole"), *(r for r in by_kind(docs, "Role") if r is not role)]
    assert all(("coordination.k8s.io", "leases") not in _rules(r) for r in others)
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--lease-name=rel-switchyard-leader" in container["args"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"


@pytest.mark.parametrize("timing", [{"leaseSeconds": 10, "renewDeadlineSeconds": 12},
                                    {"retrySeconds": 10}, {"renewDeadlineSeconds": 15},
                                    {"retrySeconds": 1.5, "renewDeadlineSeconds": 1.5, "leaseSeconds": 5}])
def test_leader_election_timings_that_do_not_fit_are_refused_naming_the_values(timing):
    """Each value is within its schema bounds; together they would let a lease expire under a live leader
    (e2e/test_leader.py: `helm install` on a cluster refuses them the same way)."""
    result = helm("template", "rel", str(CHART), "--kube-version", KUBE_VERSION,
                  "--set-json", f"leaderElection={json.dumps(timing)}", check=False)
    assert result.returncode != 0 and "schema" not in result.stderr, result.stderr
    values = {"retrySeconds": 2, "renewDeadlineSeconds": 10, "leaseSeconds": 15, **timing}
    assert (f"leaderElection: retrySeconds ({values['retrySeconds']:g}) < renewDeadlineSeconds "
            f"({values['renewDeadlineSeconds']:g}) < leaseSeconds ({values['leaseSeconds']:g}) is needed") \
        in result.stderr, result.stderr


def test_leader_election_timings_that_fit_reach_the_operator():
    docs = render(extra=("--set-json", 'leaderElection={"retrySeconds":1.5,"renewDeadlineSeconds":4.5,'
                                       '"leaseSeconds":5}'))
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith(("--lease-seconds", "--renew-deadline", "--lease-retry"))] == [
        "--lease-seconds=5", "--renew-deadline=4.5", "--lease-retry=1.5"]


def test_replicas_spread_over_nodes_with_a_disruption_budget():
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == pdb["spec"]["selector"]["matchLabels"] \
        == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert not by_kind(render("replicas=1"), "PodDisruptionBudget")  # one pod: a budget would block every drain
    own = one(render("affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
                     ".matchExpressions[0].key=infra",
                     "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
                     ".matchExpressions[0].operator=Exists"), "Deployment")
    assert list(own["spec"]["template"]["spec"]["affinity"]) == ["nodeAffinity"]


def test_secrets_only_when_s3_staging_needs_them():
    assert ("", "secrets") not in _rules(one(render("rbac.s3StagingSecrets=false"), "ClusterRole"))
    roles = by_kind(render("watch.mode=namespaced", "rbac.s3StagingSecrets=false"), "Role")
    assert all(("", "secrets") not in _rules(r) for r in roles)


def test_service_monitor_only_when_enabled_and_the_api_exists():
    on = ("metrics.serviceMonitor.enabled=true", "metrics.cachePodMonitor.enabled=true")
    assert not by_kind(render(*on), "ServiceMonitor") and not by_kind(render(*on), "PodMonitor")
    assert not by_kind(render(extra=tuple(MONITORING)), "ServiceMonitor")
    docs = render(*on, "metrics.serviceMonitor.labels.release=kps", extra=tuple(MONITORING))
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    assert all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert service["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    pod_monitor = one(docs, "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "xcache"
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}
    namespaced = one(render(*on, *VALUE_SETS["namespaced"], extra=tuple(MONITORING)), "PodMonitor")
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_prometheus_rule_only_when_enabled_and_the_api_exists():
    rules_api = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
    assert not by_kind(render("metrics.rules.enabled=true"), "PrometheusRule")
    assert not by_kind(render(extra=rules_api), "PrometheusRule")
    # Monitors but no PrometheusRule kind (a cluster with only some of the Prometheus Operator's CRDs).
    others = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor", "--api-versions", "monitoring.coreos.com/v1")
    assert not by_kind(render("metrics.rules.enabled=true", extra=others), "PrometheusRule")

    docs = render("metrics.rules.enabled=true", "metrics.rules.labels.release=kps", "metrics.serviceMonitor.enabled=true",
                  extra=tuple(MONITORING))
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps" and rule["metadata"]["namespace"] == "sy"
    # The generated rules, with the operator's job the one its ServiceMonitor gives: the metrics Service's name.
    job = one(docs, "Service")["metadata"]["name"]
    assert one(docs, "ServiceMonitor")["spec"].get("jobLabel") is None
    shipped = (CHART / alerts.RULES_FILE.removeprefix("charts/switchyard/")).read_text()
    assert alerts.OPERATOR_JOB in shipped
    assert rule["spec"] == yaml.safe_load(shipped.replace(alerts.OPERATOR_JOB, f'job="{job}"'))
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert any(f'job="{job}"' in e for e in exprs) and not any(alerts.OPERATOR_JOB in e for e in exprs)
    # Annotations reach Prometheus as templates (helm leaves {{ $labels.* }} alone).
    annotations = [r["annotations"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert any("{{ $labels.switch }}" in a["description"] for a in annotations)

    custom = one(render("metrics.rules.enabled=true", "metrics.rules.operatorJob=switchyard-operator",
                        extra=rules_api), "PrometheusRule")
    exprs = [r["expr"] for g in custom["spec"]["groups"] for r in g["rules"]]
    assert any('job="switchyard-operator"' in e for e in exprs)
    refused = helm("template", "rel", str(CHART), "--kube-version", KUBE_VERSION,
                   "--set", "metrics.rules.operatorJob=a\"b", check=False)
    assert refused.returncode != 0 and "schema" in refused.stderr, refused.stderr


def test_dashboards_are_configmaps_for_the_grafana_sidecar():
    maps = by_kind(render("dashboards.namespace=monitoring"), "ConfigMap")
    assert len(maps) == len(list((REPO / "dashboards").glob("*.json")))
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["namespace"] == "monitoring"
        ((key, text),) = config_map["data"].items()
        source = REPO / "dashboards" / key.removeprefix("switchyard-")
        assert json.loads(text) == json.loads(source.read_text())
    assert not by_kind(render("dashboards.enabled=false"), "ConfigMap")


def _fields(model, depth=0):
    """(depth, wire name) of every value of the model, in order."""
    for name, info in model.model_fields.items():
        yield depth, info.alias or name
        if isinstance(info.annotation, type) and issubclass(info.annotation, chartvalues.Values):
            yield from _fields(info.annotation, depth + 1)


def test_values_yaml_is_the_model_and_documents_every_value():
    text = (CHART / "values.yaml").read_text()
    assert chartvalues.ChartValues.model_validate(yaml.safe_load(text)) == chartvalues.ChartValues()
    lines = text.splitlines()
    position = 0
    for depth, key in _fields(chartvalues.ChartValues):
        prefix = "  " * depth + key + ":"
        while not lines[position].startswith(prefix):
            position += 1
        above = next(line for line in reversed(lines[:position]) if line.strip())
        assert above.strip().startswith("# "), f"{key} has no description above it"
        position += 1


def test_every_chart_value_has_a_description():
    def walk(model):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name}"
            annotation = info.annotation
            if isinstance(annotation, type) and issubclass(annotation, chartvalues.Values):
                walk(annotation)
    walk(chartvalues.ChartValues)


def test_crds_ship_in_the_chart_and_helm_template_keeps_them_out():
    crds = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert crds == sorted(p.name for p in (REPO / "crds").glob("*.yaml")) and len(crds) == len(KINDS)
    assert not by_kind(render(), "CustomResourceDefinition")
    with_crds = render(extra=("--include-crds",))
    assert len(by_kind(with_crds, "CustomResourceDefinition")) == len(KINDS)
