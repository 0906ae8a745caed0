"""The Helm chart's values, as one typed model.

`make generate` writes charts/switchyard/values.yaml (defaults, every value
with its description as a comment) and charts/switchyard/values.schema.json
(which `helm install`, `helm upgrade` and `helm lint` check values against)
from this model, so the documentation, the defaults and the validation
cannot drift apart.
"""

from __future__ import annotations

import json
import textwrap
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from ..observe.drift import DriftRules

_DRIFT = DriftRules()

Namespace = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
Port = Annotated[int, Field(ge=1, le=65535)]
Duration = Annotated[str, StringConstraints(pattern=r"^[0-9]+(ms|s|m|h)$")]
Labels = dict[str, str]


class Values(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Image(Values):
    repository: str = Field("ghcr.io/switchyard-dev/switchyard", min_length=1,
                            description="Operator image repository (the image the repository's Dockerfile builds).")
    tag: str = Field("", description="Image tag; empty means the chart's appVersion.")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", description="Image pull policy.")


class Images(Values):
    allowed: list[Annotated[str, StringConstraints(min_length=1, pattern=r"^[^\s,]+$")]] = Field(
        default_factory=list,
        description="Image allowlist for what switchyard runs (SWITCHYARD_ALLOWED_IMAGES): prefixes (end a registry "
                    "or organisation with `/`, a repository with `:`), or glob patterns with `*`. A facility, "
                    "pool or fleet asking for another image gets Ready=False, reason ImageNotAllowed, and "
                    "nothing is created. Empty allows every image. The operator's own exporter image is always "
                    "allowed.")


class CacheDisks(Values):
    allowed_host_paths: list[Annotated[str, StringConstraints(pattern=r"^(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+/?$")]] = Field(
        default_factory=lambda: ["/mnt/", "/data/", "/srv/"], min_length=1,
        description="Node directories below which cache pools may put their data and metadata disks "
                    "(SWITCHYARD_ALLOWED_HOST_PATHS). A pool asking for another path (`/etc`, "
                    "`/var/lib/kubelet`, ...) gets Ready=False, reason HostPathNotAllowed, and nothing is "
                    "rendered or changed. The cache hosts' disks are host paths of privileged pods: list only "
                    "directories that hold nothing but cache disks.")


class Watch(Values):
    mode: Literal["cluster", "namespaced"] = Field(
        "cluster", description="`cluster`: watch switchyard objects in every namespace (ClusterRole). `namespaced`: "
                               "watch only `watch.namespaces` (a Role in each; nodes and CRDs are still read "
                               "through a small ClusterRole, since they are cluster-scoped).")
    namespaces: list[Namespace] = Field(
        default_factory=list, description="Namespaces watched in namespaced mode; empty means the release namespace.")


class PredictionDrift(Values):
    enabled: bool = Field(True, description="Compare the Gbps each switch's caches serve, and the load on each "
                                            "direction of its uplink (read from their exporters), with the plan's "
                                            "fair-share prediction, and set Degraded=True PredictionDrift on a "
                                            "sustained disagreement (SWITCHYARD_DRIFT_CHECK); see docs/metrics.md.")
    threshold: float = Field(_DRIFT.threshold, gt=0, le=10, description="A switch's serve or an uplink direction drifts "
                                                                        "when |observed/predicted - 1| exceeds this "
                                                                        "(SWITCHYARD_DRIFT_THRESHOLD) ...")
    sustain_seconds: float = Field(_DRIFT.sustain_seconds, ge=0, le=86400,
                                   description="... for this long (SWITCHYARD_DRIFT_SUSTAIN_SECONDS).")
    clear_threshold: float = Field(_DRIFT.clear_threshold, gt=0, le=10,
                                   description="It clears back within this (SWITCHYARD_DRIFT_CLEAR_THRESHOLD) ...")
    clear_seconds: float = Field(_DRIFT.clear_seconds, ge=0, le=86400,
                                 description="... for this long (SWITCHYARD_DRIFT_CLEAR_SECONDS).")
    floor_gbps: float = Field(_DRIFT.floor_gbps, ge=0, description="A switch's serve or an uplink direction "
                                                                   "both predicted and measured below this is not "
                                                                   "judged; above it, the error is relative to at "
                                                                   "least this (SWITCHYARD_DRIFT_FLOOR_GBPS).")
    idle_fraction: float = Field(_DRIFT.idle_fraction, ge=0, le=1,
                                 description="A facility serving less than this share of its prediction is idle and "
                                             "not judged (SWITCHYARD_DRIFT_IDLE_FRACTION).")


class OperatorSettings(Values):
    timer_seconds: float = Field(5, ge=1, le=3600, description="Seconds between periodic re-checks of every object "
                                                               "(SWITCHYARD_TIMER_SECONDS).")
    resync_seconds: float = Field(60, ge=5, le=86400, description="Seconds after which children are re-applied even "
                                                                  "when nothing changed, undoing drift "
                                                                  "(SWITCHYARD_RESYNC_SECONDS).")
    workers: int = Field(8, ge=1, le=64, description="Handler threads (SWITCHYARD_WORKERS).")
    exporter_image: str = Field("", description="Image of the cache exporter sidecar (SWITCHYARD_EXPORTER_IMAGE); "
                                                "empty means the operator image.")
    verbose: bool = Field(False, description="Log every handler step.")
    prediction_drift: PredictionDrift = Field(default_factory=PredictionDrift,
                                              description="The live check of the plan against observed bytes.")
    extra_env: Labels = Field(default_factory=dict, description="Extra environment variables for the operator, "
                                                                "name: value.")


class MetricsService(Values):
    enabled: bool = Field(True, description="Create a Service in front of the operator's metrics port.")
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field("ClusterIP", description="Service type.")
    port: Port = Field(8080, description="Service port for metrics.")
    annotations: Labels = Field(default_factory=dict, description="Service annotations (e.g. prometheus.io/scrape "
                                                                  "for annotation-based scraping).")


class ServiceMonitor(Values):
    enabled: bool = Field(False, description="Create a ServiceMonitor for the operator (only when the cluster "
                                             "serves monitoring.coreos.com/v1).")
    interval: Duration = Field("30s", description="Scrape interval.")
    scrape_timeout: Duration = Field("10s", description="Scrape timeout.")
    labels: Labels = Field(default_factory=dict, description="Extra labels, e.g. the `release` label your "
                                                             "Prometheus selects monitors by.")


class CachePodMonitor(Values):
    enabled: bool = Field(False, description="Create a PodMonitor for the cache exporters (port `metrics` of every "
                                             "XCache pod switchyard runs; only when the cluster serves "
                                             "monitoring.coreos.com/v1).")
    interval: Duration = Field("15s", description="Scrape interval.")
    labels: Labels = Field(default_factory=dict, description="Extra labels for your Prometheus' selector.")


class AlertRules(Values):
    enabled: bool = Field(False, description="Ship switchyard's alert rules as a PrometheusRule (only when the cluster "
                                             "serves monitoring.coreos.com/v1 PrometheusRules); the alerts and their "
                                             "runbooks are in docs/metrics.md, the same rules as a plain file in "
                                             "rules/alerts.yaml.")
    labels: Labels = Field(default_factory=dict, description="Extra labels, e.g. the `release` label your Prometheus "
                                                             "selects rules by (kube-prometheus-stack: its "
                                                             "ruleSelector).")
    operator_job: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/-]*$")] = Field(
        "", description="The `job` label of the operator's metrics in your Prometheus (SwitchyardOperatorDown "
                        "watches it); empty means the metrics Service's name, the job the chart's ServiceMonitor "
                        "gives.")


