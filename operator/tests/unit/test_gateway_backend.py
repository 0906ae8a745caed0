"""The dask-gateway backend's pure parts: options → config, cluster → manifests, limits."""

from __future__ import annotations

import asyncio
import json

import pytest
from dask_gateway_server.backends.base import PublicException
from dask_gateway_server.models import User

from switchyard.gateway import manifests as m
from switchyard.gateway.backend import SwitchyardBackend, SwitchyardClusterConfig
from switchyard.gateway.options import GIB, cluster_options

TOKEN = "0123456789abcdef0123456789abcdef"


def cluster(**over) -> m.GatewayCluster:
    base = dict(name="c0ffee" * 5 + "ab", namespace="analysis", instance="gw1", username="alice", facility="af",
                image="ghcr.io/site/dask:1", worker_cores=2, worker_memory_bytes=6 * GIB, api_url="http://gw.analysis:8000/api",
                template={"readGbps": 0.5, "pool": "xcache", "env": [{"name": "ANALYSIS", "value": "ttbar"}]},
                environment={"EXTRA": "1"})
    return m.GatewayCluster(**{**base, **over})


ROOT = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dg-c0ffeec0ffeec0ffeec0", "uid": "uid-root"}}


def test_the_fleet_is_attached_to_the_facility_and_speaks_tls_to_the_gateway_scheduler():
    spec = m.fleet_spec(cluster(), replicas=3)
    assert spec["facilityRef"] == {"name": "af"}
    assert spec["replicas"] == 3
    # the workers speak TLS with the cluster's own pair, from the root Secret
    assert spec["dask"] == {"schedulerAddress": "tls://dg-c0ffeec0ffeec0ffeec0-scheduler.analysis:8786", "createScheduler": False,
                            "tlsSecret": "dg-c0ffeec0ffeec0ffeec0", "clientNamespaces": []}
    assert (spec["image"], spec["cores"], spec["memoryGiB"]) == ("ghcr.io/site/dask:1", 2, 6.0)
    # the template supplies what the analyst does not choose
    assert (spec["readGbps"], spec["pool"]) == (0.5, "xcache")
    assert spec["env"] == [{"name": "ANALYSIS", "value": "ttbar"}, {"name": "EXTRA", "value": "1"}]


def test_the_template_wins_over_the_gateway_environment_for_the_same_variable():
    spec = m.fleet_spec(cluster(environment={"ANALYSIS": "other", "B": "2"}))
    assert spec["env"] == [{"name": "ANALYSIS", "value": "ttbar"}, {"name": "B", "value": "2"}]


@pytest.mark.parametrize("template", [
    {"readGbps": 0},                                     # out of the fleet model's bounds
    {"replicaz": 3},                                     # unknown field
    {"env": [{"name": "SWITCHYARD_SWITCH", "value": "x"}]},  # the operator's variable
])
def test_a_template_the_fleet_model_refuses_is_refused_before_any_write(template):
    with pytest.raises(ValueError):
        m.fleet_spec(cluster(template=template))


def test_every_child_is_owned_by_the_root_secret_and_labelled_with_instance_and_cluster():
    kids = m.children(cluster(), ROOT)
    assert [k["kind"] for k in kids] == ["WorkerFleet", "Deployment", "Service", "NetworkPolicy"]
    assert [k["kind"] for k in m.children(cluster(), ROOT, network_policy=False)] == ["WorkerFleet", "Deployment", "Service"]
    for k in kids:
        assert k["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Secret", "name": ROOT["metadata"]["name"],
                                                     "uid": "uid-root", "blockOwnerDeletion": True}]
        assert k["metadata"]["labels"][m.INSTANCE_LABEL] == "gw1"
        assert k["metadata"]["labels"][m.CLUSTER_LABEL] == cluster().name
        assert k["metadata"]["namespace"] == "analysis"
    assert m.children(cluster(), ROOT) == kids  # deterministic


def test_the_scheduler_admits_only_its_workers_and_the_gateway():
    c = cluster()
    fleet, deployment, _service, policy = m.children(c, ROOT)
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    (rule,) = policy["spec"]["ingress"]
    assert sorted(p["port"] for p in rule["ports"]) == [8786, 8787, 8788]
    workers, gateway = rule["from"]
    # No namespaceSelector: both in the policy's namespace, the gateway's own.
    assert "namespaceSelector" not in workers and "namespaceSelector" not in gateway
    assert workers["podSelector"]["matchLabels"] == {"switchyard.dev/fleet": fleet["metadata"]["name"],
                                                     "app.kubernetes.io/component": "worker"}
    assert gateway["podSelector"]["matchLabels"] == {"app.kubernetes.io/component": "dask-gateway"}


