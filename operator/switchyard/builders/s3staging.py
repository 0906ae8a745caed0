"""S3Staging → its consumer credentials Secret and, when embedded, a MinIO StatefulSet.

Pure: keys come in as arguments (the handler reads or generates them), and
nothing here reads a clock or randomness. Worker environment for fleets that
reference a staging area is built here too, with keys only as Secret
references.
"""

from __future__ import annotations

import base64

from ..api.s3staging import Embedded, S3StagingBody
from .common import (COMPONENT_LABEL, OPERATOR_COMPONENT, PolicyPeers, child_name, ingress_policy, labels,
                     one_per_node, restricted_pod_security_context, restricted_security_context, tolerations)

STAGING_LABEL = "switchyard.dev/staging"
MINIO_PORT = 9000
MINIO_CONSOLE_PORT = 9001
MINIO_UID = 1000
ACCESS_KEY, SECRET_KEY = "accessKey", "secretKey"
CHILD_KINDS = ("Secret", "Service", "StatefulSet", "NetworkPolicy")


def consumer_secret_name(staging: str) -> str:
    """The Secret workers take their keys from."""
    return child_name(staging, "s3-credentials")


def minio_name(staging: str) -> str:
    """StatefulSet and client Service of an embedded MinIO (starts with a letter, as Service names must)."""
    return child_name("minio", staging)


def minio_headless_name(staging: str) -> str:
    return child_name("minio", staging, "hl")


def root_secret_name(staging: str) -> str:
    return child_name("minio", staging, "root")


def endpoint_url(staging: str, namespace: str, spec: S3StagingBody) -> str:
    """The URL consumers (and the operator) use."""
    if spec.external is not None:
        return spec.external.url.rstrip("/")
    return f"http://{minio_name(staging)}.{namespace}.svc:{MINIO_PORT}"


def region(spec: S3StagingBody) -> str:
    return spec.external.region if spec.external is not None else "us-east-1"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def build_secret(name: str, component: str, staging: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": labels(component, staging, **{STAGING_LABEL: staging})},
        "type": "Opaque",
        "data": {k: _b64(v) for k, v in sorted(data.items())},
    }


def build_consumer_secret(staging: str, namespace: str, spec: S3StagingBody, access_key: str, secret_key: str) -> dict:
    """Keys for workers, under our names and the AWS variable names (for envFrom), plus where to go."""
    return build_secret(consumer_secret_name(staging), "s3-credentials", staging, {
        ACCESS_KEY: access_key, SECRET_KEY: secret_key,
        "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key,
        "endpoint": endpoint_url(staging, namespace, spec), "region": region(spec),
    })


def build_root_secret(staging: str, access_key: str, secret_key: str) -> dict:
    """The embedded MinIO's root user (MinIO reads MINIO_ROOT_USER / MINIO_ROOT_PASSWORD)."""
    return build_secret(root_secret_name(staging), "minio", staging, {ACCESS_KEY: access_key, SECRET_KEY: secret_key})


def _selector(staging: str) -> dict[str, str]:
    return {STAGING_LABEL: staging, COMPONENT_LABEL: "minio"}


def minio_args(staging: str, namespace: str, embedded: Embedded) -> list[str]:
    """`minio server` arguments; several servers use MinIO's own {0...N} expansion (no shell)."""
    if embedded.servers == 1:
        volumes = ["/data"]
    else:
        host = f"{minio_name(staging)}-{{0...{embedded.servers - 1}}}.{minio_headless_name(staging)}.{namespace}.svc"
        volumes = [f"http://{host}:{MINIO_PORT}/data"]
    return ["server", *volumes, "--address", f":{MINIO_PORT}", "--console-address", f":{MINIO_CONSOLE_PORT}"]