class Metrics(Values):
    port: Port = Field(8080, description="Port the operator serves /metrics on (`switchyard run --metrics-port`).")
    service: MetricsService = Field(default_factory=MetricsService, description="The metrics Service.")
    service_monitor: ServiceMonitor = Field(default_factory=ServiceMonitor,
                                            description="Prometheus Operator ServiceMonitor for the operator.")
    cache_pod_monitor: CachePodMonitor = Field(default_factory=CachePodMonitor,
                                               description="Prometheus Operator PodMonitor for the cache exporters.")
    rules: AlertRules = Field(default_factory=AlertRules, description="Prometheus Operator PrometheusRule with "
                                                                      "switchyard's alerts.")


class Health(Values):
    port: Port = Field(8081, description="Port of the liveness endpoint /healthz (`switchyard run --health-port`).")


class LeaderElection(Values):
    lease_seconds: int = Field(15, ge=2, le=300, description="How long a standby waits, on its own clock, after the "
                               "leader's Lease last changed before taking it (`switchyard run --lease-seconds`).")
    renew_deadline_seconds: float = Field(10, gt=0, le=299, description="A leader that has not renewed its Lease "
                                          "for this long exits, before any standby may take it; less than "
                                          "leaseSeconds (`--renew-deadline`; the chart refuses to render "
                                          "otherwise).")
    retry_seconds: float = Field(2, gt=0, le=60, description="Seconds between a leader's renewals and a standby's "
                                 "tries; less than renewDeadlineSeconds (`--lease-retry`; the chart refuses to "
                                 "render otherwise).")


class PodDisruptionBudget(Values):
    enabled: bool = Field(True, description="A PodDisruptionBudget for the operator's pods (with replicas > 1).")
    min_available: int = Field(1, ge=0, description="Operator pods a voluntary disruption (a node drain) leaves "
                               "running.")


