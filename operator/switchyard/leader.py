"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it.

Several operator pods run; one holds the Lease and runs kopf, the others wait and never
write. The record is client-go's: `holderIdentity`, `leaseDurationSeconds`, `acquireTime`,
`renewTime`, `leaseTransitions`. Every write is a create (409 when another made it first)
or a replace guarded by the `resourceVersion` read, so two candidates never both win one
record and nobody takes a lease it has not seen expire.

Expiry is judged on the candidate's own monotonic clock: a held lease is free once the
record has not changed for `leaseDurationSeconds` since this candidate last saw it change
(`Observer`), never from the timestamps inside it, so clock skew between nodes does not
matter. The leader renews every `retry` seconds; if it has not renewed for `renew_deadline`
(less than the lease duration) it exits the process at once (`os._exit`): whatever it was
writing stops before any standby can see the lease expire, and the kubelet restarts it as a
standby. On a graceful stop (SIGTERM: kopf finishes its handlers and returns) it releases
the lease, clearing `holderIdentity`, so a standby takes over at its next try.

Who leads shows on the Pods (`switchyard.dev/leader`: "true" on the leader's, "false" on a
standby's, set by each candidate on its own Pod, named by the downward API's POD_NAME and
POD_NAMESPACE; a new leader also turns a killed predecessor's "true" to "false"), in an Event
on the Lease at each take-over, in `switchyard_leader{pod}` and in the body of /readyz.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from .api import reasons
from .apply import ApiError, Kube
from .observe.metrics import LEADER, serve

log = logging.getLogger("switchyard.leader")

# On every operator Pod: "true" on the leader's, "false" on a standby's
# (`kubectl get pods -L switchyard.dev/leader`).
POD_LABEL = "switchyard.dev/leader"


@dataclass(frozen=True)
class Timing:
    """client-go's defaults for controllers: a 15 s lease, a 10 s renew deadline, a 2 s retry."""

    lease_seconds: int = 15
    renew_deadline: float = 10.0
    retry: float = 2.0

    def __post_init__(self):
        if not 0 < self.retry < self.renew_deadline < self.lease_seconds:
            raise ValueError("leader election needs 0 < retry < renew deadline < lease duration")


def micro_time(at: datetime.datetime) -> str:
    """A Lease's MicroTime."""
    return at.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Observer:
    """What one candidate knows of the lease: the record it last saw, and when, on its own
    clock, it last saw that record change."""

    def __init__(self, identity: str, clock: Callable[[], float] = time.monotonic):
        self.identity, self.clock = identity, clock
        self.record: dict | None = None
        self.version = ""
        self.changed_at = 0.0

    def observe(self, record: dict, version: str = "") -> None:
        """A record differs when its content or its resourceVersion does (any write changes the latter)."""
        if record != self.record or version != self.version:
            self.record, self.version, self.changed_at = dict(record), version, self.clock()

    def holder(self) -> str:
        return (self.record or {}).get("holderIdentity") or ""

    def may_take(self) -> bool:
        """Free, ours, or unchanged for its whole duration since we saw it change."""
        holder = self.holder()
        if not holder or holder == self.identity:
            return True
        duration = (self.record or {}).get("leaseDurationSeconds") or 0
        return self.clock() >= self.changed_at + duration


def next_record(old: dict | None, identity: str, lease_seconds: int, now: str) -> dict:
    """The spec a candidate writes to take or renew the lease (client-go's record)."""
    old = old or {}
    ours = old.get("holderIdentity") == identity
    transitions = old.get("leaseTransitions") or 0
    return {"holderIdentity": identity, "leaseDurationSeconds": lease_seconds,
            "acquireTime": old.get("acquireTime") if ours and old.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": transitions if ours or not old else transitions + 1}


def released_record(old: dict, now: str) -> dict:
    """What a leader leaves on a graceful stop: no holder (client-go's ReleaseOnCancel)."""
    return {"leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now,
            "leaseTransitions": old.get("leaseTransitions") or 0}


class Renewal:
    """The leader's side of the timing: whether it must give up (not renewed for the deadline)."""

    def __init__(self, timing: Timing, clock: Callable[[], float] = time.monotonic):
        self.timing, self.clock = timing, clock
        self.renewed_at = clock()

    def renewed(self) -> None:
        self.renewed_at = self.clock()

    def lost(self) -> bool:
        return self.clock() - self.renewed_at >= self.timing.renew_deadline

    def request_timeout(self) -> float:
        """The time left before the deadline: a renewal must answer by then, or it is no renewal.

        All of it, as client-go gives each attempt (one context bounded by the renew deadline): an
        API server slow for a few seconds under load still renews the lease in time. A cap of two
        retry periods per request left a leader about two tries before its deadline (renewals came
        up to 2.8 s apart with a 1 s retry in test_leader_ramp on a loaded machine)."""
        return max(0.5, self.renewed_at + self.timing.renew_deadline - self.clock())


def must_stop(observer: Observer, renewal: Renewal) -> str | None:
    """Why a leader whose renewal just failed must stop at once, if it must: another holds the
    lease (this process was paused past its expiry), or the renew deadline has passed."""
    holder = observer.holder()
    if holder and holder != observer.identity:
        return f"the Lease is held by {holder}"
    if renewal.lost():
        return f"not renewed for {renewal.timing.renew_deadline:g} s"
    return None


class Elector:
    """One candidate for the Lease `namespace/name`."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, timing: Timing = Timing(),
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
                 pod: tuple[str, str] | None = None):
        self.kube, self.namespace, self.name, self.identity, self.timing = kube, namespace, name, identity, timing
        self.wall = wall
        self.observer = Observer(identity, clock)
        self.leading = False
        self.pod = pod            # (namespace, name) of this candidate's own Pod, labelled POD_LABEL
        self.pod_label = ""       # the value the API server last took
        self.previous = ""        # who held the lease before this candidate took it

    def try_acquire_or_renew(self, time_left: Callable[[], float] = lambda: 5.0) -> bool:
        """One attempt: create the lease, or replace it if it is ours or has expired. False on a
        held lease, a lost race (409) or an unreachable API server. Each request may take
        `time_left()` as it starts, so that the attempt as a whole ends by the leader's deadline."""
        now = micro_time(self.wall())
        try:
            lease = self.kube.get("Lease", self.namespace, self.name, timeout=time_left())
            if lease is None:
                self.kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                  "metadata": {"name": self.name, "namespace": self.namespace},
                                  "spec": next_record(None, self.identity, self.timing.lease_seconds, now)},
                                 timeout=time_left())
                return True
            spec = lease.get("spec") or {}
            self.observer.observe(spec, lease["metadata"].get("resourceVersion", ""))
            if not self.observer.may_take():
                return False
            lease["spec"] = next_record(spec, self.identity, self.timing.lease_seconds, now)
            self.kube.replace(lease, timeout=time_left())
            if spec.get("holderIdentity") != self.identity:
                self.previous = spec.get("holderIdentity") or ""
            return True
        except ApiError as exc:
            if exc.status not in (409,):
                log.warning(f"Lease {self.namespace}/{self.name}: {exc}")
            return False

    def release(self) -> bool:
        """Clear the holder if we still hold it (a replace guarded by resourceVersion)."""
        try:
            lease = self.kube.get("Lease", self.namespace, self.name, timeout=5)
            if not lease or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            lease["spec"] = released_record(lease["spec"], micro_time(self.wall()))
            self.kube.replace(lease, timeout=5)
            return True
        except ApiError as exc:
            log.warning(f"Lease {self.namespace}/{self.name}: not released: {exc}")
            return False

    def label_pod(self, value: str, timeout: float = 5) -> None:
        """Mark this candidate's own Pod "true" (leader) or "false" (standby); a patch the API server
        did not take is tried again at the next call."""
        if self.pod is None or self.pod_label == value:
            return
        try:
            self.kube.label("Pod", *self.pod, POD_LABEL, value, timeout=timeout)
            self.pod_label = value
        except ApiError as exc:
            log.warning(f"Pod {self.pod[0]}/{self.pod[1]}: not labelled {POD_LABEL}={value}: {exc}")

    def demote_previous(self) -> None:
        """Label the previous holder's Pod "false" if it still says "true": a leader killed, or on a
        lost node, could not. Identities are Pod names where this candidate's is its Pod's (the
        chart's); elsewhere nothing is touched. Only a "true" is replaced (a JSON patch's test)."""
        if self.pod is None or self.identity != self.pod[1] or not self.previous or self.previous == self.identity:
            return
        try:
            self.kube.label("Pod", self.pod[0], self.previous, POD_LABEL, "false", if_now="true", timeout=5)
            log.info(f"Pod {self.pod[0]}/{self.previous}: labelled {POD_LABEL}=false (the previous leader)")
        except ApiError as exc:  # gone (404), or not labelled "true" (the test failed: 422)
            if exc.status not in (404, 422):
                log.warning(f"Pod {self.pod[0]}/{self.previous}: not labelled {POD_LABEL}=false: {exc}")

    def announce(self) -> None:
        """A log line and an Event on the Lease when this candidate takes it."""
        message = f"{self.identity} became leader"
        log.info(f"Lease {self.namespace}/{self.name}: {message}")
        now = micro_time(self.wall())
        try:
            self.kube.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{self.name}.", "namespace": self.namespace},
                "involvedObject": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                   "namespace": self.namespace, "name": self.name},
                "reason": reasons.LEADER_ELECTION, "message": message, "type": "Normal",
                "source": {"component": "switchyard"}, "reportingComponent": "switchyard",
                "reportingInstance": self.identity,
                "firstTimestamp": now[:19] + "Z", "lastTimestamp": now[:19] + "Z", "count": 1}, timeout=5)
        except ApiError as exc:
            log.warning(f"Event on Lease {self.namespace}/{self.name} not posted: {exc}")


