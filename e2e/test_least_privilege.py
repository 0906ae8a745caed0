"""Least privilege, as the API server sees it (issue 8).

1. The chart's RBAC, listed with `kubectl auth can-i --list` as the operator's
   ServiceAccount, equals an explicit, commented allowlist: no wildcards, and
   Secrets only for S3 staging.
2. Every pod switchyard generates is dry-run (server side) into a namespace
   enforcing Pod Security `restricted` and admitted, except cache hosts: they
   need host networking and host paths, which `restricted` and `baseline`
   refuse, so their namespace must be `privileged` (as docs/admin-guide.md says).
3. With an image allowlist (SWITCHYARD_ALLOWED_IMAGES), a fleet or facility
   asking for another image gets Ready=False, reason ImageNotAllowed, a
   Warning event naming the image, and no child is created or changed.

Runs on a cluster of its own (`<SWITCHYARD_E2E_CLUSTER>-lp`) with its own
operator, so that the session's operator (no allowlist) cannot act on these
objects: SWITCHYARD_E2E_CLUSTER=sy-priv pytest e2e/test_least_privilege.py
"""

from __future__ import annotations

import copy
import pathlib
import sys
import time
import uuid

import localcluster
import pytest
import yaml

from harness import Cluster, cluster_lifetime, start_operator, stop_operator
from facilities import facility
from support import CLUSTER_NAME, ready_condition, wait_for, wait_ready
from test_chart_install import CHART, helm

from switchyard.apply import RESOURCES, ApiError
from switchyard.policy.imagepolicy import ENV as ALLOWED_IMAGES_ENV

sys.path.insert(0, str(localcluster.REPO / "operator" / "tests" / "unit"))
import rendered  # noqa: E402

pytestmark = pytest.mark.e2e

LP_CLUSTER = f"{CLUSTER_NAME}-lp"
LOGS = localcluster.CACHE / "e2e-logs" / LP_CLUSTER
RELEASE = "lp"
SERVICE_ACCOUNT = f"{RELEASE}-switchyard"

# ------------------------------------------------------------------ the RBAC allowlist
# Resource as `kubectl auth can-i --list` prints it -> (verbs, why the operator needs them).
# Nothing here is a wildcard; a grant missing from these lists, or a listed one the
# chart stops granting, fails the test, so the list and the chart move together.

# Cluster-scoped, from the chart's ClusterRole in every mode.
CLUSTER_WIDE = {
    "nodes": ({"list", "watch"}, "kopf index of nodes: switch and NVMe labels, NIC annotation, allocatable"),
    "customresourcedefinitions.apiextensions.k8s.io": ({"list", "watch"}, "kopf learns when its CRDs are served"),
    "namespaces": ({"list", "watch"}, "kopf follows namespaces as they come and go"),
    "blockaffinities.crd.projectcalico.org": ({"list"}, "Calico's pod address blocks per node, for the client maps"),
    "ciliumnodes.cilium.io": ({"list"}, "Cilium's cluster-pool pod CIDRs per node, for the client maps"),
}
# In each watched namespace (every namespace in cluster mode).
PER_NAMESPACE = {
    **{f"{plural}.switchyard.dev": ({"get", "list", "watch", "create", "patch", "delete"},
                                    "watched by kopf (list, watch, patch for its progress annotations); the "
                                    "facility applies (create, patch) and prunes (delete) its children; a "
                                    "reconcile re-reads its owner (get)")
       for plural in ("analysisfacilities", "xcachepools", "workerfleets", "s3stagings", "cacheprestages")},
    **{f"{plural}.switchyard.dev/status": ({"patch"}, "conditions and plan summaries, server-side applied")
       for plural in ("analysisfacilities", "xcachepools", "workerfleets", "s3stagings", "cacheprestages")},
    "deployments.apps": ({"list", "watch", "create", "patch", "delete"},
                         "worker and scheduler Deployments: applied, pruned, indexed by kopf"),
    "statefulsets.apps": ({"list", "watch", "create", "patch", "delete"},
                          "cache host and MinIO StatefulSets: applied, pruned, indexed by kopf"),
    "jobs.batch": ({"list", "create", "patch", "delete"},
                   "a CachePrestage's Job: applied, pruned, listed for its Complete or Failed condition"),
    "configmaps": ({"list", "create", "patch", "delete"}, "rendered xrootd configs: applied, pruned"),
    "services": ({"list", "create", "patch", "delete"}, "per-switch cache, scheduler and MinIO Services"),
    "poddisruptionbudgets.policy": ({"list", "create", "patch", "delete"}, "one PDB per cache pool"),
    "networkpolicies.networking.k8s.io": ({"list", "create", "patch", "delete"},
                                           "a Dask scheduler's and an embedded MinIO's ingress policy"),
    "pods": ({"list", "watch", "delete"}, "pods whose node moved to another switch are deleted to be re-placed; "
             "cache pods indexed by kopf (a host not Ready leaves the hash ring)"),
    "events": ({"create"}, "Created, Ready and reason events on switchyard objects"),
}
# Secrets, only with rbac.s3StagingSecrets (the default) and only in watched namespaces:
# S3Staging reads the credentials Secrets a staging area names (get) and applies the root
# and consumer Secrets it owns (create, patch), which the owner-label prune lists and
# deletes (list, delete). No watch: the operator keeps no cache of Secrets.
SECRETS = {"secrets": ({"get", "list", "create", "patch", "delete"}, "S3 staging credentials, see above")}

