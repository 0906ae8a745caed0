"""S3 staging builders: consumer Secret, embedded MinIO, worker environment. Pure, no cluster."""

from __future__ import annotations

import base64
import inspect
import json

import pytest
from pydantic import ValidationError

from switchyard.api import S3StagingSpec, WorkerFleetSpec
from switchyard.api.analysisfacility import AnalysisFacilitySpec
from switchyard.builders.s3staging import (
    build_minio, build_staging, consumer_secret_name, endpoint_url, minio_args, minio_name, root_secret_name,
    staging_env)
from switchyard.api.plans import FleetPlan
from switchyard.builders.workerfleet import build_fleet

ACCESS, SECRET = "AKIA-consumer-example", "s3cr3t/with+chars=="
# build_fleet is gaining a required helper_image keyword (ramp-up jitter); pass it when it is there.
HELPER = {"helper_image": "helper:1"} if "helper_image" in inspect.signature(build_fleet).parameters else {}


def external(**extra) -> S3StagingSpec:
    return S3StagingSpec.model_validate({
        "external": {"url": "https://s3.example.org/", "region": "eu-west-1", "credentialsSecret": "admin-keys"},
        "buckets": [{"name": "ntuples", "lifetimeDays": 3}, {"name": "histos"}], **extra})


def embedded(**emb) -> S3StagingSpec:
    return S3StagingSpec.model_validate({
        "embedded": {"servers": 1, "volumeSizeGiB": 50, "nodeSelector": {"switchyard.dev/switch": "rack-a"}, **emb},
        "buckets": [{"name": "scratch"}], "reclaimPolicy": "Delete"})


