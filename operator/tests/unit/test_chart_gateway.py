"""The chart's optional dask-gateway: off by default; on, its config is what the backend reads."""

from __future__ import annotations

import pathlib

import pytest
from traitlets.config import PyFileConfigLoader

from test_chart import by_kind, helm, render, CHART, KUBE_VERSION


def gateway_docs(*sets: str) -> list[dict]:
    return [d for d in render("gateway.enabled=true", "gateway.facility=af", *sets, namespace="analysis")
            if d["metadata"]["labels"].get("app.kubernetes.io/component") == "dask-gateway"]


def test_no_gateway_unless_asked():
    assert [d for d in render() if "gateway" in d["metadata"]["name"]] == []


def test_a_gateway_without_its_facility_is_refused():
    result = helm("template", "rel", str(CHART), "--kube-version", KUBE_VERSION, "--set", "gateway.enabled=true",
                  check=False)
    assert result.returncode != 0 and "gateway.facility" in result.stderr


def test_the_gateway_objects_and_their_narrow_rights():
    docs = gateway_docs()
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "Deployment", "Role", "RoleBinding", "Service",
                                               "ServiceAccount"]
    (role,) = by_kind(docs, "Role")
    rights = {(r["apiGroups"][0], res, verb) for r in role["rules"] for res in r["resources"] for verb in r["verbs"]}
    assert ("switchyard.dev", "workerfleets/scale", "patch") in rights and ("", "secrets", "create") in rights
    assert not any(verb in ("update", "*") or res == "*" for _, res, verb in rights)
    (deployment,) = by_kind(docs, "Deployment")
    (service,) = by_kind(docs, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "dask-gateway"  # never the operator's pods
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == role["metadata"]["name"]
    assert pod["containers"][0]["command"] == ["dask-gateway-server", "-f", "/etc/dask-gateway/gateway_config.py"]


def test_the_rendered_config_reaches_the_backend(tmp_path: pathlib.Path):
    from switchyard.gateway.backend import SwitchyardBackend, SwitchyardClusterConfig

    docs = gateway_docs("gateway.images={img:a,img:b}", "gateway.maxClustersPerUser=2",
                        "gateway.clusterMaxCores=100", "gateway.clusterMaxMemoryGib=400",
                        "gateway.idleTimeoutSeconds=3600", "gateway.fleetTemplates.wide.readGbps=2")
    (config_map,) = by_kind(docs, "ConfigMap")
    (tmp_path / "gateway_config.py").write_text(config_map["data"]["gateway_config.py"])
    config = PyFileConfigLoader("gateway_config.py", path=str(tmp_path)).load_config()
    backend = SwitchyardBackend(config=config)
    assert (backend.namespace, backend.facility, backend.gateway_instance) == ("analysis", "af", "rel")
    assert backend.images == ["img:a", "img:b"] and backend.max_clusters_per_user == 2
    assert backend.fleet_templates == {"default": {"readGbps": 0.2}, "wide": {"readGbps": 2}}
    assert backend.api_url == "http://rel-switchyard-gateway.analysis:80/api"
    cluster = SwitchyardClusterConfig(config=config)
    assert (cluster.cluster_max_cores, cluster.cluster_max_memory, cluster.idle_timeout) == (100.0, 400 * 2**30, 3600)
    assert config.DaskGateway.backend_class == "switchyard.gateway.backend.SwitchyardBackend"


@pytest.mark.parametrize("bad", ["gateway.maxWorkerCores=0", "gateway.images={}", "gateway.service.port=0"])
def test_the_schema_refuses_bad_gateway_values(bad):
    result = helm("template", "rel", str(CHART), "--kube-version", KUBE_VERSION, "--set", "gateway.enabled=true",
                  "--set", "gateway.facility=af", "--set", bad, check=False)
    assert result.returncode != 0, bad


@pytest.mark.parametrize("enabled", [True, False])
def test_network_policies_reach_the_backend_and_its_rights(tmp_path: pathlib.Path, enabled):
    from switchyard.gateway.backend import SwitchyardBackend

    docs = gateway_docs(f"networkPolicies.enabled={str(enabled).lower()}")
    (config_map,) = by_kind(docs, "ConfigMap")
    (tmp_path / "gateway_config.py").write_text(config_map["data"]["gateway_config.py"])
    backend = SwitchyardBackend(config=PyFileConfigLoader("gateway_config.py", path=str(tmp_path)).load_config())
    assert backend.network_policies is enabled
    (role,) = by_kind(docs, "Role")
    rights = {(r["apiGroups"][0], res, verb) for r in role["rules"] for res in r["resources"] for verb in r["verbs"]}
    assert (("networking.k8s.io", "networkpolicies", "create") in rights) is enabled


def test_the_gateway_pod_goes_where_its_values_say():
    """gateway.nodeSelector and gateway.tolerations place the gateway pod (the operator's own do not)."""
    (deployment,) = by_kind(gateway_docs(), "Deployment")
    assert "nodeSelector" not in deployment["spec"]["template"]["spec"]
    assert "tolerations" not in deployment["spec"]["template"]["spec"]
    toleration = {"key": "site/analysis", "operator": "Exists", "effect": "NoSchedule"}
    (deployment,) = by_kind(gateway_docs("gateway.nodeSelector.role=analysis", "gateway.tolerations[0].key=site/analysis",
                                         "gateway.tolerations[0].operator=Exists",
                                         "gateway.tolerations[0].effect=NoSchedule",
                                         "nodeSelector.role=operators"), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"role": "analysis"} and pod["tolerations"] == [toleration]