class ServiceAccount(Values):
    create: bool = Field(True, description="Create the operator's ServiceAccount.")
    name: str = Field("", description="ServiceAccount name; empty means the release's full name.")
    annotations: Labels = Field(default_factory=dict, description="ServiceAccount annotations.")


class Rbac(Values):
    create: bool = Field(True, description="Create the Roles/ClusterRoles and bindings the operator needs.")
    s3_staging_secrets: bool = Field(True, description="Let the operator read S3 credentials Secrets and write the "
                                                       "consumer Secrets of S3Staging objects (in the watched "
                                                       "namespaces only). Turn off if you do not use S3Staging.")


class Dashboards(Values):
    enabled: bool = Field(True, description="Ship the Grafana dashboards as ConfigMaps for the Grafana sidecar.")
    namespace: str = Field("", description="Namespace of the dashboard ConfigMaps; empty means the release namespace "
                                           "(point it at the namespace your Grafana sidecar watches).")
    labels: Labels = Field(default_factory=lambda: {"grafana_dashboard": "1"},
                           description="Labels the Grafana sidecar finds dashboards by.")
    annotations: Labels = Field(default_factory=dict, description="Annotations, e.g. grafana_folder: switchyard.")


class NetworkPolicies(Values):
    enabled: bool = Field(True, description="NetworkPolicies the operator makes and owns (SWITCHYARD_NETWORK_POLICIES): "
                                            "a fleet's Dask scheduler admits its own workers, the gateway and the "
                                            "namespaces its dask.clientNamespaces names; an embedded MinIO admits its "
                                            "own namespace and the operator. Turn off where the cluster's network "
                                            "plugin enforces none (off prunes those made). Cache hosts use the host "
                                            "network: firewall their node ports instead (docs/admin-guide.md).")


class GatewayImage(Values):
    repository: str = Field("ghcr.io/switchyard-dev/switchyard-gateway", min_length=1,
                            description="Gateway image: dask-gateway-server with switchyard "
                                        "(`pip install 'switchyard[gateway]'`).")
    tag: str = Field("", description="Image tag; empty means the chart's appVersion.")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", description="Image pull policy.")


class GatewayService(Values):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field("ClusterIP", description="Service type.")
    port: Port = Field(80, description="Service port of the gateway (its API, dashboards and the schedulers' "
                                       "TLS routes share it).")


