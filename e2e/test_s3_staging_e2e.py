"""S3 staging end to end: the operator (on the host) against a real MinIO on loopback.

A staging area becomes buckets with lifetime rules and a consumer Secret; a
bucket over quota and an endpoint that goes away set Degraded and recover;
fleets get the endpoint, bucket and Secret reference; Retain keeps the data,
Delete removes it through a finalizer that waits out an outage and says how
to release it. No key ever shows in status, events or the operator's log.
"""

from __future__ import annotations

import base64
import os
import sys

import pytest

import localcluster
from facilities import facility
from support import CLUSTER_NAME, condition, wait_for

sys.path.insert(0, str(localcluster.REPO / "operator" / "tests" / "integration"))
from minio_server import MinioServer, minio_binary  # noqa: E402

pytestmark = pytest.mark.e2e

# The reclaim finalizer's backoff, short for the test (read when the operator starts).
os.environ.setdefault("SWITCHYARD_S3_DELETE_RETRY_SECONDS", "1")
os.environ.setdefault("SWITCHYARD_S3_DELETE_RETRY_MAX_SECONDS", "3")
os.environ.setdefault("SWITCHYARD_S3_DELETE_PATIENCE", "3")
OPERATOR_LOG = localcluster.CACHE / "e2e-logs" / CLUSTER_NAME / "operator.log"


@pytest.fixture(scope="module")
def s3server(tmp_path_factory):
    server = MinioServer(minio_binary(), tmp_path_factory.mktemp("minio-e2e")).start()
    yield server
    server.stop()


def admin_secret(namespace: str, server: MinioServer) -> dict:
    encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-admin", "namespace": namespace},
            "type": "Opaque", "data": {"accessKey": encode(server.user), "secretKey": encode(server.password)}}


def staging(namespace: str, name: str, server: MinioServer, buckets: list[dict], reclaim: str = "Retain") -> dict:
    return {"apiVersion": "switchyard.dev/v1alpha1", "kind": "S3Staging",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"external": {"url": server.url, "credentialsSecret": "s3-admin"}, "buckets": buckets,
                     "reclaimPolicy": reclaim, "usageIntervalSeconds": 5}}


def wait_condition(cluster, namespace, name, ctype, status, reason=None, timeout=90):
    def check():
        obj = cluster.kube.get("S3Staging", namespace, name)
        c = condition(obj, ctype)
        ok = c.get("status") == status and (reason is None or c.get("reason") == reason) \
            and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        return obj if ok else None
    return wait_for(check, timeout, what=f"S3Staging {name} {ctype}={status}" + (f" ({reason})" if reason else ""))


def assert_no_keys(cluster, namespace: str, server: MinioServer) -> None:
    """Neither key in any S3Staging status, any event of the namespace, or the operator's log."""
    texts = [repr(o.get("status")) for o in cluster.kube.list("S3Staging", namespace)]
    texts += [f"{e.get('reason')} {e.get('message')}" for e in cluster.kube.list("Event", namespace)]
    texts.append(OPERATOR_LOG.read_text())
    joined = "\n".join(texts)
    assert "S3Staging" in joined or "bucket" in joined  # the scan saw real content
    for secret in (server.user, server.password):
        assert secret not in joined


def test_staging_area_buckets_quota_and_consumer_secret(cluster, operator, namespace, s3server):
    bucket = f"{namespace}-out"
    cluster.kube.apply(staging(namespace, "stage", s3server, [{"name": bucket, "lifetimeDays": 3, "quotaObjects": 5}]))
    obj = wait_condition(cluster, namespace, "stage", "Degraded", "True", "CredentialsMissing")
    assert "Secret s3-admin not found" in condition(obj, "Degraded")["message"]
    assert bucket not in s3server.s3().buckets()

    cluster.kube.apply(admin_secret(namespace, s3server))
    obj = wait_condition(cluster, namespace, "stage", "Ready", "True")
    assert obj["status"]["endpoint"] == s3server.url
    assert obj["status"]["credentialsSecret"] == "stage-s3-credentials"
    s3 = s3server.s3()
    assert bucket in s3.buckets() and s3.lifetime_days(bucket) == 3
    secret = cluster.kube.get("Secret", namespace, "stage-s3-credentials")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert (data["accessKey"], data["secretKey"]) == (s3server.user, s3server.password)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    events = {e["reason"] for e in cluster.kube.list("Event", namespace)}
    assert {"BucketCreated", "LifetimeSet"} <= events

    s3server.upload(bucket, 8, size_of=lambda i: 100)
    obj = wait_condition(cluster, namespace, "stage", "Degraded", "True", "OverQuota")
    assert "8 objects of 5 allowed" in condition(obj, "Degraded")["message"]
    assert condition(obj, "Ready")["status"] == "True"  # still usable, but told
    entry = obj["status"]["buckets"][0]
    assert (entry["name"], entry["objects"], entry["bytes"], entry["expiry"]) == (bucket, 8, 800, "Lifecycle")
    wait_for(lambda: any(e["reason"] == "OverQuota" for e in cluster.kube.list("Event", namespace)),
             30, what="an OverQuota event")

    cluster.kube.request("PATCH", f"/apis/switchyard.dev/v1alpha1/namespaces/{namespace}/s3stagings/stage",
                         {"spec": {"buckets": [{"name": bucket, "lifetimeDays": 3, "quotaObjects": 50}]}},
                         content_type="application/merge-patch+json")
    wait_condition(cluster, namespace, "stage", "Degraded", "False")
    assert_no_keys(cluster, namespace, s3server)


