"""What switchyard generates, rendered offline, for the tests that check every pod it makes.

`workloads()` is every object the operator would apply for the example facilities
(examples/*.yaml on the mini topology, through `switchyard.cli.render.render_files`, the
functions the handlers call), for a facility that also has an embedded MinIO and a
TaskVine fleet, and for one dask-gateway cluster (what its backend creates, from
switchyard.gateway.manifests). A new kind of pod the builders make shows up here.
"""

from __future__ import annotations

import pathlib

import yaml

from switchyard.gateway import manifests as gateway
from switchyard.cli.render import render_files

REPO = pathlib.Path(__file__).resolve().parents[3]
TOPOLOGY = REPO / "e2e" / "topologies" / "mini.yaml"
EXAMPLES = sorted(p for p in (REPO / "examples").glob("*.yaml")
                  if (yaml.safe_load(p.read_text()) or {}).get("kind") == "AnalysisFacility")
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod")
COMPONENT = "app.kubernetes.io/component"

# What the examples lack: an embedded MinIO, a TaskVine fleet, a fleet without jitter.
WIDE = {
    "apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility",
    "metadata": {"name": "wide", "namespace": "analysis"},
    "spec": {
        "targetGbps": 100, "routing": "auto",
        "network": {"switches": [{"name": "rack-a", "uplinkGbps": 80}, {"name": "rack-b", "uplinkGbps": 80},
                                 {"name": "rack-c", "uplinkGbps": 40}]},
        "cachePools": [{"name": "xcache", "serveGbps": 45, "origin": {"host": "origin.example.org"},
                        "storage": {"dataPaths": ["/mnt/nvme0", "/mnt/nvme1"]}}],
        "staging": {"embedded": {"servers": 2}, "buckets": [{"name": "scratch"}]},
        "fleets": [
            {"name": "dask", "replicas": 4, "cores": 2, "memoryGiB": 4, "readGbps": 1, "staging": "wide-staging",
             "dask": {"createScheduler": True}, "rampUp": {"jitterSeconds": 5}},
            {"name": "vine", "replicas": 3, "cores": 2, "memoryGiB": 4, "readGbps": 1,
             "taskvine": {"managerHost": "manager.example.org", "managerPort": 9123}, "rampUp": {"jitterSeconds": 0}},
        ],
    },
}
GATEWAY_CLUSTER = gateway.GatewayCluster(
    name="c0ffee" * 5 + "ab", namespace="analysis", instance="gw", username="alice", facility="wide",
    image="ghcr.io/dask/dask:2026.8.0", worker_cores=2, worker_memory_bytes=4 * 2**30,
    api_url="http://gw.analysis:8000/api")

GATEWAY_ROOT = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": gateway.base_name(GATEWAY_CLUSTER), "uid": "uid"}}


def render_facility(doc: dict, tmp: pathlib.Path) -> list[dict]:
    path = tmp / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return render_files(str(path), str(TOPOLOGY))


def workloads(tmp: pathlib.Path) -> dict[str, list[dict]]:
    """Source name -> the objects it renders to (every kind, not only workloads)."""
    out = {example.name: render_files(str(example), str(TOPOLOGY)) for example in EXAMPLES}
    out["wide (staging, taskvine)"] = render_facility(WIDE, tmp)
    out["gateway cluster"] = gateway.children(GATEWAY_CLUSTER, GATEWAY_ROOT)
    return out


def pod_template(obj: dict) -> dict | None:
    """The pod an object makes ({"metadata", "spec"}), or None for an object that makes none."""
    if obj["kind"] == "Pod":
        return obj
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]
    if obj["kind"] in WORKLOAD_KINDS:
        return obj["spec"]["template"]
    return None


def is_cache_pod(obj: dict) -> bool:
    """An XCache host's pod (builders/xcachepool.py): host network and host paths by design."""
    return (pod_template(obj) or {}).get("metadata", {}).get("labels", {}).get(COMPONENT) == "xcache"


def containers(pod_spec: dict) -> list[dict]:
    return [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]
