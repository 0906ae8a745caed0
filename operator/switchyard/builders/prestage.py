"""CachePrestage → a ConfigMap of its URLs (inline lists) and the Job whose runner reads them.

The Job runs `switchyard prestage` (prestage/runner.py) in the pool's image, or the prestage's own: it needs
xrdcp, xrdfs and switchyard, as switchyard's XCache image (images/xcache) has them. It reads the ring as a
worker of the pool does, from the routing ConfigMap of a fleet that reads through the pool (mounted as a
directory: the kubelet refreshes it, so a cache leaving the ring mid-prestage leaves the runner's too).

A Job's pod template cannot change once made: the Job's name carries a digest of everything its pod is made
from, so a changed spec (or pace, or ring source) makes a new Job and the old one is pruned. Least
privilege, as every generated pod: Pod Security 'restricted', no service account token, no service links.
"""

from __future__ import annotations

import hashlib
import json

from ..api.prestage import CachePrestageSpec
from ..prestage import JOURNAL_DIR, METRICS_PORT
from ..routing import HASH_RULE, HOT_FILE_ENV, RING_FILE_ENV, RING_KEY
from .common import child_name, labels, restricted_pod_security_context, restricted_security_context
from .workerfleet import ROUTING_DIR, XROOTD_CLIENT_ENV, routing_config_name
from .xcachepool import endpoint

PRESTAGE_LABEL = "switchyard.dev/prestage"
CHILD_KINDS = ("Job", "ConfigMap")  # the kinds pruned; the order children are applied is build_prestage's
URLS_DIR = "/etc/switchyard/prestage"
URLS_KEY = "urls"
CONTAINER = "prestage"
BACKOFF_LIMIT = 4  # a runner that read no file (no cache answered) exits 1 and runs again (journaled files skipped)
# Memory: the runner (Python, its threads, the xrdfs stats 8 at a time) and one xrdcp per file read at once.
# Measured here (XRootD 5.5.3, the Job's XRD_CPCHUNKSIZE=1 MiB, one chunk in flight): an xrdcp reading a
# 64 MiB file, at full speed or paced, peaks at 12.5 MB RSS, an xrdfs stat at 11.9 MB, the runner's Python
# with its imports at 25 MB.
RUNNER_MEMORY_MI = 256
XRDCP_MEMORY_MI = 16


def resources(parallel: int) -> dict:
    """The runner's requests and limits: its memory limit grows with the xrdcp processes it runs at once."""
    return {"requests": {"cpu": "250m", "memory": "128Mi"},
            "limits": {"memory": f"{RUNNER_MEMORY_MI + XRDCP_MEMORY_MI * parallel}Mi"}}


def urls_config_name(prestage: str) -> str:
    return child_name(prestage, "urls")


def job_name(prestage: str, digest: str) -> str:
    return child_name(prestage, "fetch", digest[:8])


def build_urls_config(prestage: str, spec: CachePrestageSpec) -> dict | None:
    """The inline list as the runner reads it (one URL per line); None when the list is a ConfigMap of the user's."""
    if spec.urls is None:
        return None
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": urls_config_name(prestage),
                     "labels": labels("prestage", prestage, **{PRESTAGE_LABEL: prestage})},
        "data": {URLS_KEY: "".join(f"{url}\n" for url in spec.urls)},
    }


def _urls_volume(prestage: str, spec: CachePrestageSpec) -> dict:
    if spec.urls_from is not None:
        source = {"name": spec.urls_from.config_map, "items": [{"key": spec.urls_from.key, "path": URLS_KEY}]}
    else:
        source = {"name": urls_config_name(prestage)}
    return {"name": "urls", "configMap": source}


def build_job(prestage: str, namespace: str, spec: CachePrestageSpec, *, pool: str, pool_port: int,
              origin_mode: str, ring_fleet: str, image: str, gbps: float, uid: int) -> dict:
    """The Job reading the list at `gbps` in total through the ring of `ring_fleet`'s routing ConfigMap."""
    selector = {PRESTAGE_LABEL: prestage}
    pod_labels = {**labels("prestage", prestage), **selector}
    env = [
        {"name": "SWITCHYARD_ROUTING", "value": "hashed"},
        {"name": "SWITCHYARD_HASH_RULE", "value": HASH_RULE},
        {"name": RING_FILE_ENV, "value": f"{ROUTING_DIR}/{RING_KEY}"},
        # No hot list: each file goes to its home, the first of the rule's order (a hot file's other homes
        # fill as their readers open it), not to the one of its homes this pod's name would pick.
        {"name": HOT_FILE_ENV, "value": "/dev/null"},
        # While the ring file names no cache, reads go to the pool-wide Service (as a worker's would).
        {"name": "SWITCHYARD_CACHE_ENDPOINT", "value": "root://" + endpoint(pool, namespace, pool_port)},
        {"name": "SWITCHYARD_CACHE_ORIGIN_MODE", "value": origin_mode},
        *({"name": k, "value": v} for k, v in XROOTD_CLIENT_ENV),
        {"name": "HOME", "value": "/tmp"},
    ]
    container = {
        "name": CONTAINER,
        "image": image,
        "command": ["switchyard", "prestage", "--urls", f"{URLS_DIR}/{URLS_KEY}", "--gbps", f"{gbps:g}",
                    "--parallel", str(spec.parallel), "--metrics-port", str(METRICS_PORT)],
        "env": env,
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        "resources": resources(spec.parallel),
        "securityContext": {**restricted_security_context(uid), "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "urls", "mountPath": URLS_DIR, "readOnly": True},
            {"name": "routing", "mountPath": ROUTING_DIR, "readOnly": True},
            {"name": "journal", "mountPath": JOURNAL_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod_spec = {
        "restartPolicy": "OnFailure",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": restricted_pod_security_context(uid),
        "containers": [container],
        "volumes": [
            _urls_volume(prestage, spec),
            {"name": "routing", "configMap": {"name": routing_config_name(ring_fleet)}},
            # Outlives a restart of the container (not of the pod): the runner's journal of finished files.
            {"name": "journal", "emptyDir": {"sizeLimit": "64Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    digest = hashlib.sha256(json.dumps(pod_spec, sort_keys=True).encode()).hexdigest()
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(prestage, digest), "labels": pod_labels},
        "spec": {"backoffLimit": BACKOFF_LIMIT, "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec}},
    }


def build_prestage(prestage: str, namespace: str, spec: CachePrestageSpec, **job) -> list[dict]:
    """Every child of one prestage, in the order they are applied (the list before the Job that mounts it)."""
    config = build_urls_config(prestage, spec)
    return [*([config] if config else []), build_job(prestage, namespace, spec, **job)]