def decoded(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_model_defaults_and_exclusive_endpoint_sections():
    spec = external()
    assert spec.reclaim_policy == "Retain" and spec.usage_interval_seconds == 60
    assert [(b.lifetime_days, b.expiry, b.quota_gib, b.quota_objects) for b in spec.buckets] == \
        [(3, "Auto", 0, 0), (7, "Auto", 0, 0)]
    assert spec.external.verify_tls is True and spec.external.consumer_credentials_secret is None
    with pytest.raises(ValidationError, match="exactly one endpoint section"):
        S3StagingSpec.model_validate({"buckets": []})
    with pytest.raises(ValidationError, match="exactly one endpoint section"):
        S3StagingSpec.model_validate({"external": {"url": "http://a", "credentialsSecret": "k"}, "embedded": {}})
    for bad in ({"name": "UPPER"}, {"name": "ok-name", "lifetimeDays": 0}, {"name": "ok-name", "quotaGiB": -1},
                {"name": "ok-name", "expiry": "Never"}):
        with pytest.raises(ValidationError):
            external(buckets=[bad])
    with pytest.raises(ValidationError):  # credentials in the URL are refused by its pattern
        S3StagingSpec.model_validate({"external": {"url": "http://user:pw@host", "credentialsSecret": "k"}})
    with pytest.raises(ValidationError):
        external(usageIntervalSeconds=1)


def test_consumer_secret_holds_keys_under_both_names_and_where_to_go():
    [secret] = build_staging("stage", "ns", external(), (ACCESS, SECRET))
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == consumer_secret_name("stage")
    data = decoded(secret)
    assert data == {"accessKey": ACCESS, "secretKey": SECRET, "AWS_ACCESS_KEY_ID": ACCESS,
                    "AWS_SECRET_ACCESS_KEY": SECRET, "endpoint": "https://s3.example.org", "region": "eu-west-1"}
    assert secret["metadata"]["labels"]["switchyard.dev/staging"] == "stage"
    assert build_staging("stage", "ns", external(), (ACCESS, SECRET)) == [secret]  # deterministic


def test_embedded_minio_is_placed_by_the_node_selector_and_keys_come_from_its_secret():
    spec = embedded()
    objs = build_staging("stage", "ns", spec, (ACCESS, SECRET), ("root-user", "root-password"))
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("Secret", root_secret_name("stage")), ("Service", "minio-stage-hl"), ("Service", "minio-stage"),
        ("StatefulSet", "minio-stage"), ("Secret", consumer_secret_name("stage"))]
    assert decoded(objs[0]) == {"accessKey": "root-user", "secretKey": "root-password"}
    sts = objs[3]
    pod = sts["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"switchyard.dev/switch": "rack-a"}
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == \
        "kubernetes.io/hostname"
    container = pod["containers"][0]
    assert container["args"] == ["server", "/data", "--address", ":9000", "--console-address", ":9001"]
    env = {e["name"]: e for e in container["env"]}
    assert env["MINIO_ROOT_USER"]["valueFrom"]["secretKeyRef"] == {"name": root_secret_name("stage"), "key": "accessKey"}
    assert env["MINIO_ROOT_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": root_secret_name("stage"), "key": "secretKey"}
    assert "root-password" not in json.dumps(objs[1:4])  # only the Secrets carry keys
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["readinessProbe"]["httpGet"] == {"path": "/minio/health/ready", "port": 9000}
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"]["requests"]["storage"] == "50Gi" and "storageClassName" not in claim
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"
    assert sts["spec"]["selector"]["matchLabels"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert objs[1]["spec"]["clusterIP"] == "None" and objs[1]["spec"]["publishNotReadyAddresses"] is True
    assert endpoint_url("stage", "ns", spec) == "http://minio-stage.ns.svc:9000"


def test_distributed_minio_names_its_peers_with_minio_expansion():
    spec = embedded(servers=4, storageClass="local-nvme")
    assert minio_args("stage", "ns", spec.embedded)[:2] == \
        ["server", "http://minio-stage-{0...3}.minio-stage-hl.ns.svc:9000/data"]
    sts = build_minio("stage", "ns", spec)[-1]
    assert sts["spec"]["replicas"] == 4 and sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "local-nvme"
    retain = S3StagingSpec.model_validate({**spec.to_wire(), "reclaimPolicy": "Retain"})
    assert build_minio("stage", "ns", retain)[-1]["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"


@pytest.mark.parametrize("servers", [1, 4])
def test_the_statefulsets_governing_service_is_applied_before_it(servers):
    """sync_children applies the children in this order, and a StatefulSet's serviceName "must exist
    before the StatefulSet" (the StatefulSetSpec API reference): its pods' DNS names come from it."""
    objs = build_staging("stage", "ns", embedded(servers=servers), (ACCESS, SECRET), ("root-user", "root-password"))
    position = {(o["kind"], o["metadata"]["name"]): i for i, o in enumerate(objs)}
    sts = next(o for o in objs if o["kind"] == "StatefulSet")
    governing = position[("Service", sts["spec"]["serviceName"])]
    assert objs[governing]["spec"]["clusterIP"] == "None"
    assert governing < position[("StatefulSet", sts["metadata"]["name"])]


def test_embedded_without_root_keys_is_refused():
    with pytest.raises(ValueError):
        build_staging("stage", "ns", embedded(), (ACCESS, SECRET))


def test_minio_names_start_with_a_letter_for_services():
    assert minio_name("1st-area")[0].isalpha()


def test_worker_env_has_endpoint_and_bucket_and_keys_only_by_reference():
    env = staging_env("stage", "ns", external())
    by_name = {e["name"]: e for e in env}
    assert by_name["SWITCHYARD_S3_ENDPOINT"]["value"] == "https://s3.example.org"
    assert by_name["AWS_ENDPOINT_URL_S3"]["value"] == "https://s3.example.org"
    assert by_name["SWITCHYARD_S3_BUCKET"]["value"] == "ntuples"
    assert by_name["SWITCHYARD_S3_BUCKETS"]["value"] == "ntuples,histos"
    assert by_name["AWS_DEFAULT_REGION"]["value"] == "eu-west-1"
    for var, key in (("AWS_ACCESS_KEY_ID", "accessKey"), ("AWS_SECRET_ACCESS_KEY", "secretKey")):
        assert "value" not in by_name[var]
        assert by_name[var]["valueFrom"] == {"secretKeyRef": {"name": consumer_secret_name("stage"), "key": key}}
    assert "SWITCHYARD_S3_VERIFY_TLS" not in by_name
    insecure = S3StagingSpec.model_validate({**external().to_wire(), "external": {
        **external().external.to_wire(), "verifyTls": False}})
    assert {"name": "SWITCHYARD_S3_VERIFY_TLS", "value": "false"} in staging_env("stage", "ns", insecure)
    no_buckets = S3StagingSpec.model_validate({**external().to_wire(), "buckets": []})
    assert "SWITCHYARD_S3_BUCKET" not in {e["name"] for e in staging_env("stage", "ns", no_buckets)}


def test_fleet_workers_get_the_staging_env_before_their_own():
    fleet = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 2, "staging": "stage",
                                            "taskvine": {"managerHost": "m.example.org"},
                                            "env": [{"name": "MY_VAR", "value": "1"}]})
    plan = FleetPlan(facility="af", workers={"sw1": 2})
    env_entries = staging_env("stage", "ns", external())
    [deployment] = build_fleet("team", "ns", fleet, plan, staging_env=env_entries, **HELPER)
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names.index("SWITCHYARD_S3_ENDPOINT") < names.index("MY_VAR")
    assert all(e in env for e in env_entries)
    [plain] = build_fleet("team", "ns", fleet, plan, **HELPER)
    assert not any(e["name"].startswith(("SWITCHYARD_S3", "AWS_")) for e in plain["spec"]["template"]["spec"]["containers"][0]["env"])


def test_inline_staging_in_a_facility_accepts_the_new_fields():
    af = AnalysisFacilitySpec.model_validate({
        "network": {"switches": [{"name": "sw1", "uplinkGbps": 10}]},
        "staging": {"external": {"url": "http://s3.local:9000", "credentialsSecret": "k"},
                    "buckets": [{"name": "out", "quotaGiB": 0.5, "quotaObjects": 10, "expiry": "Sweep"}]}})
    assert af.staging.buckets[0].quota_gib == 0.5