def test_endpoint_down_is_degraded_then_ready_with_nothing_lost(cluster, operator, namespace, s3server):
    bucket = f"{namespace}-keep"
    cluster.kube.apply(admin_secret(namespace, s3server))
    cluster.kube.apply(staging(namespace, "stage", s3server, [{"name": bucket}]))
    wait_condition(cluster, namespace, "stage", "Ready", "True")
    stored = s3server.upload(bucket, 20)
    wait_for(lambda: (cluster.kube.get("S3Staging", namespace, "stage")["status"]["buckets"][0].get("objects") == 20),
             60, what="20 objects measured")

    s3server.stop()
    try:
        obj = wait_condition(cluster, namespace, "stage", "Degraded", "True", "EndpointUnreachable")
        message = condition(obj, "Degraded")["message"]
        assert s3server.url in message and "Could not connect" in message
        assert condition(obj, "Ready")["status"] == "False"
        assert obj["status"]["buckets"][0]["objects"] == 20  # the last numbers stay in status
    finally:
        s3server.start()
    obj = wait_condition(cluster, namespace, "stage", "Ready", "True")
    assert condition(obj, "Degraded")["status"] == "False"
    usage = s3server.s3().usage(bucket)
    assert (usage.objects, usage.bytes) == (20, stored)
    assert_no_keys(cluster, namespace, s3server)


def test_fleet_workers_get_endpoint_bucket_and_secret_reference(cluster, operator, namespace, s3server):
    bucket = f"{namespace}-ntuples"
    cluster.kube.apply(admin_secret(namespace, s3server))
    cluster.kube.apply(staging(namespace, "stage", s3server, [{"name": bucket}, {"name": f"{namespace}-histos"}]))
    af = facility(workers=2)
    af["metadata"]["namespace"] = namespace
    cluster.kube.apply(af)
    cluster.kube.apply({
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "WorkerFleet",
        "metadata": {"name": "team", "namespace": namespace},
        "spec": {"facilityRef": {"name": "af"}, "replicas": 2, "staging": "stage",
                 "taskvine": {"managerHost": "manager.example.org"}},
    })

    def worker_envs():
        deployments = cluster.kube.list("Deployment", namespace, {"switchyard.dev/fleet": "team"})
        envs = [d["spec"]["template"]["spec"]["containers"][0]["env"] for d in deployments]
        return envs if envs and all(any(e["name"] == "SWITCHYARD_S3_ENDPOINT" for e in env) for env in envs) else None

    for env in wait_for(worker_envs, 120, what="team workers with staging env"):
        by_name = {e["name"]: e for e in env}
        assert by_name["SWITCHYARD_S3_ENDPOINT"]["value"] == s3server.url
        assert by_name["SWITCHYARD_S3_BUCKET"]["value"] == bucket
        assert by_name["SWITCHYARD_S3_BUCKETS"]["value"] == f"{bucket},{namespace}-histos"
        assert by_name["AWS_ACCESS_KEY_ID"] == {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {
            "secretKeyRef": {"name": "stage-s3-credentials", "key": "accessKey"}}}
        assert by_name["AWS_SECRET_ACCESS_KEY"] == {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {
            "secretKeyRef": {"name": "stage-s3-credentials", "key": "secretKey"}}}
    deployments = repr(cluster.kube.list("Deployment", namespace))
    assert s3server.password not in deployments and s3server.user not in deployments
    assert cluster.kube.get("Secret", namespace, "stage-s3-credentials") is not None
    assert_no_keys(cluster, namespace, s3server)


def test_retain_keeps_the_data_and_delete_removes_it(cluster, operator, namespace, s3server):
    kept, dropped = f"{namespace}-kept", f"{namespace}-dropped"
    cluster.kube.apply(admin_secret(namespace, s3server))
    cluster.kube.apply(staging(namespace, "retained", s3server, [{"name": kept}]))
    cluster.kube.apply(staging(namespace, "deleted", s3server, [{"name": dropped}], reclaim="Delete"))
    for name in ("retained", "deleted"):
        wait_condition(cluster, namespace, name, "Ready", "True")
    s3server.upload(kept, 5)
    s3server.upload(dropped, 1500)  # more than one delete batch

    for name in ("retained", "deleted"):
        cluster.kube.delete("S3Staging", namespace, name)
    for name in ("retained", "deleted"):
        wait_for(lambda: cluster.kube.get("S3Staging", namespace, name) is None, 90, what=f"S3Staging {name} gone")
    s3 = s3server.s3()
    assert kept in s3.buckets() and s3.usage(kept).objects == 5
    assert dropped not in s3.buckets()
    reasons = {e["reason"] for e in cluster.kube.list("Event", namespace)}
    assert {"Retained", "Reclaimed"} <= reasons
    assert_no_keys(cluster, namespace, s3server)