class Health:
    """/healthz (liveness) and /readyz (readiness, with the role in the body) on one port, in
    both roles. Every pod that has reached the API server is Ready: a standby that was never
    Ready would stall a RollingUpdate with maxUnavailable 0 and leave a PodDisruptionBudget
    no pod to spare; who leads is in the body, the Lease and `switchyard_leader`."""

    def __init__(self, identity: str):
        self.identity = identity
        self.role = "starting"
        self.holder = ""
        self.kopf_liveness: str | None = None   # the leader's kopf liveness URL, on loopback

    def body(self) -> dict:
        return {"identity": self.identity, "role": self.role, "holder": self.holder}

    def live(self) -> bool:
        if self.kopf_liveness is None:
            return True
        try:
            with urllib.request.urlopen(self.kopf_liveness, timeout=4) as resp:
                return resp.status == 200
        except OSError:
            return False

    def serve(self, port: int) -> ThreadingHTTPServer:
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path == "/healthz":
                    ok = health.live()
                elif self.path == "/readyz":
                    ok = health.role in ("leader", "standby")
                else:
                    self.send_error(404)
                    return
                data = json.dumps(health.body()).encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_):
                pass

        server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
        return server


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_elected(elector: Elector, run: Callable[[str | None], None], *, metrics_port: int = 0,
                health_port: int = 0) -> int:
    """Wait for the lease, then `run(kopf_liveness_url)` (kopf's operator) while a thread renews
    it; release it when `run` returns. The metrics and health endpoints serve in both roles."""
    LEADER.labels(pod=elector.identity).set(0)
    serve(metrics_port)
    health = Health(elector.identity)
    if health_port:
        health.serve(health_port)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log.info(f"Lease {elector.namespace}/{elector.name}: {elector.identity} is a candidate")
    while not stop.is_set():
        if elector.try_acquire_or_renew():
            break
        if elector.observer.record is not None and health.role != "standby":
            log.info(f"Lease {elector.namespace}/{elector.name}: standby, held by {elector.observer.holder()}")
        if elector.observer.record is not None:
            health.role, health.holder = "standby", elector.observer.holder()
            elector.label_pod("false")
        stop.wait(elector.timing.retry)
    if stop.is_set():
        elector.release()  # a SIGTERM that arrived while the lease was being taken
        return 0
    signal.signal(signal.SIGTERM, previous)
    renewal = Renewal(elector.timing)
    elector.leading = True
    health.role, health.holder = "leader", elector.identity
    LEADER.labels(pod=elector.identity).set(1)
    elector.label_pod("true")
    elector.demote_previous()
    elector.announce()
    done = threading.Event()

    def renew():
        while not done.wait(elector.timing.retry):
            if elector.try_acquire_or_renew(renewal.request_timeout):
                renewal.renewed()
                elector.label_pod("true", timeout=renewal.request_timeout())  # if the first patch did not land
            elif why := must_stop(elector.observer, renewal):
                log.error(f"Lease {elector.namespace}/{elector.name}: {why}; exiting so nothing writes as a "
                          f"second leader")
                logging.shutdown()
                os._exit(1)

    renewer = threading.Thread(target=renew, name="lease-renewal", daemon=True)
    renewer.start()
    liveness = f"http://127.0.0.1:{free_loopback_port()}/healthz" if health_port else None
    health.kopf_liveness = liveness
    try:
        run(liveness)
    finally:
        done.set()
        renewer.join()
        LEADER.labels(pod=elector.identity).set(0)
        elector.label_pod("false")
        if elector.release():
            log.info(f"Lease {elector.namespace}/{elector.name}: released by {elector.identity}")
    return 0