def build_minio(staging: str, namespace: str, spec: S3StagingBody) -> list[dict]:
    """Headless Service, client Service and StatefulSet of an embedded MinIO, in the order they are applied:
    the StatefulSet's serviceName "must exist before the StatefulSet" (the StatefulSetSpec API reference)."""
    embedded = spec.embedded
    assert embedded is not None
    name, headless = minio_name(staging), minio_headless_name(staging)
    selector = _selector(staging)
    pod_labels = {**labels("minio", staging), **selector}
    root = root_secret_name(staging)
    probe = lambda path, delay: {"httpGet": {"path": path, "port": MINIO_PORT}, "initialDelaySeconds": delay,  # noqa: E731
                                 "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6}
    container = {
        "name": "minio",
        "image": embedded.image,
        "command": ["minio"],
        "args": minio_args(staging, namespace, embedded),
        "env": [
            {"name": "MINIO_ROOT_USER", "valueFrom": {"secretKeyRef": {"name": root, "key": ACCESS_KEY}}},
            {"name": "MINIO_ROOT_PASSWORD", "valueFrom": {"secretKeyRef": {"name": root, "key": SECRET_KEY}}},
            {"name": "HOME", "value": "/tmp"},
        ],
        "ports": [{"name": "s3", "containerPort": MINIO_PORT}, {"name": "console", "containerPort": MINIO_CONSOLE_PORT}],
        "readinessProbe": probe("/minio/health/ready", 5),
        "livenessProbe": probe("/minio/health/live", 30),
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
        "securityContext": restricted_security_context(MINIO_UID),
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    claim_spec: dict = {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": f"{embedded.volume_size_gib}Gi"}}}
    if embedded.storage_class:
        claim_spec["storageClassName"] = embedded.storage_class
    pod_spec: dict = {
        "affinity": one_per_node(selector),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": restricted_pod_security_context(MINIO_UID),
        "containers": [container],
    }
    if embedded.node_selector:
        pod_spec["nodeSelector"] = dict(sorted(embedded.node_selector.items()))
    pod_spec.update(tolerations(embedded.tolerations))
    retention = "Delete" if spec.reclaim_policy == "Delete" else "Retain"
    statefulset = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {
            "serviceName": headless,
            "replicas": embedded.servers,
            # Distributed MinIO waits for all its peers: start them together.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": retention, "whenScaled": "Retain"},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim_spec}],
        },
    }
    ports = [{"name": "s3", "port": MINIO_PORT, "targetPort": MINIO_PORT}]
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {"selector": selector, "ports": ports},
    }
    headless_service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": headless, "labels": pod_labels},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": selector, "ports": ports},
    }
    return [headless_service, service, statefulset]


def minio_policy(staging: str, peers: PolicyPeers) -> dict:
    """Who may reach an embedded MinIO (S3 and console): pods in the staging area's namespace (its
    consumers, and the servers themselves) and the operator, which manages the buckets."""
    same_namespace = {"podSelector": {}}
    return ingress_policy(minio_name(staging), labels("minio", staging, **{STAGING_LABEL: staging}),
                          _selector(staging), [same_namespace, peers.chart_pods(OPERATOR_COMPONENT)],
                          [MINIO_PORT, MINIO_CONSOLE_PORT])


def build_staging(staging: str, namespace: str, spec: S3StagingBody,
                  consumer_keys: tuple[str, str], root_keys: tuple[str, str] | None = None,
                  policies: PolicyPeers | None = None) -> list[dict]:
    """Every child of one staging area, in a deterministic order.

    `policies`: an embedded MinIO gets its NetworkPolicy, admitting these too (None: no policy)."""
    out = [build_consumer_secret(staging, namespace, spec, *consumer_keys)]
    if spec.embedded is not None:
        if root_keys is None:
            raise ValueError("an embedded staging area needs its root keys")
        out = [build_root_secret(staging, *root_keys), *build_minio(staging, namespace, spec),
               *([minio_policy(staging, policies)] if policies is not None else []), *out]
    return out


def staging_env(staging: str, namespace: str, spec: S3StagingBody) -> list[dict]:
    """Environment of a worker whose fleet references `staging`: where, which bucket, and the
    keys as references to the consumer Secret (never their values)."""
    url = endpoint_url(staging, namespace, spec)
    secret = consumer_secret_name(staging)
    names = [b.name for b in spec.buckets]
    env = [
        {"name": "SWITCHYARD_S3_STAGING", "value": staging},
        {"name": "SWITCHYARD_S3_ENDPOINT", "value": url},
    ]
    if names:
        env += [{"name": "SWITCHYARD_S3_BUCKET", "value": names[0]},
                {"name": "SWITCHYARD_S3_BUCKETS", "value": ",".join(names)}]
    if spec.external is not None and not spec.external.verify_tls:
        env.append({"name": "SWITCHYARD_S3_VERIFY_TLS", "value": "false"})
    env += [
        # boto3 >= 1.28 and the AWS CLI read the endpoint from here.
        {"name": "AWS_ENDPOINT_URL_S3", "value": url},
        {"name": "AWS_DEFAULT_REGION", "value": region(spec)},
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": secret, "key": ACCESS_KEY}}},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": SECRET_KEY}}},
    ]
    return env
