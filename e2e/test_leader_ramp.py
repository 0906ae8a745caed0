"""SIGKILL of the leader, 10 times during a 1,000-worker ramp (issue #29, second acceptance item).

Three operator processes run as the chart's pods run: the rendered Deployment's arguments and
environment, the chart's ServiceAccount and RBAC (namespaced mode, one watched namespace), each
with a Pod of its own on a simulated node and a token bound to that Pod (`kubectl create token
--bound-object-kind Pod`), as the kubelet's projected token is. All three authenticate as the one
ServiceAccount, and the kube-apiserver's audit log tells them apart as it would in production:
`user.extra["authentication.kubernetes.io/pod-name"]`.

A facility's fleet ramps to WORKERS workers at RATE starts per second. At seeded random moments
the current leader is SIGKILLed, KILLS times; each time a standby takes over, and the killed
process is started again (as the kubelet restarts the container) once it has. (Started again
sooner, it takes its own lease straight back, without waiting: its identity is its Pod's name,
which the record still names. Seen in a first version of this test; safe, as the killed process
is gone, but then no standby takes over, which is what this item is about.) The ramp must then
complete, and from the cluster and its audit log (one clock, the API server's):

- Terms. A Lease write (create/update, 2xx) by a pod other than the last writer is its
  acquisition; its term lasts until the next acquisition. Every write an operator pod makes (any
  create/update/patch/delete but those on the Lease and on the operator Pods' own leader labels,
  which standbys set too) falls inside that pod's own term: no two pods write in one term.
- Expiry. Each acquisition arrives at least leaseSeconds after the previous holder's last Lease
  write: the new leader waited, on its own clock, a whole lease from the last change it saw, and
  it could only replace the record whose last change it saw (resourceVersion).
- The gap. Hence, as the old leader writes only while it has renewed within its renew deadline
  (it exits at the deadline; SIGKILL stops it sooner), the first write of the new leader comes at
  least leaseSeconds - renewDeadline after the last write of the old one: no write of two pods
  falls within that window around a hand-over. (Not leaseSeconds: a leader may write up to its
  renew deadline after its last renewal, and the successor may write as soon as the lease it saw
  expires; the measured gaps are printed.)
- No worker started twice. A Deployment's worker is started once when its ReplicaSet creates
  its Pod; one started twice is a Pod deleted (a scale-down undone, an eviction) or a new
  ReplicaSet (a template changed by a leader with another idea of it) and a Pod created again.
  So: the audit log's Pod creates in the facility's namespace are exactly the Pods there at the
  end (each name once: a StatefulSet's cache host re-created keeps its name), WORKERS of them
  workers; no Pod was deleted; each worker Deployment has one ReplicaSet.
- No child duplicated or orphaned: faults.ownership_problems (one workload per fleet or pool and
  switch, every child owned by a live owner with the matching owner-uid label), and each child the
  operators created (a 201 to their server-side apply) was created once and none deleted.
- The ramp was under way at every kill: fewer than WORKERS workers asked for. The rate bounds it
  (a new leader resumes a ramp with no tokens: docs/admin-guide.md, "What a new leader does first"), and the
  seeded moments add up to less than WORKERS / RATE seconds of leading.

Takeover times (kill to the new holder seen on the Lease) and the gaps are printed and recorded
with faults.record (SWITCHYARD_RELIABILITY_REPORT); no wall-clock time is asserted.

Lease timings: SWITCHYARD_SOAK=1 runs the chart's defaults (15 s lease, 10 s renew deadline,
2 s retry: about 20 s per hand-over); otherwise 8/5/1 s, so that ten hand-overs fit in a few
minutes. Kills and workers are the acceptance item's (10, 1,000) in both.

Run alone: SWITCHYARD_E2E_CLUSTER=sy-ramp .venv/bin/python -m pytest -q -s e2e/test_leader_ramp.py
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import time

import pytest
import yaml

import localcluster
from facilities import facility
from faults import ownership_problems, record
from support import CLUSTER_NAME, wait_for
from test_chart_install import CHART
from test_faults import SOAK_TOPOLOGY, wait_converged
from test_leader import operator_pod

from switchyard.apply import Kube

pytestmark = pytest.mark.e2e

SOAK = os.environ.get("SWITCHYARD_SOAK", "") not in ("", "0")
SEED = int(os.environ.get("SWITCHYARD_RAMP_SEED", "20261126"))
RAMP_CLUSTER = f"{CLUSTER_NAME}-ramp"
LOGS = localcluster.CACHE / "e2e-logs" / RAMP_CLUSTER

KILLS = 10
WORKERS = 1000
RATE = 15                     # the fleet's rampUp.maxStartsPerSecond
KILL_AFTER = (0.5, 5.0)       # seconds after a takeover is seen (after the ramp's start, the first time)
LEASE_SECONDS, RENEW_DEADLINE, RETRY = (15, 10, 2) if SOAK else (8, 5, 1)

RELEASE = "ramp"
OPS = "sy-ops"                # the release namespace: ServiceAccount, operator Pods, Lease
NS = "ramp"                   # the watched namespace: the facility
FULLNAME = f"{RELEASE}-switchyard"
SERVICE_ACCOUNT = FULLNAME
LEASE = f"{FULLNAME}-leader"
CANDIDATES = ("op-a", "op-b", "op-c")
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
WRITES = ("create", "update", "patch", "delete", "deletecollection")
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"

# Reads are not logged; pod creates with their bodies (the ReplicaSet controller's carry no name
# in the request: generateName); everything else one line of metadata per request.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    verbs: ["get", "list", "watch"]
  - level: RequestResponse
    verbs: ["create"]
    resources: [{group: "", resources: ["pods"]}]
  - level: Metadata
"""


