"""Several operators, one leader (issue #29), on the local cluster's real API server.

Two `switchyard run` processes elect on a Lease: exactly one reconciles, the other waits
and never reconciles; SIGKILL of the leader hands over only after its lease expired (the
Lease's own timestamps: the new acquireTime is at least the old renewTime plus the lease
duration; all processes share this machine's clock, so they compare), and the new leader
reconciles a change made during the outage; SIGTERM releases the lease, so the standby
takes over before it would have expired; a leader paused past its lease exits when it
resumes. Times are printed, not asserted.

Each process has a Pod object of its own (bound by the scheduler to a simulated node, where
kwok marks it Running; the process gets the POD_NAME and POD_NAMESPACE the chart's downward
API gives), so the `switchyard.dev/leader` labels are checked as `kubectl get pods -L` shows
them: "true" on the leader's Pod, "false" on the others', flipping at each hand-over.
A bucket over quota (a real MinIO) is announced once, not again by the next leader.

The Elector's own decisions run in-process against the same API server, on a clock the test
moves (the Lease store is the real one, resourceVersion conflicts included): a held lease is
taken only after its duration unchanged, a released one at the next try, a read that another
write overtakes loses the race (409). e2e/test_leader_ramp.py kills the leader ten times
during a 1,000-worker ramp and reads the audit log.

Its own cluster (<SWITCHYARD_E2E_CLUSTER>-leader), so no operator outside the election is there. Run alone:
SWITCHYARD_E2E_CLUSTER=sy-ha CI=1 .venv/bin/python -m pytest -q -s e2e/test_leader.py
"""

from __future__ import annotations

import datetime
import json
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

import localcluster
from switchyard.apply import ApiError
from switchyard.leader import Elector, Timing
from facilities import facility
from harness import cluster_lifetime, start_operator, stop_operator, temporary_namespace
from support import CLUSTER_NAME, condition, wait_for, wait_ready

pytestmark = pytest.mark.e2e

LEASE = "switchyard-leader"
LABEL = "switchyard.dev/leader"
LEASE_SECONDS = 15
# A cluster of its own: the candidates must be the only operators there. On the e2e session's cluster, the
# session's operator (conftest's `operator`, cluster-wide, outside any election, up from the first module that
# uses it to the end of the run) reconciled these tests' objects too: in a full e2e run it announced the
# over-quota bucket a second time, and would reconcile the change made during an outage for a new leader.
LEADER_CLUSTER = f"{CLUSTER_NAME}-leader"
LOGS = localcluster.CACHE / "e2e-logs" / LEADER_CLUSTER


@pytest.fixture(scope="module")
def cluster():
    yield from cluster_lifetime(LEADER_CLUSTER)