# In the release namespace only, from the leader election's Role: the first candidate creates
# the Lease (`create` cannot be limited to a name), every pod posts an Event on it when it
# takes it. Reading and renewing it are limited to its name (LEADER_LEASE).
LEADER_ELECTION = {
    "leases.coordination.k8s.io": ({"create"}, "the first operator pod creates the leader Lease"),
    "events": ({"create"}, "a LeaderElection event on the Lease when a pod takes it"),
    "pods": ({"patch"}, "each operator pod labels its own switchyard.dev/leader=true|false"),
}
LEADER_LEASE = {("leases.coordination.k8s.io", f"[{RELEASE}-switchyard-leader]"): {"get", "update"}}

# Granted to every authenticated user by Kubernetes' default ClusterRoles
# (system:basic-user, system:discovery, system:public-info-viewer,
# system:service-account-issuer-discovery), not by the chart.
EVERY_USER = {
    "selfsubjectreviews.authentication.k8s.io": {"create"},       # kubectl auth whoami
    "selfsubjectaccessreviews.authorization.k8s.io": {"create"},  # kubectl auth can-i
    "selfsubjectrulesreviews.authorization.k8s.io": {"create"},   # kubectl auth can-i --list
}
EVERY_USER_URLS = {  # all [get]: discovery, version, health, OIDC discovery
    "/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/api", "/api/*", "/apis",
    "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/openid/v1/jwks", "/openid/v1/jwks/",
    "/readyz", "/version", "/version/",
}