def kwok_config(directory: pathlib.Path) -> pathlib.Path:
    """The audit log, and a control plane that starts 1,000 pods without its client rate limits
    (as bench/fleet_bench.py has it): the operator's ramp, not the ReplicaSet controller, sets the pace."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "audit-policy.yaml").write_text(AUDIT_POLICY)
    path = directory / "kwok-ramp.yaml"
    path.write_text(f"""apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 16
---
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  disableQPSLimits: true
  kubeAuditPolicy: {directory / 'audit-policy.yaml'}
componentsPatches:
  - name: kube-controller-manager
    extraArgs:
      - {{key: concurrent-deployment-syncs, value: "10"}}
      - {{key: concurrent-replicaset-syncs, value: "10"}}
""")
    return path


def audit_log_path(name: str) -> pathlib.Path:
    return pathlib.Path.home() / ".kwok" / "clusters" / name / "logs" / "audit.log"


class RampCluster:
    def __init__(self, name: str):
        self.name = name
        self.kubeconfig = localcluster.kubeconfig_path(name)
        self.kube = Kube.from_environment(str(self.kubeconfig))
        self.audit = audit_log_path(name)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> str:
        return localcluster.kubectl(self.name, *args, check=check, input=input)


@pytest.fixture(scope="module")
def rcluster() -> RampCluster:
    if localcluster.exists(RAMP_CLUSTER):  # a cluster of this name from before may have no audit log
        localcluster.down(RAMP_CLUSTER)
    localcluster.up(RAMP_CLUSTER, SOAK_TOPOLOGY, config=kwok_config(localcluster.CACHE / "clusters" / RAMP_CLUSTER))
    localcluster.install_crds(RAMP_CLUSTER)
    cluster = RampCluster(RAMP_CLUSTER)
    LOGS.mkdir(parents=True, exist_ok=True)
    assert cluster.audit.exists(), f"no audit log at {cluster.audit}"
    yield cluster
    if cluster.audit.exists():  # for a look after the cluster is gone
        shutil.copyfile(cluster.audit, LOGS / "ramp-audit.log")
    if not os.environ.get("SWITCHYARD_KEEP_CLUSTER"):
        localcluster.down(RAMP_CLUSTER)


# ------------------------------------------------------------------ the chart's operator, three times
def rendered_chart() -> list[dict]:
    result = subprocess.run(
        [str(localcluster.tools() / "helm"), "template", RELEASE, str(CHART), "-n", OPS,
         "--set", "watch.mode=namespaced", "--set", f"watch.namespaces={{{NS}}}",
         "--set", f"leaderElection.leaseSeconds={LEASE_SECONDS}",
         "--set", f"leaderElection.renewDeadlineSeconds={RENEW_DEADLINE}",
         "--set", f"leaderElection.retrySeconds={RETRY}"],
        capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def operator_container(docs: list[dict]) -> tuple[list[str], dict[str, str]]:
    """The chart's operator container: its arguments and its literal environment."""
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == FULLNAME]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "operator"]
    return list(container["args"]), {e["name"]: e["value"] for e in container["env"] if "value" in e}