def test_the_scheduler_runs_the_gateway_preload_over_tls_and_takes_its_token_from_the_secret():
    deployment, service = m.scheduler(cluster(idle_timeout=600, adaptive_period=2.5))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    argv = container["command"] + container["args"]
    assert argv[:2] == ["dask", "scheduler"]
    assert argv[argv.index("--protocol") + 1] == "tls"
    assert argv[argv.index("--preload") + 1] == "dask_gateway.scheduler_preload"
    assert argv[argv.index("--dg-idle-timeout") + 1] == "600"
    assert argv[argv.index("--dg-adaptive-period") + 1] == "2.5"
    env = {e["name"]: e for e in container["env"]}
    assert env["DASK_GATEWAY_API_TOKEN"] == {"name": "DASK_GATEWAY_API_TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "dg-c0ffeec0ffeec0ffeec0", "key": "api-token"}}}
    assert env["DASK_GATEWAY_API_URL"]["value"] == "http://gw.analysis:8000/api"
    assert env["DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__KEY"]["value"] == "/etc/dask-credentials/dask.pem"
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == "dg-c0ffeec0ffeec0ffeec0"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert [p["port"] for p in service["spec"]["ports"]] == [8786, 8787, 8788]


def test_the_token_and_key_live_in_the_root_secret_only():
    c = cluster()
    secret = m.credentials(c, b"CERT", b"KEY", TOKEN)
    assert secret["stringData"] == {"dask.crt": "CERT", "dask.pem": "KEY", "api-token": TOKEN}
    assert secret["metadata"]["name"] == m.base_name(c)
    others = json.dumps(m.children(c, ROOT))
    assert TOKEN not in others and "KEY" not in others.replace("SCHEDULER__KEY", "").replace('"key"', "")


@pytest.mark.parametrize("requested, limit, expected", [(50, None, 50), (50, 20, 20), (-1, 5, 0), (0, 0, 0)])
def test_a_heartbeat_count_is_held_to_the_cluster_limit(requested, limit, expected):
    assert m.worker_count(requested, limit) == expected


def test_options_limit_the_image_to_the_allowlist_and_give_memory_in_bytes():
    opts = cluster_options(["img:a", "img:b"], ["default", "wide"], max_cores=8, max_memory_gib=32)
    chosen = opts.parse_options({"worker_cores": 4, "worker_memory": 8, "image": "img:b", "template": "wide"})
    assert opts.get_configuration(chosen, User("alice")) == {
        "worker_cores": 4, "worker_memory": 8 * GIB, "image": "img:b", "template": "wide"}
    defaults = opts.parse_options({})
    assert (defaults["image"], defaults["template"], defaults["worker_cores"]) == ("img:a", "default", 1)
    for bad in ({"image": "evil:latest"}, {"worker_cores": 9}, {"worker_memory": 64.5}, {"template": "nope"}, {"gpu": 1}):
        with pytest.raises((ValueError, TypeError)):
            opts.parse_options(bad)


def test_bounds_below_the_default_worker_still_give_options():
    """An admin's largest worker below the default one (the real-node e2e's maxWorkerMemoryGib: 2 against
    the 4 GiB default): the defaults are held to the bounds. dask-gateway validates a field's default when
    the field is made, so before this every cluster request was refused (HTTP 422, "worker_memory must
    be <= 2.000000, got 4.0")."""
    opts = cluster_options(["img:a"], ["default"], max_cores=1, max_memory_gib=2)
    defaults = opts.parse_options({})
    assert (defaults["worker_cores"], defaults["worker_memory"]) == (1, 2.0)
    assert opts.parse_options({"worker_memory": 1})["worker_memory"] == 1.0


def test_the_gateway_limits_on_cores_and_memory_bound_the_workers():
    cfg = SwitchyardClusterConfig(worker_cores=2, worker_memory=4 * GIB, scheduler_cores=1, scheduler_memory=GIB,
                                  cluster_max_cores=9, cluster_max_memory=100 * GIB)
    assert cfg.cluster_max_workers == 4   # (9 - 1) // 2 cores; memory allows 24
    cfg = SwitchyardClusterConfig(worker_cores=1, worker_memory=4 * GIB, scheduler_memory=GIB, cluster_max_memory=9 * GIB)
    assert cfg.cluster_max_workers == 2


def test_an_option_over_the_limit_is_the_gateways_own_public_error():
    backend = SwitchyardBackend(images=["img:a"], max_worker_cores=4)
    with pytest.raises(PublicException, match="worker_cores"):
        asyncio.run(backend.process_cluster_options(User("alice"), {"worker_cores": 5}))
    options, cfg = asyncio.run(backend.process_cluster_options(User("alice"), {"worker_cores": 3}))
    assert (cfg.worker_cores, cfg.image, cfg.template) == (3, "img:a", "default")


def test_gateway_workers_mount_the_clusters_pair_and_speak_only_tls():
    from switchyard.api.plans import FleetPlan
    from switchyard.api.workerfleet import WorkerFleetSpec
    from switchyard.builders.workerfleet import build_fleet

    spec = WorkerFleetSpec.model_validate(m.fleet_spec(cluster(), replicas=3))
    plan = FleetPlan.model_validate({"facility": "af", "switchLabel": "switchyard.dev/switch", "workers": {"sw1": 3}})
    (deployment,) = build_fleet(m.base_name(cluster()), "analysis", spec, plan, helper_image="img:1")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "dask-tls", "secret": {"secretName": "dg-c0ffeec0ffeec0ffeec0"}}]
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": "dask-tls", "mountPath": "/etc/dask-tls", "readOnly": True}]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "True"
    assert env["DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY"] == "/etc/dask-tls/dask.pem"
    assert container["args"][1].startswith("tls://")
    # a fleet without tlsSecret gets none of it
    plain = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "dask": {"schedulerAddress": "tcp://s.example:8786"}})
    (deployment,) = build_fleet("f", "analysis", plain, plan, helper_image="img:1")
    assert "volumes" not in deployment["spec"]["template"]["spec"]
    assert not any(e["name"].startswith("DASK_DISTRIBUTED") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"])


@pytest.mark.parametrize("dask", [
    {"createScheduler": True, "tlsSecret": "creds"},
    {"schedulerAddress": "tcp://s.example:8786", "tlsSecret": "creds"},
])
def test_tls_secret_needs_a_tls_scheduler_address(dask):
    from switchyard.api.workerfleet import WorkerFleetSpec
    with pytest.raises(ValueError, match="tlsSecret"):
        WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "dask": dask})