@pytest.fixture
def namespace(cluster):
    yield from temporary_namespace(cluster.kube, "e2e")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def operator_pod(cluster, namespace: str, name: str, service_account: str | None = None) -> None:
    """A Pod object for one operator process, as the chart's Deployment would make it; the scheduler
    binds it to a simulated node and kwok reports it Running (no container really runs). With
    `service_account`, the Pod runs as it (a token can then be bound to the Pod)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace,
                        "labels": {"app.kubernetes.io/name": "switchyard", "app.kubernetes.io/component": "operator"}},
           "spec": {"automountServiceAccountToken": False,
                    "containers": [{"name": "operator", "image": "switchyard:e2e"}]}}
    if service_account:
        pod["spec"]["serviceAccountName"] = service_account

    def create() -> bool:  # the namespace's default ServiceAccount may not exist yet
        try:
            cluster.kube.create(pod)
            return True
        except ApiError as exc:
            if exc.status == 409:
                return True
            if exc.status == 403 and "serviceaccount" in exc.message:
                return False
            raise

    wait_for(create, 30, 0.5, f"Pod {name} created")
    wait_for(lambda: ((cluster.kube.get("Pod", namespace, name) or {}).get("status") or {}).get("phase") == "Running",
             60, 0.5, f"Pod {name} Running on a simulated node")


def leader_labels(cluster, namespace: str) -> dict[str, str | None]:
    """Operator Pod name -> its switchyard.dev/leader label (None: not labelled)."""
    return {p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(LABEL)
            for p in cluster.kube.list("Pod", namespace, selector={"app.kubernetes.io/component": "operator"})}


class Candidate:
    def __init__(self, cluster, namespace: str, identity: str):
        self.identity = identity
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log = LOGS / f"leader-{identity}.log"
        operator_pod(cluster, namespace, identity)
        self.proc = start_operator(cluster.kubeconfig, self.log, "--lease-namespace", namespace,
                                   "--lease-name", LEASE, "--identity", identity,
                                   "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port),
                                   POD_NAME=identity, POD_NAMESPACE=namespace)

    def samples(self, name: str) -> dict[str, float]:
        """`name`'s samples on this process's /metrics: label text -> value."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                key, value = line.rsplit(" ", 1)
                out[key[len(name):]] = float(value)
        return out

    def leader(self) -> float | None:
        try:
            return self.samples("switchyard_leader").get(f'{{pod="{self.identity}"}}')
        except OSError:
            return None

    def reconciles(self) -> float:
        try:
            return sum(self.samples("switchyard_reconciles_total").values())
        except OSError:
            return 0.0

    def ready(self) -> tuple[int, dict]:
        return self.get("/readyz")

    def get(self, path: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except OSError:  # not serving yet
            return 0, {}

    def log_text(self) -> str:
        return self.log.read_text()


def lease(cluster, namespace: str) -> dict:
    return (cluster.kube.get("Lease", namespace, LEASE) or {}).get("spec") or {}


def micro(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


def elect(cluster, namespace: str, candidates: list[Candidate]) -> tuple[Candidate, list[Candidate]]:
    holder = wait_for(lambda: lease(cluster, namespace).get("holderIdentity"), 60, 0.5, "a leader")
    (leader,) = [c for c in candidates if c.identity == holder]
    wait_for(lambda: leader.leader() == 1, 30, 0.5, f"{holder}'s switchyard_leader 1")
    others = [c for c in candidates if c is not leader]
    for other in others:
        wait_for(lambda o=other: o.ready()[1].get("role") == "standby", 30, 0.5, f"{other.identity} standby")
    return leader, others


def test_one_leader_takes_over_after_expiry_or_at_once_on_release(cluster, namespace):
    LOGS.mkdir(parents=True, exist_ok=True)
    a, b = Candidate(cluster, namespace, "sy-a"), Candidate(cluster, namespace, "sy-b")
    procs = [a, b]
    try:
        leader, (standby,) = elect(cluster, namespace, [a, b])
        # Both report who leads; both are Ready (a standby that is not would stall a rolling update).
        assert leader.ready() == (200, {"identity": leader.identity, "role": "leader", "holder": leader.identity})
        assert standby.ready() == (200, {"identity": standby.identity, "role": "standby", "holder": leader.identity})
        assert standby.leader() == 0
        # The Pods say who leads.
        wait_for(lambda: leader_labels(cluster, namespace) == {leader.identity: "true", standby.identity: "false"},
                 30, 0.5, "the leader's Pod labelled true, the standby's false")
        print("\n" + cluster.kubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator",
                                     "-L", LABEL))
        # Liveness: kopf's own endpoint, asked through the leader's health port; a standby is alive.
        wait_for(lambda: leader.get("/healthz")[0] == 200, 30, 0.5, "the leader's kopf liveness")
        assert standby.get("/healthz")[0] == 200
        record = lease(cluster, namespace)
        assert record["leaseDurationSeconds"] == LEASE_SECONDS and record["leaseTransitions"] == 0
        events = cluster.kube.list("Event", namespace, fields={"involvedObject.name": LEASE})
        assert [(e["reason"], e["message"]) for e in events] == [("LeaderElection", f"{leader.identity} became leader")]

        # Only the leader reconciles.
        af = facility(workers=4)
        af["metadata"]["namespace"] = namespace
        cluster.kube.apply(af)
        wait_ready(cluster, namespace)
        assert leader.reconciles() > 0
        time.sleep(3)  # a few of the standby's tries and the leader's timer ticks
        assert standby.reconciles() == 0 and standby.leader() == 0
        assert "kopf" not in standby.log_text()  # kopf never started there
        assert "kopf.objects" in leader.log_text()  # the handlers' per-object lines

        # SIGKILL: the standby waits for the lease to expire, then reconciles what changed meanwhile.
        leader.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        leader.proc.wait(timeout=10)
        last = lease(cluster, namespace)
        assert last["holderIdentity"] == leader.identity
        af["spec"]["fleets"][0]["replicas"] = 6  # a fleet scaled during the outage
        generation = cluster.kube.apply(af)["metadata"]["generation"]
        wait_for(lambda: standby.leader() == 1, 60, 0.1, f"{standby.identity} takes over")
        took_over = time.monotonic() - killed
        wait_for(lambda: standby.reconciles() > 0, 60, 0.1, f"{standby.identity}'s first reconcile")
        first_reconcile = time.monotonic() - killed
        taken = lease(cluster, namespace)
        assert taken["holderIdentity"] == standby.identity and taken["leaseTransitions"] == 1
        waited = (micro(taken["acquireTime"]) - micro(last["renewTime"])).total_seconds()
        assert waited >= LEASE_SECONDS, f"taken {waited:.2f} s after the last renewal: before the lease expired"
        # The killed leader could not take its label down: the new leader did.
        wait_for(lambda: leader_labels(cluster, namespace) == {leader.identity: "false", standby.identity: "true"},
                 30, 0.5, f"{standby.identity}'s Pod labelled true, the killed {leader.identity}'s false")
        wait_ready(cluster, namespace, generation=generation)
        outage_change = time.monotonic() - killed
        print(f"\nSIGKILL of {leader.identity}: {standby.identity} leads after {took_over:.1f} s, first reconcile "
              f"after {first_reconcile:.1f} s, the fleet scaled during the outage Ready after {outage_change:.1f} s "
              f"(acquireTime - last renewTime {waited:.2f} s; lease {LEASE_SECONDS} s)")

        # SIGTERM: the leader stops kopf, releases the lease, and a standby takes it at its next try.
        c = Candidate(cluster, namespace, "sy-c")
        procs.append(c)
        wait_for(lambda: c.ready()[1].get("role") == "standby", 60, 0.5, "sy-c standby")
        before = lease(cluster, namespace)
        standby.proc.send_signal(signal.SIGTERM)
        termed = time.monotonic()
        wait_for(lambda: c.leader() == 1, 60, 0.1, "sy-c takes over")
        took_over = time.monotonic() - termed
        wait_for(lambda: c.reconciles() > 0, 60, 0.1, "sy-c's first reconcile")
        first_reconcile = time.monotonic() - termed
        assert standby.proc.wait(timeout=30) == 0
        assert f"released by {standby.identity}" in standby.log_text()
        assert leader_labels(cluster, namespace) == {leader.identity: "false", standby.identity: "false", "sy-c": "true"}
        # The released leader took its own label down before a successor could: nobody demoted it.
        assert f"Pod {namespace}/{standby.identity}: labelled {LABEL}=false" not in c.log_text()
        after = lease(cluster, namespace)
        assert after["holderIdentity"] == "sy-c" and after["leaseTransitions"] == 2
        early = (micro(after["acquireTime"]) - micro(before["renewTime"])).total_seconds()
        # Taken before the old lease could have expired: only a release allows that.
        assert early < LEASE_SECONDS, f"sy-c took the lease {early:.2f} s after the last renewal seen"
        print(f"SIGTERM of {standby.identity}: sy-c leads after {took_over:.1f} s, first reconcile after "
              f"{first_reconcile:.1f} s")

        # A leader paused past its lease (SIGSTOP: a frozen node, a long GC) finds another holder
        # when it resumes, and exits instead of leading on.
        d = Candidate(cluster, namespace, "sy-d")
        procs.append(d)
        wait_for(lambda: d.ready()[1].get("role") == "standby", 60, 0.5, "sy-d standby")
        c.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: d.leader() == 1, 60, 0.2, "sy-d takes over from the paused sy-c")
        c.proc.send_signal(signal.SIGCONT)
        resumed = time.monotonic()
        assert c.proc.wait(timeout=30) == 1
        print(f"sy-c, paused past its lease and resumed, exited after {time.monotonic() - resumed:.1f} s")
        assert "the Lease is held by sy-d; exiting" in c.log_text()
        wait_for(lambda: leader_labels(cluster, namespace)["sy-d"] == "true", 30, 0.5, "sy-d's Pod labelled true")
        assert leader_labels(cluster, namespace) == {x.identity: "true" if x is d else "false" for x in procs}
        print(cluster.kubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator", "-L", LABEL))
        for cand in procs:
            assert f"not labelled {LABEL}" not in cand.log_text()  # every patch the Role allows
        events = cluster.kube.list("Event", namespace, fields={"involvedObject.name": LEASE})
        assert sorted(e["message"] for e in events) == sorted(f"{x.identity} became leader" for x in procs)
    finally:
        if any(cand.proc.poll() is None for cand in procs):  # its finalizer needs an operator
            cluster.kube.delete("AnalysisFacility", namespace, "af")
            wait_for(lambda: cluster.kube.get("AnalysisFacility", namespace, "af") is None, 60, 1, "af deleted")
        for cand in procs:
            if cand.proc.poll() is None:
                stop_operator(cand.proc)
        print(f"operator logs: {LOGS}/leader-*.log")


def test_helm_install_refuses_lease_timings_that_do_not_fit(cluster, namespace):
    """Each value within the schema's bounds, together unsafe (a renew deadline as long as the lease):
    refused before anything is created, naming the values."""
    result = subprocess.run([str(localcluster.tools() / "helm"), "--kubeconfig", str(cluster.kubeconfig), "install",
                             "sy-bad-timing", str(localcluster.REPO / "charts" / "switchyard"), "-n", namespace,
                             "--set-json", 'leaderElection={"renewDeadlineSeconds":15}'],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert ("leaderElection: retrySeconds (2) < renewDeadlineSeconds (15) < leaseSeconds (15) is needed: a leader "
            "must give up before its lease can expire") in result.stderr, result.stderr
    assert not cluster.kube.list("Deployment", namespace)
    assert not cluster.kube.list("Secret", namespace)  # no release record either


def _event_time(event: dict) -> datetime.datetime:
    """When the event was made (kopf sets eventTime, in microseconds; else its firstTimestamp)."""
    text = event.get("eventTime") or event.get("firstTimestamp")
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_new_leader_does_not_announce_an_over_quota_again(cluster, namespace, tmp_path):
    """What the old leader announced is read back from the status (docs/admin-guide.md, the takeover table):
    a bucket over quota gets one OverQuota event, not one more per leader."""
    from test_s3_staging_e2e import MinioServer, admin_secret, minio_binary, staging, wait_condition

    LOGS.mkdir(parents=True, exist_ok=True)
    server = MinioServer(minio_binary(), tmp_path / "minio").start()
    procs = []
    try:
        first = Candidate(cluster, namespace, "sq-a")
        procs.append(first)
        wait_for(lambda: first.leader() == 1, 60, 0.5, "sq-a leads")
        bucket = f"{namespace}-out"
        cluster.kube.apply(admin_secret(namespace, server))
        cluster.kube.apply(staging(namespace, "stage", server, [{"name": bucket, "quotaObjects": 5}]))
        wait_condition(cluster, namespace, "stage", "Ready", "True")
        server.upload(bucket, 8, size_of=lambda i: 100)
        wait_condition(cluster, namespace, "stage", "Degraded", "True", "OverQuota")

        def over_quota_events() -> list[dict]:
            return [e for e in cluster.kube.list("Event", namespace) if e["reason"] == "OverQuota"]

        wait_for(lambda: over_quota_events(), 30, 0.5, "sq-a's OverQuota event")
        second = Candidate(cluster, namespace, "sq-b")
        procs.append(second)
        wait_for(lambda: second.ready()[1].get("role") == "standby", 60, 0.5, "sq-b standby")
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(timeout=30) == 0
        old_leader_gone = datetime.datetime.now(datetime.timezone.utc)
        wait_for(lambda: second.leader() == 1, 60, 0.2, "sq-b takes over")

        def staging_reconciles() -> float:
            try:
                return second.samples("switchyard_reconciles_total").get('{kind="S3Staging",result="ok"}', 0.0)
            except OSError:
                return 0.0

        # Each of sq-b's reconciles measures the bucket, finds it over quota and decides whether to announce it.
        wait_for(lambda: staging_reconciles() >= 3, 60, 0.5, "sq-b's third S3Staging reconcile")
        obj = wait_condition(cluster, namespace, "stage", "Degraded", "True", "OverQuota")
        assert "8 objects of 5 allowed" in condition(obj, "Degraded")["message"]
        events = over_quota_events()
        # One event, the old leader's: the new leader announced nothing. (Two CI rehearsals found two, once
        # 55 us apart: the e2e session's own operator, cluster-wide and outside the election, announced it too
        # on the shared cluster; this module now has a cluster of its own.)
        described = [(e["metadata"]["name"], e.get("count"), e.get("eventTime"), e.get("message")) for e in events]
        assert len(events) == 1 and (events[0].get("count") or 1) == 1, described
        assert _event_time(events[0]) < old_leader_gone, (old_leader_gone, described)
    finally:
        if any(cand.proc.poll() is None for cand in procs):  # its finalizer needs an operator (Retain: no S3 call)
            cluster.kube.delete("S3Staging", namespace, "stage")
            wait_for(lambda: cluster.kube.get("S3Staging", namespace, "stage") is None, 60, 1, "stage deleted")
        for cand in procs:
            if cand.proc.poll() is None:
                stop_operator(cand.proc)
        server.stop()


# ------------------------------------------------------------------ the Elector against the API server
class Clock:
    """The candidates' monotonic clock, moved by the test (the Lease's own timestamps are real)."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def electors(kube, namespace: str, clock: Clock, *identities: str) -> list[Elector]:
    return [Elector(kube, namespace, "election", identity, Timing(), clock=clock) for identity in identities]


def election(cluster, namespace: str) -> dict:
    return cluster.kube.get("Lease", namespace, "election")


def test_a_held_lease_is_taken_only_after_its_duration_unchanged(cluster, namespace):
    clock = Clock()
    a, b = electors(cluster.kube, namespace, clock, "a", "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    for _ in range(10):  # a renews every 2 s: b never gets it
        clock.t += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    # a stops renewing (killed): b waits the lease (15 s) from the last change it saw
    for _ in range(7):
        clock.t += 2
        assert not b.try_acquire_or_renew()
    clock.t += 2
    assert b.try_acquire_or_renew()
    spec = election(cluster, namespace)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1 and b.previous == "a"
    # a comes back: it sees b's record and waits
    assert not a.try_acquire_or_renew()
    assert election(cluster, namespace)["spec"]["holderIdentity"] == "b"


def test_a_released_lease_is_taken_at_the_next_try_and_only_its_holder_releases(cluster, namespace):
    clock = Clock()
    a, b = electors(cluster.kube, namespace, clock, "a", "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert not election(cluster, namespace)["spec"].get("holderIdentity")
    assert b.try_acquire_or_renew()  # no wait: the clock has not moved
    version = election(cluster, namespace)["metadata"]["resourceVersion"]
    assert not a.release()  # no longer a's: nothing written
    lease = election(cluster, namespace)
    assert lease["spec"]["holderIdentity"] == "b" and lease["metadata"]["resourceVersion"] == version


class WriteAfterRead:
    """The API server, with another candidate's write landing between this candidate's read of the
    Lease and its replace, once."""

    def __init__(self, kube, between):
        self.kube, self.between = kube, between

    def get(self, *args, **kwargs):
        obj = self.kube.get(*args, **kwargs)
        between, self.between = self.between, None
        if between:
            between()
        return obj

    def __getattr__(self, name):
        return getattr(self.kube, name)


def test_a_read_overtaken_by_a_renewal_loses_the_race_instead_of_overwriting(cluster, namespace):
    clock = Clock()
    (a,) = electors(cluster.kube, namespace, clock, "a")
    assert a.try_acquire_or_renew()
    server = WriteAfterRead(cluster.kube, None)
    (b,) = electors(server, namespace, clock, "b")
    assert not b.try_acquire_or_renew()  # b sees a's record ...
    clock.t += 60  # ... which then has not changed for longer than the lease, as far as b can tell
    renewed = []
    server.between = lambda: renewed.append(a.try_acquire_or_renew())
    assert not b.try_acquire_or_renew()  # a renewed after b read: b's replace carries the old resourceVersion (409)
    assert renewed == [True]
    assert election(cluster, namespace)["spec"]["holderIdentity"] == "a"