def test_delete_waits_out_an_outage_says_how_to_release_and_finishes(cluster, operator, namespace, s3server):
    late, released = f"{namespace}-late", f"{namespace}-released"
    cluster.kube.apply(admin_secret(namespace, s3server))
    cluster.kube.apply(staging(namespace, "late", s3server, [{"name": late}], reclaim="Delete"))
    cluster.kube.apply(staging(namespace, "released", s3server, [{"name": released}], reclaim="Delete"))
    for name in ("late", "released"):
        wait_condition(cluster, namespace, name, "Ready", "True")
    s3server.upload(late, 3)
    s3server.upload(released, 3)

    s3server.stop()
    try:
        for name in ("late", "released"):
            cluster.kube.delete("S3Staging", namespace, name)
        for name in ("late", "released"):
            obj = wait_condition(cluster, namespace, name, "Degraded", "True", "DeletionBlocked", timeout=120)
            message = condition(obj, "Degraded")["message"]
            assert "cannot delete bucket(s)" in message and s3server.url in message
            assert f"kubectl patch s3staging {name} -n {namespace}" in message and "Retain" in message
            assert obj["metadata"].get("deletionTimestamp")  # still there: the data was not silently dropped
        wait_for(lambda: {e["involvedObject"]["name"] for e in cluster.kube.list("Event", namespace)
                          if e["reason"] == "DeletionBlocked"} >= {"late", "released"}, 30,
                 what="DeletionBlocked events")

        # The admin releases one of them, keeping its data.
        cluster.kube.request("PATCH", f"/apis/switchyard.dev/v1alpha1/namespaces/{namespace}/s3stagings/released",
                             {"spec": {"reclaimPolicy": "Retain"}}, content_type="application/merge-patch+json")
        wait_for(lambda: cluster.kube.get("S3Staging", namespace, "released") is None, 60, what="released object gone")
        assert cluster.kube.get("S3Staging", namespace, "late") is not None
    finally:
        s3server.start()
    wait_for(lambda: cluster.kube.get("S3Staging", namespace, "late") is None, 90, what="late object gone")
    s3 = s3server.s3()
    assert late not in s3.buckets()
    assert released in s3.buckets() and s3.usage(released).objects == 3
    assert_no_keys(cluster, namespace, s3server)


def test_embedded_minio_is_built_on_the_selected_nodes(cluster, operator, namespace):
    cluster.kube.apply({
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "S3Staging",
        "metadata": {"name": "stage", "namespace": namespace},
        "spec": {"embedded": {"servers": 2, "volumeSizeGiB": 10, "nodeSelector": {"switchyard.dev/switch": "rack-a"}},
                 "buckets": [{"name": f"{namespace}-scratch"}]},
    })
    sts = wait_for(lambda: cluster.kube.get("StatefulSet", namespace, "minio-stage"), 60, what="the MinIO StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert sts["spec"]["replicas"] == 2
    assert pod["nodeSelector"] == {"switchyard.dev/switch": "rack-a"}
    assert pod["containers"][0]["args"][1] == f"http://minio-stage-{{0...1}}.minio-stage-hl.{namespace}.svc:9000/data"
    # Applied before the StatefulSet (its serviceName must exist first), so they are there once it is.
    assert {s["metadata"]["name"] for s in cluster.kube.list("Service", namespace)} >= {"minio-stage", "minio-stage-hl"}
    root = wait_for(lambda: cluster.kube.get("Secret", namespace, "minio-stage-root"), 30, what="the root Secret")
    consumer = wait_for(lambda: cluster.kube.get("Secret", namespace, "stage-s3-credentials"), 30, what="the consumer Secret")
    assert consumer["data"]["accessKey"] == root["data"]["accessKey"]
    assert consumer["data"]["secretKey"] == root["data"]["secretKey"]
    keys = [base64.b64decode(root["data"][k]).decode() for k in ("accessKey", "secretKey")]
    assert all(len(k) >= 16 for k in keys)

    # The servers cannot start here (no volume provisioner, simulated pods), and the
    # operator says so instead of claiming Ready.
    def honest():
        obj = cluster.kube.get("S3Staging", namespace, "stage")
        ready = condition(obj, "Ready")
        return obj if ready.get("status") == "False" and ready.get("reason") in ("MinIOStarting", "EndpointUnreachable") else None
    obj = wait_for(honest, 60, what="embedded staging reporting why it is not Ready")
    assert obj["status"]["endpoint"] == f"http://minio-stage.{namespace}.svc:9000"
    texts = repr(obj["status"]) + repr(cluster.kube.list("Event", namespace)) + OPERATOR_LOG.read_text()
    assert not any(k in texts for k in keys)