def served(secret: dict, **meta) -> dict:
    """`secret` as the API server returns it: stringData folded into base64 data, metadata filled in."""
    import base64
    out = {k: v for k, v in secret.items() if k != "stringData"}
    out["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in secret["stringData"].items()}
    out["metadata"] = {**secret["metadata"], "uid": "u1", "creationTimestamp": "2026-11-23T08:09:33Z", **meta}
    return out


def test_a_restarted_gateway_knows_its_clusters_from_their_root_secrets():
    c = cluster()
    options = {"worker_cores": 2, "worker_memory": 6.0, "image": "ghcr.io/site/dask:1", "template": "default"}
    config = {"worker_cores": 2, "cluster_max_workers": 59, "environment": {"EXTRA": "1"}, "scheduler_cmd": ["dask-scheduler"]}
    back = m.restore(served(m.credentials(c, b"CERT\n", b"KEY\n", TOKEN, options, config)))
    assert back == m.Restored(name=c.name, username="alice", token=TOKEN, tls_cert=b"CERT\n", tls_key=b"KEY\n",
                              options=options, config=config, created="2026-11-23T08:09:33Z")
    assert m.epoch_ms(back.created) == m.epoch_ms("2026-11-23T08:09:33+00:00") == 1795421373000
    # a root being deleted, or another object with the labels, is no cluster
    assert m.restore(served(m.credentials(c, b"C", b"K", TOKEN), deletionTimestamp="2026-11-23T09:00:00Z")) is None
    other = served(m.credentials(c, b"C", b"K", TOKEN))
    other["metadata"]["labels"] = {**other["metadata"]["labels"], m.COMPONENT_LABEL: "scheduler"}
    assert m.restore(other) is None
    assert m.epoch_ms("") is None


@pytest.mark.parametrize("timeout, expected", [(60, ["late"]), (0, []), (200, [])])
def test_a_cluster_whose_scheduler_never_heartbeats_is_overdue(timeout, expected):
    assert m.overdue({"late": 0.0, "fresh": 90.0}, now=100.0, timeout=timeout) == expected