class Gateway(Values):
    enabled: bool = Field(False, description="Run a dask-gateway whose clusters are WorkerFleets of `facility` "
                                             "(switchyard.gateway.backend.SwitchyardBackend), in the release "
                                             "namespace.")
    image: GatewayImage = Field(default_factory=GatewayImage, description="The gateway image.")
    facility: str = Field("", description="Name of the AnalysisFacility (in the release namespace) whose plan "
                                          "places the gateway's fleets.")
    images: list[Annotated[str, StringConstraints(min_length=1, pattern=r"^[^\s,]+$")]] = Field(
        default_factory=lambda: ["ghcr.io/dask/dask:2024.12.1-py3.12"], min_length=1,
        description="Worker images a user may choose (the first is the default); list only images `images.allowed` "
                    "admits.")
    fleet_templates: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"default": {"readGbps": 0.2}},
        description="Named partial WorkerFleet specs (readGbps, pool, staging, tolerations, rampUp, env) a user "
                    "picks with the `template` option.")
    max_worker_cores: int = Field(16, ge=1, le=256, description="Largest `worker_cores` option.")
    max_worker_memory_gib: float = Field(64, gt=0, le=4096, description="Largest `worker_memory` option, in GiB.")
    max_clusters_per_user: int = Field(0, ge=0, description="Clusters one user may hold at once (0: no limit).")
    cluster_max_cores: float = Field(0, ge=0, description="The gateway's per-cluster core limit (0: none).")
    cluster_max_memory_gib: float = Field(0, ge=0, description="The gateway's per-cluster memory limit in GiB "
                                                               "(0: none).")
    idle_timeout_seconds: float = Field(0, ge=0, description="An idle cluster is deleted after this many seconds "
                                                             "(0: never).")
    service: GatewayService = Field(default_factory=GatewayService, description="The gateway's Service.")
    resources: dict[str, Any] = Field(
        default_factory=lambda: {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        description="Gateway container resources.")
    node_selector: Labels = Field(default_factory=dict, description="Node selector of the gateway pod.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Tolerations of the gateway pod.")


class ChartValues(Values):
    image: Image = Field(default_factory=Image, description="The operator image.")
    images: Images = Field(default_factory=Images, description="Images the operator may run for facilities.")
    cache: CacheDisks = Field(default_factory=CacheDisks, description="Where cache pools may put their disks.")
    image_pull_secrets: list[str] = Field(default_factory=list, description="Names of Secrets to pull the image with.")
    name_override: str = Field("", description="Replaces the chart name in object names.")
    fullname_override: str = Field("", description="Replaces the release-and-chart name of objects.")
    watch: Watch = Field(default_factory=Watch, description="What the operator watches, and so which RBAC it gets.")
    operator: OperatorSettings = Field(default_factory=OperatorSettings, description="Operator settings.")
    replicas: int = Field(2, ge=1, le=10, description="Operator pods. One holds the leader Lease and reconciles; the "
                          "others are standbys that take over when its Lease expires (docs/admin-guide.md, \"Several replicas\").")
    leader_election: LeaderElection = Field(default_factory=LeaderElection,
                                            description="The leader Lease (<fullname>-leader in the release "
                                                        "namespace).")
    pod_disruption_budget: PodDisruptionBudget = Field(default_factory=PodDisruptionBudget,
                                                       description="The operator's PodDisruptionBudget.")
    metrics: Metrics = Field(default_factory=Metrics, description="Prometheus metrics.")
    health: Health = Field(default_factory=Health, description="Liveness endpoint.")
    service_account: ServiceAccount = Field(default_factory=ServiceAccount, description="The operator's identity.")
    rbac: Rbac = Field(default_factory=Rbac, description="Access rights.")
    dashboards: Dashboards = Field(default_factory=Dashboards, description="Grafana dashboards.")
    resources: dict[str, Any] = Field(
        default_factory=lambda: {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        description="Operator container resources.")
    pod_annotations: Labels = Field(default_factory=dict, description="Extra annotations on the operator pod.")
    pod_labels: Labels = Field(default_factory=dict, description="Extra labels on the operator pod.")
    priority_class_name: str = Field("", description="PriorityClass of the operator pod.")
    node_selector: Labels = Field(default_factory=dict, description="Node selector of the operator pod.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Tolerations of the operator pod.")
    affinity: dict[str, Any] = Field(default_factory=dict, description="Affinity of the operator pod; empty means "
                                     "the chart's: operator pods preferably on different nodes.")
    gateway: Gateway = Field(default_factory=Gateway, description="An optional dask-gateway for analysts.")
    network_policies: NetworkPolicies = Field(default_factory=NetworkPolicies,
                                              description="Network policies for the pods the operator makes.")
    global_: dict[str, Any] = Field(default_factory=dict, alias="global",
                                    description="Values a parent chart shares with its subcharts (unused here).")


# ---------------------------------------------------------------- rendering
def _inline(schema: Any, defs: dict) -> Any:
    """Resolve $refs (Helm's validator wants a self-contained document) and drop titles."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            target = defs[schema["$ref"].rsplit("/", 1)[-1]]
            merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            return _inline(merged, defs)
        return {k: _inline(v, defs) for k, v in schema.items() if k != "title" and k != "$defs"}
    if isinstance(schema, list):
        return [_inline(item, defs) for item in schema]
    return schema


def schema() -> dict:
    raw = ChartValues.model_json_schema(by_alias=True)
    out = _inline(raw, raw.get("$defs", {}))
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "description": "Values of the switchyard chart. Generated by `make generate` from "
                           "operator/switchyard/generate/chartvalues.py; do not edit.",
            **{k: v for k, v in out.items() if k != "description"}}


def schema_json() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


VALUES_HEADER = """\
# Values of the switchyard chart.
# Generated by `make generate` from operator/switchyard/generate/chartvalues.py (the same
# model values.schema.json comes from); do not edit. Every value is described
# above it; `helm install --set key=value` or `-f my-values.yaml` to change it.
"""


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, 100 - len(indent))]


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("\n...").strip()


def _render(model: BaseModel, indent: str) -> list[str]:
    lines: list[str] = []
    after_block = False
    for name, info in type(model).model_fields.items():
        if not info.description:
            raise ValueError(f"chart value {type(model).__name__}.{name} has no description")
        key = info.alias or name
        value = getattr(model, name)
        block = isinstance(value, BaseModel) or (isinstance(value, dict) and bool(value))
        if lines and (block or after_block):
            lines.append("")
        after_block = block
        lines += _comment(info.description, indent)
        if isinstance(value, BaseModel):
            lines.append(f"{indent}{key}:")
            lines += _render(value, indent + "  ")
        elif isinstance(value, dict) and value:
            lines.append(f"{indent}{key}:")
            nested = yaml.safe_dump(value, default_flow_style=False, sort_keys=True)
            lines += [f"{indent}  {line}" for line in nested.splitlines()]
        else:
            lines.append(f"{indent}{key}: {_scalar(value)}")
    return lines


def values_yaml() -> str:
    return VALUES_HEADER + "\n" + "\n".join(_render(ChartValues(), "")) + "\n"