class Candidate:
    """One operator pod: a Pod object on a simulated node, a token bound to it, and the chart's
    command run here as a process, restarted after a kill as the kubelet restarts its container."""

    def __init__(self, cluster: RampCluster, name: str, args: list[str], env: dict[str, str]):
        self.name = name
        self.log = LOGS / f"ramp-{name}.log"
        self.log.write_text("")
        operator_pod(cluster, OPS, name, service_account=SERVICE_ACCOUNT)
        token = cluster.kubectl("create", "token", SERVICE_ACCOUNT, "-n", OPS, "--bound-object-kind", "Pod",
                                "--bound-object-name", name, "--duration", "2h").strip()
        admin = yaml.safe_load(cluster.kubeconfig.read_text())
        server = admin["clusters"][0]["cluster"]
        self.kubeconfig = LOGS / f"ramp-{name}.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": "local", "cluster": {k: v for k, v in server.items() if k in (
                "server", "certificate-authority", "certificate-authority-data")}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}]}))
        self.kubeconfig.chmod(0o600)
        self.command = [*localcluster.operator_command(), *args, "--kubeconfig", str(self.kubeconfig),
                        "--metrics-port=0", "--health-port=0"]  # three on one host: no fixed ports
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("SWITCHYARD_", "KUBE"))},
                    **env, "POD_NAME": name, "POD_NAMESPACE": OPS}
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with self.log.open("a") as log:
            log.write(f"=== start {self.starts}\n")
            log.flush()
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def holder(kube) -> str:
    return ((kube.get("Lease", OPS, LEASE) or {}).get("spec") or {}).get("holderIdentity") or ""


def worker_replicas(kube) -> int:
    return sum(d["spec"]["replicas"] for d in kube.list("Deployment", NS, {"app.kubernetes.io/managed-by": "switchyard"})
               if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "worker")


def ramp_facility() -> dict:
    obj = facility(workers=WORKERS)
    obj["metadata"]["namespace"] = NS
    fleet = obj["spec"]["fleets"][0]
    fleet.update(cores=1, memoryGiB=2, readGbps=0.1, rampUp={"maxStartsPerSecond": RATE})
    return obj


# ------------------------------------------------------------------ the audit log
def stamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def audit_events(path: pathlib.Path) -> list[dict]:
    """Completed requests, in the order the API server received them."""
    events = []
    with path.open() as log:
        for line in log:
            event = json.loads(line)
            if event.get("stage") == "ResponseComplete":
                event["received"] = stamp(event["requestReceivedTimestamp"])
                events.append(event)
    return sorted(events, key=lambda e: e["received"])


def operator_pod_of(event: dict) -> str | None:
    """The operator pod a request came from (its bound token's pod), or None for anyone else."""
    user = event.get("user") or {}
    if user.get("username") != f"system:serviceaccount:{OPS}:{SERVICE_ACCOUNT}":
        return None
    (pod,) = (user.get("extra") or {}).get(POD_NAME_KEY) or [None]
    return pod


def ok(event: dict) -> bool:
    return 200 <= (event.get("responseStatus") or {}).get("code", 0) < 300


def is_lease(event: dict) -> bool:
    ref = event.get("objectRef") or {}
    return ref.get("resource") == "leases" and ref.get("namespace") == OPS and ref.get("name") == LEASE


def is_own_label(event: dict) -> bool:
    """A patch of an operator Pod (switchyard.dev/leader): standbys set their own "false"."""
    ref = event.get("objectRef") or {}
    return ref.get("resource") == "pods" and ref.get("namespace") == OPS and event["verb"] == "patch"


def terms(events: list[dict]) -> list[dict]:
    """Each holder's term: from its first Lease write after another pod's (its acquisition) to the
    next acquisition; `last_lease` is its last Lease write."""
    out: list[dict] = []
    for event in events:
        pod = operator_pod_of(event)
        if pod is None or not is_lease(event) or event["verb"] not in ("create", "update") or not ok(event):
            continue
        if not out or out[-1]["holder"] != pod:
            if out:
                out[-1]["until"] = event["received"]
            out.append({"holder": pod, "acquired": event["received"], "until": None, "last_lease": event["received"]})
        else:
            out[-1]["last_lease"] = event["received"]
    return out


def operator_writes(events: list[dict]) -> list[dict]:
    return [e for e in events if operator_pod_of(e) and e["verb"] in WRITES and not is_lease(e) and not is_own_label(e)]


def seconds(a: datetime.datetime, b: datetime.datetime) -> float:
    return (b - a).total_seconds()