def verbs_of(*tables: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for table in tables:
        for resource, (verbs, _why) in table.items():
            out[resource] = out.get(resource, set()) | verbs
    return out


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def lpcluster() -> Cluster:
    yield from cluster_lifetime(LP_CLUSTER)


@pytest.fixture
def namespaces(lpcluster):
    """make(prefix, level=None): a fresh namespace, enforcing Pod Security `level` if given."""
    made: list[str] = []

    def make(prefix: str, level: str | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        labels = {} if level is None else {"pod-security.kubernetes.io/enforce": level,
                                           "pod-security.kubernetes.io/enforce-version": "latest"}
        lpcluster.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
        made.append(name)
        return name
    yield make
    for name in made:
        lpcluster.kube.delete("Namespace", None, name)


# ------------------------------------------------------------------ 1. RBAC
def can_i_list(cluster, release_ns: str, namespace: str) -> tuple[dict[str, set[str]], set[str], dict]:
    """`kubectl auth can-i --list` as the operator's ServiceAccount: resource -> verbs, non-resource URLs, and
    (resource, resource names) -> verbs for the rules limited to names."""
    out = cluster.kubectl("auth", "can-i", "--list", "-n", namespace,
                          f"--as=system:serviceaccount:{release_ns}:{SERVICE_ACCOUNT}")
    lines = [line for line in out.splitlines() if line.strip()]
    header = lines[0]
    cols = [header.index(h) for h in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    resources: dict[str, set[str]] = {}
    urls: set[str] = set()
    named: dict[tuple[str, str], set[str]] = {}
    for line in lines[1:]:
        resource, url, names, verbs = (line[a:b].strip() for a, b in zip(cols, cols[1:] + [None]))
        verb_set = set(verbs.strip("[]").split())
        if names != "[]":
            named.setdefault((resource, names), set()).update(verb_set)
        elif resource:
            assert url == "[]", line
            resources.setdefault(resource, set()).update(verb_set)
        else:
            assert verb_set == {"get"}, line
            urls.add(url.strip("[]"))
    return resources, urls, named


@pytest.mark.parametrize("mode", ["cluster", "namespaced", "cluster-without-s3-secrets"])
def test_chart_rbac_is_exactly_the_allowlist(lpcluster, namespaces, mode):
    release_ns = namespaces("lp-op")
    watched = namespaces("lp-af")
    unwatched = namespaces("lp-other")
    values = ["--set", f"watch.mode={'namespaced' if mode == 'namespaced' else 'cluster'}"]
    if mode == "namespaced":
        values += ["--set", f"watch.namespaces={{{watched}}}"]
    if mode == "cluster-without-s3-secrets":
        values += ["--set", "rbac.s3StagingSecrets=false"]
    # The operator's pod need not run for RBAC to be in place: no --wait.
    helm(lpcluster, "install", RELEASE, str(CHART), "-n", release_ns, *values)
    try:
        namespaced = {**PER_NAMESPACE, **({} if mode == "cluster-without-s3-secrets" else SECRETS)}
        full = verbs_of(CLUSTER_WIDE, namespaced)
        expected = {watched: full, unwatched: full, "kube-system": full, release_ns: verbs_of(CLUSTER_WIDE, namespaced,
                                                                                             LEADER_ELECTION)}
        if mode == "namespaced":
            expected.update({ns: verbs_of(CLUSTER_WIDE) for ns in (unwatched, "kube-system")})
            expected[release_ns] = verbs_of(CLUSTER_WIDE, LEADER_ELECTION)
        for ns, allowed in expected.items():
            granted, urls, named = can_i_list(lpcluster, release_ns, ns)
            assert named == (LEADER_LEASE if ns == release_ns else {}), f"{ns}: rules limited to names: {named}"
            defaults = {r: granted.pop(r) for r in list(granted) if r in EVERY_USER}
            assert defaults == EVERY_USER, f"{ns}: default grants changed: {defaults}"
            assert urls == EVERY_USER_URLS, f"{ns}: non-resource URLs: {sorted(urls ^ EVERY_USER_URLS)}"
            for resource, verbs in granted.items():
                assert "*" not in resource and "*" not in verbs, f"{ns}: wildcard grant {resource} {verbs}"
            extra = {r: v - allowed.get(r, set()) for r, v in granted.items() if v - allowed.get(r, set())}
            missing = {r: v - granted.get(r, set()) for r, v in allowed.items() if v - granted.get(r, set())}
            assert not extra, f"{ns}: granted beyond the allowlist: {extra}"
            assert not missing, f"{ns}: allowlisted but not granted (stale list or broken chart): {missing}"
        if mode != "cluster-without-s3-secrets":
            # What Secrets allow, precisely: never watch, never beyond the watched namespaces.
            assert expected[watched]["secrets"] == {"get", "list", "create", "patch", "delete"}
        if mode != "cluster":
            assert "secrets" not in expected[unwatched if mode == "namespaced" else watched]
    finally:
        uninstall = helm(lpcluster, "uninstall", RELEASE, "-n", release_ns, "--wait", "--timeout", "2m", check=False)
    assert uninstall.returncode == 0, uninstall.stderr


# ------------------------------------------------------------------ 2. Pod Security
def generated_workloads(tmp_path: pathlib.Path) -> list[dict]:
    """Every workload the operator would create for the example facilities and a facility with an
    embedded MinIO and a TaskVine fleet (what `switchyard render` prints), and a dask-gateway
    cluster's scheduler: the renders operator/tests/unit/test_pod_security.py checks field by field."""
    return [o for objs in rendered.workloads(tmp_path).values() for o in objs if o["kind"] in ("Deployment", "StatefulSet")]


def pod_of(workload: dict) -> dict:
    """The pod a workload's controller would create (a StatefulSet adds its claims' volumes)."""
    template = workload["spec"]["template"]
    spec = copy.deepcopy(template["spec"])
    for claim in workload["spec"].get("volumeClaimTemplates", []):
        claim_name = claim["metadata"]["name"]
        spec.setdefault("volumes", []).append(
            {"name": claim_name, "persistentVolumeClaim": {"claimName": f"{claim_name}-{workload['metadata']['name']}-0"}})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{workload['metadata']['name']}-0", "labels": dict(template["metadata"].get("labels", {}))},
            "spec": spec}


def dry_run(cluster, namespace: str, pod: dict) -> str:
    """'' if the API server would admit the pod, else its refusal."""
    try:
        cluster.kube.request("POST", RESOURCES["Pod"].path(namespace), pod, {"dryRun": "All"})
        return ""
    except ApiError as exc:
        if exc.status != 403:
            raise
        return str(exc)


# Why a cache host is beyond Pod Security `restricted`, as the API server words it, and why each is needed.
CACHE_HOST_REASONS = {
    "host namespaces": "host networking: clients must be handed the node's own address (coffea-casa#374)",
    "hostPort": "host networking: each container port (xrootd's, the exporter's) is the node's own",
    "restricted volume types": "hostPath: the node's NVMe disks",
    "unrestricted capabilities": "prepare: CAP_CHOWN, to hand the disks' directories to the xrootd user",
    "runAsNonRoot != true": "prepare: root, for CAP_CHOWN to be effective",
    "runAsUser=0": "prepare: root, for CAP_CHOWN to be effective",
}


def psa_reasons(refusal: str) -> dict[str, str]:
    """The check names of a Pod Security refusal ('host namespaces (...), runAsUser=0 (...)'), each with
    its reason from CACHE_HOST_REASONS ('?' for one not listed there)."""
    listed = refusal.split('violates PodSecurity "restricted:latest": ', 1)[-1]
    outside, depth = [], 0
    for char in listed:  # the names: what lies outside the parentheses
        depth += char == "("
        if depth == 0:
            outside.append(char)
        depth -= char == ")"
    names = {name.strip() for name in "".join(outside).split(",") if name.strip()}
    return {name: CACHE_HOST_REASONS.get(name, "?") for name in names}


def is_cache_host(workload: dict) -> bool:
    return workload["spec"]["template"]["spec"].get("hostNetwork", False)


def test_every_generated_pod_passes_restricted_except_cache_hosts(lpcluster, namespaces, tmp_path):
    workloads = generated_workloads(tmp_path)
    kinds = sorted({(w["kind"], w["metadata"]["labels"].get("app.kubernetes.io/component", "")) for w in workloads})
    # The test covers every kind of pod switchyard makes: workers of both engines, the Dask
    # scheduler, cache hosts and MinIO.
    assert kinds == [("Deployment", "scheduler"), ("Deployment", "worker"), ("StatefulSet", "minio"),
                     ("StatefulSet", "xcache")], kinds
    engines = {c["command"][0] for w in workloads for c in w["spec"]["template"]["spec"]["containers"]
               if c["name"] == "worker"}
    assert engines == {"dask", "vine_worker"}
    assert any(w["spec"]["template"]["spec"].get("initContainers") for w in workloads if not is_cache_host(w))

    restricted = namespaces("lp-restricted", "restricted")
    baseline = namespaces("lp-baseline", "baseline")
    privileged = namespaces("lp-privileged", "privileged")
    for workload in workloads:
        pod = pod_of(workload)
        name = workload["metadata"]["name"]
        refusal = dry_run(lpcluster, restricted, pod)
        if not is_cache_host(workload):
            assert refusal == "", f"{workload['kind']} {name} is refused under restricted: {refusal}"
            continue
        # Cache hosts: host networking (clients must reach the node's own address, coffea-casa#374)
        # and host paths (the NVMe disks) are beyond `restricted` and `baseline` alike.
        assert 'violates PodSecurity "restricted:latest"' in refusal, refusal
        assert "host namespaces (hostNetwork=true)" in refusal, refusal
        host_paths = [f'"{v["name"]}"' for v in pod["spec"]["volumes"] if "hostPath" in v]
        volumes = f"volume {host_paths[0]} uses" if len(host_paths) == 1 else f"volumes {', '.join(host_paths)} use"
        assert f'restricted volume types ({volumes} restricted volume type "hostPath")' in refusal, refusal
        # And nothing else but the prepare step's root with CAP_CHOWN (it hands the disks to the xrootd
        # user): every container drops all else, escalates nothing, runs the RuntimeDefault profile.
        assert psa_reasons(refusal) == CACHE_HOST_REASONS, refusal
        assert 'container "prepare" must not include "CHOWN"' in refusal, refusal
        refusal = dry_run(lpcluster, baseline, pod)
        assert 'violates PodSecurity "baseline:latest"' in refusal, refusal
        assert "host namespaces (hostNetwork=true)" in refusal and "hostPath" in refusal, refusal
        assert dry_run(lpcluster, privileged, pod) == "", f"cache host {name} refused under privileged"


# ------------------------------------------------------------------ 3. image allowlist
ALLOWED = "ghcr.io/dask/,hub.opensciencegrid.org/opensciencegrid/xcache:,docker.io/cclnd/cctools-env:"
ROGUE_IMAGE = "evil.example/miner:1"


@pytest.fixture
def allowlisted_operator(lpcluster, namespaces, request):
    """A namespace and an operator watching only it, with an image allowlist."""
    ns = namespaces("lp-images")
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"{request.node.name}.log"
    proc = start_operator(lpcluster.kubeconfig, log_path, "--namespace", ns, **{ALLOWED_IMAGES_ENV: ALLOWED})
    yield ns, proc, log_path
    # kopf holds finalizers on objects it runs daemons for: delete them while it still runs.
    for kind in ("WorkerFleet", "AnalysisFacility"):
        for obj in lpcluster.kube.list(kind, ns):
            lpcluster.kube.delete(kind, ns, obj["metadata"]["name"])
    try:
        wait_for(lambda: not lpcluster.kube.list("WorkerFleet", ns) and not lpcluster.kube.list("AnalysisFacility", ns),
                 timeout=120, what="switchyard objects deleted")
    finally:
        stop_operator(proc)
        print(f"operator log: {log_path}")


def warning_events(cluster, ns: str, name: str) -> list[dict]:
    events = yaml.safe_load(cluster.kubectl("get", "events", "-n", ns, "-o", "yaml"))["items"]
    return [e for e in events if e["involvedObject"]["name"] == name and e["type"] == "Warning"]


def deployments(cluster, ns: str) -> dict[str, str]:
    return {d["metadata"]["name"]: d["metadata"]["resourceVersion"] for d in cluster.kube.list("Deployment", ns)}


def test_image_allowlist_refuses_other_images_and_writes_nothing(lpcluster, allowlisted_operator):
    ns, proc, log_path = allowlisted_operator
    # Allowed images (the defaults, from the allowlisted registries): the facility converges.
    af = facility(workers=3)
    af["metadata"]["namespace"] = ns
    lpcluster.kube.apply(af)
    wait_ready(lpcluster, ns, timeout=240)
    before = deployments(lpcluster, ns)
    assert before, "the allowed fleet made no Deployment"

    # A team's fleet asking for another image: refused, nothing created.
    rogue = {"apiVersion": "switchyard.dev/v1alpha1", "kind": "WorkerFleet",
             "metadata": {"name": "rogue", "namespace": ns},
             "spec": {"facilityRef": {"name": "af"}, "replicas": 2, "cores": 1, "memoryGiB": 2, "readGbps": 1,
                      "image": ROGUE_IMAGE, "dask": {"schedulerAddress": "tcp://scheduler.example.org:8786"}}}
    lpcluster.kube.apply(rogue)

    def refused(kind, name):
        obj = lpcluster.kube.get(kind, ns, name)
        cond = ready_condition(obj)
        current = obj["status"].get("observedGeneration") == obj["metadata"]["generation"] if obj.get("status") else False
        return cond if current and cond.get("status") == "False" and cond.get("reason") == "ImageNotAllowed" else None

    cond = wait_for(lambda: refused("WorkerFleet", "rogue"), timeout=120, what="rogue fleet Ready=False ImageNotAllowed")
    assert ROGUE_IMAGE in cond["message"]
    events = wait_for(lambda: [e for e in warning_events(lpcluster, ns, "rogue") if e["reason"] == "ImageNotAllowed"],
                      timeout=60, what="a Warning event on the rogue fleet")
    assert ROGUE_IMAGE in events[0]["message"]
    assert not lpcluster.kube.list("Deployment", ns, {"switchyard.dev/fleet": "rogue"})
    assert not lpcluster.kube.list("Service", ns, {"switchyard.dev/fleet": "rogue"})

    # The facility asking for another image for its own fleet: refused, children untouched.
    lpcluster.kube.delete("WorkerFleet", ns, "rogue")
    wait_for(lambda: lpcluster.kube.get("WorkerFleet", ns, "rogue") is None, timeout=60, what="rogue fleet gone")
    af["spec"]["fleets"][0]["image"] = ROGUE_IMAGE
    lpcluster.kube.apply(af)
    cond = wait_for(lambda: refused("AnalysisFacility", "af"), timeout=120, what="facility Ready=False ImageNotAllowed")
    assert ROGUE_IMAGE in cond["message"]
    assert [e for e in warning_events(lpcluster, ns, "af") if e["reason"] == "ImageNotAllowed"
            and ROGUE_IMAGE in e["message"]]
    child = lpcluster.kube.get("WorkerFleet", ns, "af-dask")
    assert "image" not in child["spec"], "the refused image reached the facility's fleet"
    # Several resync periods (10 s, when children are re-applied) later, the workers are as they were.
    time.sleep(25)
    assert refused("AnalysisFacility", "af")
    after = deployments(lpcluster, ns)
    assert after == before, "the refused facility changed its workers"
    assert proc.poll() is None, "the operator exited"
    assert "Traceback" not in log_path.read_text()