# ------------------------------------------------------------------ the test
def test_ten_sigkills_during_a_thousand_worker_ramp(rcluster):
    kube, rng = rcluster.kube, random.Random(SEED)
    LOGS.mkdir(parents=True, exist_ok=True)
    moments = [round(rng.uniform(*KILL_AFTER), 2) for _ in range(KILLS)]
    # Leading time, and so starts, before the last kill: the rate bounds them below WORKERS.
    assert (sum(moments) + KILLS) * RATE + RATE < WORKERS, "the kills would not all fall within the ramp"
    for namespace in (OPS, NS):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    docs = rendered_chart()
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    rcluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    args, env = operator_container(docs)
    assert f"--lease-name={LEASE}" in args and f"--lease-seconds={LEASE_SECONDS}" in args and f"--namespace={NS}" in args
    candidates = {name: Candidate(rcluster, name, args, env) for name in CANDIDATES}
    exits: list[str] = []   # processes that ended without being killed
    killed: set[str] = set()

    def supervise() -> None:
        for cand in candidates.values():
            if cand.proc is not None and not cand.alive() and cand.name not in killed:
                exits.append(f"{cand.name} exited {cand.proc.returncode}")
                cand.start()

    def new_holder(other_than: str) -> str:
        def check():
            supervise()
            now = holder(kube)
            return now if now and now != other_than else None
        return wait_for(check, 120, 0.1, f"a holder other than {other_than or 'nobody'}")

    try:
        for cand in candidates.values():
            cand.start()
        first = new_holder("")
        kube.apply(ramp_facility())
        wait_for(lambda: worker_replicas(kube) > 0, 120, 0.2, "the ramp's first workers")
        started_at = time.monotonic()
        handovers = []
        current = first
        for kill, moment in enumerate(moments, 1):
            until = time.monotonic() + moment
            while time.monotonic() < until:
                supervise()
                time.sleep(0.05)
            assert holder(kube) == current, f"{current} no longer holds the lease at kill {kill}; exits {exits}"
            asked = worker_replicas(kube)
            assert asked < WORKERS, f"kill {kill}: the ramp had already asked for all {WORKERS} workers"
            candidates[current].kill()
            killed_at = time.monotonic()
            killed.add(current)
            taker = new_holder(current)
            took = time.monotonic() - killed_at
            killed.discard(current)
            candidates[current].start()   # the kubelet restarts the container: a standby now
            handovers.append({"kill": kill, "killed": current, "after_seconds": moment, "workers_asked": asked,
                              "taken_by": taker, "takeover_seconds": round(took, 2)})
            print(f"kill {kill}: {current} after {moment:.2f} s ({asked} workers asked); {taker} leads "
                  f"{took:.1f} s later", flush=True)
            current = taker
        last_kill = time.monotonic()
        af = wait_converged(kube, NS, workers=WORKERS, timeout=600)
        completed = time.monotonic() - last_kill
        supervise()
        assert holder(kube) == current, f"the lease moved from {current} without a kill; exits {exits}"
        time.sleep(2 * RETRY)   # the last renewals and status writes reach the log

        # ---- the cluster as it is
        assert ownership_problems(kube, NS) == []
        assert worker_replicas(kube) == WORKERS
        pods = {p["metadata"]["name"]: p for p in kube.list("Pod", NS)}
        workers = {n for n, p in pods.items() if p["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"}
        assert len(workers) == WORKERS
        deployments = {d["metadata"]["uid"]: d["metadata"]["name"] for d in kube.list("Deployment", NS)}
        replica_sets = collections.Counter(
            deployments.get((rs["metadata"].get("ownerReferences") or [{}])[0].get("uid"), "?")
            for rs in kube.request("GET", f"/apis/apps/v1/namespaces/{NS}/replicasets")["items"])
        assert set(replica_sets) == set(deployments.values()) and set(replica_sets.values()) == {1}, replica_sets

        # ---- the audit log
        events = audit_events(rcluster.audit)
        held = terms(events)
        assert [t["holder"] for t in held] == [first] + [h["taken_by"] for h in handovers], \
            f"terms {[t['holder'] for t in held]}; unexpected exits {exits}"
        writes = operator_writes(events)
        by_pod = collections.defaultdict(list)
        for event in writes:
            by_pod[operator_pod_of(event)].append(event)
        assert len(by_pod) >= 2, f"operator writes from {sorted(by_pod)} only: the log does not tell pods apart"
        for event in writes:
            pod, at = operator_pod_of(event), event["received"]
            inside = [t for t in held if t["holder"] == pod and t["acquired"] <= at and (t["until"] is None or at < t["until"])]
            assert inside, (f"{pod} wrote {event['verb']} {event['requestURI']} at {at.isoformat()} outside its terms "
                            f"{[(t['acquired'].isoformat(), t['until'] and t['until'].isoformat()) for t in held if t['holder'] == pod]}")
        gaps = []
        for old, new in zip(held, held[1:]):
            waited = seconds(old["last_lease"], new["acquired"])
            assert waited >= LEASE_SECONDS, \
                f"{new['holder']} took the lease {waited:.3f} s after {old['holder']}'s last renewal (lease {LEASE_SECONDS} s)"
            old_writes = [e["received"] for e in writes if operator_pod_of(e) == old["holder"]
                          and old["acquired"] <= e["received"] < new["acquired"]]
            new_writes = [e["received"] for e in writes if operator_pod_of(e) == new["holder"]
                          and new["acquired"] <= e["received"] and (new["until"] is None or e["received"] < new["until"])]
            gap = seconds(max(old_writes), min(new_writes)) if old_writes and new_writes else None
            if gap is not None:
                assert gap >= LEASE_SECONDS - RENEW_DEADLINE, \
                    f"{old['holder']} -> {new['holder']}: writes {gap:.3f} s apart (< lease - renew deadline)"
            gaps.append({"from": old["holder"], "to": new["holder"], "acquired_after_last_renewal": round(waited, 2),
                         "old_writes": len(old_writes), "new_writes": len(new_writes),
                         "write_gap": None if gap is None else round(gap, 2)})
        measured = [g["write_gap"] for g in gaps if g["write_gap"] is not None]
        assert measured, "no hand-over had writes on both sides"

        # Pods: each created once (the audit log's creates are exactly the Pods there now), none deleted.
        pod_events = [e for e in events if (e.get("objectRef") or {}).get("resource") == "pods"
                      and (e.get("objectRef") or {}).get("namespace") == NS and not (e.get("objectRef") or {}).get("subresource")]
        created = collections.Counter((e.get("responseObject") or {}).get("metadata", {}).get("name")
                                      for e in pod_events if e["verb"] == "create" and ok(e))
        twice = {n: c for n, c in created.items() if c > 1}
        assert not twice, f"Pods created more than once: {twice}"
        assert set(created) == set(pods), (f"created and gone: {sorted(set(created) - set(pods))[:10]}; "
                                           f"there without a create: {sorted(set(pods) - set(created))[:10]}")
        deleted = [e["requestURI"] for e in pod_events if e["verb"] in ("delete", "deletecollection")]
        assert not deleted, f"Pods deleted during the ramp: {deleted[:10]}"
        # Children: each the operators created, created once; none deleted.
        child_created = collections.Counter(
            ((e["objectRef"].get("resource"), e["objectRef"].get("name")))
            for e in writes if e["verb"] in ("create", "patch") and (e.get("responseStatus") or {}).get("code") == 201
            and (e.get("objectRef") or {}).get("namespace") == NS and e["objectRef"].get("resource") != "events")
        assert child_created and max(child_created.values()) == 1, {k: c for k, c in child_created.items() if c > 1}
        removed = [e["requestURI"] for e in writes if e["verb"] in ("delete", "deletecollection")]
        assert not removed, f"the operators deleted {removed[:10]}"

        summary = {"class": "leader SIGKILL during a ramp", "kills": KILLS, "workers": WORKERS, "rate": RATE,
                   "seed": SEED, "lease": [LEASE_SECONDS, RENEW_DEADLINE, RETRY],
                   "takeover_seconds": [h["takeover_seconds"] for h in handovers],
                   "kill_after_seconds": moments, "workers_asked_at_kill": [h["workers_asked"] for h in handovers],
                   "acquired_after_last_renewal": [g["acquired_after_last_renewal"] for g in gaps],
                   "write_gaps": [g["write_gap"] for g in gaps], "unexpected_exits": exits,
                   "pods_created": sum(created.values()), "children_created": sum(child_created.values()),
                   "ramp_completed_after_last_kill_seconds": round(completed, 1),
                   "total_seconds": round(time.monotonic() - started_at, 1)}
        print(json.dumps(summary, indent=1), flush=True)
        for g in gaps:
            print(f"{g['from']} -> {g['to']}: acquired {g['acquired_after_last_renewal']:.2f} s after the last renewal; "
                  f"writes {g['old_writes']} / {g['new_writes']}, gap {g['write_gap']} s")
        record("leader", summary)
        assert af["metadata"]["generation"] == af["status"]["observedGeneration"]
    finally:
        for cand in candidates.values():
            cand.stop()
        print(f"operator logs: {LOGS}/ramp-*.log; audit log: {rcluster.audit}")
