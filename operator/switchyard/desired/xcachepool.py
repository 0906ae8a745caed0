"""XCachePool: the planned cache hosts' workloads, how ready they are, and which files they serve as hot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .. import conditions as cond
from ..policy import hostpaths
from ..api import XCachePoolSpec, reasons
from ..api.plans import PoolPlan, decode
from ..api.xcachepool import HotFile
from ..builders.workerfleet import routing_data
from ..builders.xcachepool import build_pool, endpoint
from ..observe.cachedisk import HostDisk, UnmountedDisk, full_hosts_message, unmounted_message
from ..observe.clientmap import UNATTRIBUTED, UNKNOWN, is_network
from ..policy.imagepolicy import refusal
from ..policy.settings import Settings
from ..topology import NodeInfo
from . import Outcome, held, validate
from .hotfiles import HostBudget, file_rates, hot_files
from .ringload import RingLoad, factors, next_load, seeded, served_counters

KIND = "XCachePool"


@dataclass(frozen=True, kw_only=True)
class PoolOutcome(Outcome):
    """A pool that converges: besides its children, the plan they realise (its switch label)."""

    plan: PoolPlan
    ring_load: RingLoad | None = None  # what the ring-weight rule keeps until the next read (desired/ringload.py)


@dataclass(frozen=True)
class DiskRead:
    """The hosts' disks as their exporters reported them (status.disk), when the handler read them."""

    status: dict
    reports: tuple[HostDisk, ...] = ()
    texts: tuple[str, ...] = ()  # the /metrics texts that answered: the hot files are decided from them too
    read_at: float | None = None  # when (any monotonic clock): the ring weights' served Gbps are counter deltas


def client_networks(nodes: Sequence[NodeInfo], switch_label: str,
                    outside: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[str]]:
    """switch -> its nodes' client networks (InternalIPs, pod CIDRs, and the ranges a network plugin's own IPAM
    gave them: topology.with_pod_networks), and the address ranges of the readers outside
    Kubernetes behind it (`outside`, the plan's outsideNetworks): where readers behind each switch read from."""
    out: dict[str, set[str]] = {}
    for node in nodes:
        switch = node.label(switch_label)
        if switch and switch not in (UNKNOWN, UNATTRIBUTED):
            out.setdefault(switch, set()).update(n for n in node.client_networks if is_network(n))
    for switch, cidrs in (outside or {}).items():
        out.setdefault(switch, set()).update(cidrs)
    return {switch: sorted(networks) for switch, networks in sorted(out.items())}


def outside_routing(name: str, spec: XCachePoolSpec, plan: PoolPlan, status: Mapping, nodes: Sequence[NodeInfo]
                    ) -> dict[str, str] | None:
    """What the pool's exporters serve readers outside Kubernetes (the ring and hot list texts), while some
    read through it (the plan carries its ring): the ring the fleets publish, the same hosts out and weight
    factors, the same hot files (`status`: the one being written); None when none read through it."""
    if plan.cache_ring is None:
        return None
    ring = published_ring(plan.cache_ring, status["ringOut"], status["ringWeights"])
    return routing_data(name, ring, spec.port, {n.name: n.address for n in nodes}, status["hotFiles"])


def published_ring(ring: Mapping[str, float], out: Iterable[str], factors: Mapping[str, float]) -> dict[str, float]:
    """The ring readers are given (the fleets' routing ConfigMaps, the exporters' text for readers outside
    Kubernetes, and what the hot files are decided over): the plan's `ring` (host -> weight) without the
    hosts `out` (status.ringOut), each weight times its host's factor (status.ringWeights; 1 if not listed)."""
    gone = set(out)
    return {h: w * factors.get(h, 1.0) for h, w in ring.items() if h not in gone}


def hosts_out(hosts: Iterable[str], pods: Iterable[Mapping]) -> tuple[str, ...]:
    """The planned `hosts` out of the published hash ring: those with no Ready cache pod of the pool.

    `pods`: the pool's cache pods as the handler read them ({"node", "ready"}; a pod being deleted is not
    ready). While no planned host has a Ready pod (a pool starting, or every cache down) none is out:
    nothing is known to serve, and the readers keep the planned ring rather than none."""
    ready = {p.get("node") for p in pods if p.get("ready")}
    planned = sorted(set(hosts))
    if not ready.intersection(planned):
        return ()
    return tuple(h for h in planned if h not in ready)


def ring_events(before: Mapping | None, out: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    """A RingChanged event when the hosts out of the ring differ from the status's (`before`): which left, which returned."""
    was = set((before or {}).get("ringOut") or ())
    left, back = sorted(set(out) - was), sorted(was - set(out))
    if not left and not back:
        return ()
    parts = ([f"host(s) {', '.join(left)} out of the hash ring (no Ready cache pod)"] if left else []) + \
            ([f"host(s) {', '.join(back)} back in the hash ring"] if back else [])
    return (("Normal", reasons.RING_CHANGED, "; ".join(parts)),)


def tls_secret_name(spec_raw: Mapping) -> str | None:
    """The Secret a pool's auth needs, so the handler can read it first."""
    auth = (spec_raw or {}).get("auth") or {}
    return auth.get("tlsSecret") if auth.get("mode") == "scitokens" else None


def desired_pool(name: str, namespace: str, spec_raw: Mapping, status: Mapping | None, workloads: Mapping[str, dict],
                 nodes: Sequence[NodeInfo], settings: Settings, *, secrets: Mapping[str, dict | None] | None = None,
                 disk: DiskRead | None = None, unmounted: Sequence[UnmountedDisk] = (),
                 pods: Sequence[Mapping] = (), ring: Mapping[str, float] | None = None,
                 ring_load: RingLoad | None = None) -> PoolOutcome | Outcome:
    """The pool's children and status.

    `workloads`: desired/current/ready per switch of the StatefulSets it owns;
    `secrets`: the Secrets the handler read, by name (None: missing; a name
    absent from the map was not readable, and is not judged); `disk`: the
    latest exporter reads, if any; `unmounted`: the paths the cache pods'
    prepare steps refused as no mounted disk (cachedisk.unmounted_disks); `pods`: its cache pods' nodes and
    readiness, which decide the hosts out of the hash ring (hosts_out, status.ringOut); `ring`: the pool's
    ring as the plans of its fleets with ring readers carry it (host -> weight; None: no fleet's worker reads
    through it, and the ring is the plan's for readers outside Kubernetes, or none), over which
    the hot files are decided from the exporters' texts (status.hotFiles, hot_list); `ring_load`: what the
    ring-weight rule kept from the last read (None: seeded from status.ringWeights), which a new read moves
    (status.ringWeights, next_ring_load; the outcome carries the state to keep). With no ring (nobody reads
    through it) there is no factor and no hot file: nobody would follow them.
    A plain Outcome (held): nothing is rendered, applied or pruned.
    """
    spec, error = validate(XCachePoolSpec, spec_raw)
    if spec is None:
        return held({}, cond.failed(reasons.INVALID_SPEC, error))
    if blocked := refusal([spec.image], settings.images) or \
            hostpaths.refusal(hostpaths.pool_paths(spec.storage), settings.host_paths):
        # Nothing is rendered, applied or pruned: running hosts keep their disks and config.
        return held({}, blocked)
    if problem := tls_secret_problem(spec, secrets or {}):
        return held({}, problem)
    plan, invalid = decode(PoolPlan, dict(status or {}), spec.facility_ref.name)
    if invalid:
        return held({}, cond.failed(reasons.INVALID_PLAN, invalid))
    if plan is None:
        return held({}, cond.progressing(reasons.AWAITING_PLAN,
                                         f"waiting for AnalysisFacility {spec.facility_ref.name} "
                                         "to place this pool"))
    hosts = {sw: list(h) for sw, h in plan.hosts.items()}

    switches = [{"switch": sw, "desired": len(hosts[sw]), "ready": min(workloads.get(sw, {}).get("ready", 0), len(hosts[sw]))}
                for sw in sorted(hosts)]
    planned = sum(s["desired"] for s in switches)
    ready = sum(s["ready"] for s in switches)
    out = {
        "hosts": planned,
        "readyHosts": ready,
        "switches": switches,
        "servingGbps": serving_gbps(spec, {s["switch"]: s["ready"] for s in switches}, hosts, nodes),
        "endpoint": endpoint(name, namespace, spec.port),
        "ringOut": list(hosts_out((h for hs in hosts.values() for h in hs), pods)),
    }
    reports: tuple[HostDisk, ...] = ()
    if ready and disk is not None:
        out["disk"], reports = disk.status, disk.reports
    # Nobody reads through the ring (no fleet's worker, no reader outside Kubernetes): no weight or hot list
    # is followed by anyone, so none is decided (a local reader reads its own switch's caches).
    weights = ring if ring is not None else plan.cache_ring or {}
    load = next_ring_load(name, spec, status, ring_load, published_ring(weights, out["ringOut"], {}),
                          nodes, disk if ready else None)
    out["ringWeights"] = {h: f for h, f in factors(load).items() if h in weights and h not in out["ringOut"]}
    out["hotFiles"] = hot_list(name, spec, (status or {}).get("hotFiles"),
                               published_ring(weights, out["ringOut"], out["ringWeights"]), nodes,
                               disk.texts if ready and disk is not None else (), load.served)
    children = build_pool(name, spec, hosts, plan.switch_label, settings.exporter_image,
                          clients=client_networks(nodes, plan.switch_label, plan.outside_networks),
                          routing=outside_routing(name, spec, plan, out, nodes))
    if planned and ready == planned:
        states = cond.ready(f"{ready} cache host(s) ready on {len(switches)} switch(es)")
    else:
        states = cond.progressing(reasons.HOSTS_STARTING, f"{ready}/{planned} cache hosts ready")
    planned_hosts = {h for hs in hosts.values() for h in hs}
    lagging = [s["switch"] for s in switches
               if s["ready"] < s["desired"] and workloads.get(s["switch"], {}).get("current", 0) >= s["desired"]]
    not_mounted = unmounted_message(tuple(d for d in unmounted if d.host in planned_hosts))
    problems = [(reason, message) for reason, message in (
        (reasons.DISK_NOT_MOUNTED, not_mounted),
        (reasons.HOSTS_NOT_READY, f"hosts not ready on {', '.join(lagging)}" if lagging else ""),
        (reasons.SPACE_PAST_HIGH_WATERMARK, full_hosts_message(list(reports))),
    ) if message]
    if problems:
        states["Degraded"] = cond.State(True, problems[0][0], "; ".join(message for _, message in problems))
    return PoolOutcome(out, states, children=children, plan=plan, ring_load=load,
                       events=degraded_events(cond.condition((status or {}).get("conditions"), "Degraded"),
                                              states["Degraded"], news=not_mounted) + ring_events(status, out["ringOut"])
                       + hot_file_events((status or {}).get("hotFiles"), out["hotFiles"])
                       + ring_weight_events((status or {}).get("ringWeights"), out["ringWeights"]))


def host_budgets(spec: XCachePoolSpec, ring: Mapping[str, float], nodes: Sequence[NodeInfo],
                 measured: Iterable[str], served: Mapping[str, float] | None = None) -> dict[str, HostBudget]:
    """Each ring host's budget for the hot-file rule (desired.hotfiles), in Gbps.

    cap: what the planner counts the host to serve (serveGbps less serveHeadroom, capped by its NIC);
    served: `served` (its served-bytes counter between the ring-weight rule's last two reads) where it has
    the host; else, for the `measured` hosts, whose exporter answered, None (the sum of its files' rates
    stands in: the exporter lists only its busiest files, so this reads low on a host serving many); else
    its weight's share of the ring's caps (the pool's status carries no planned Gbps: the plan's ring at
    full capacity)."""
    nics = {n.name: n.nic_gbps for n in nodes}
    caps = {h: min(nics.get(h) or spec.planned_serve_gbps, spec.planned_serve_gbps) for h in ring}
    total_weight, total_cap, measured = sum(ring.values()), sum(caps.values()), set(measured)
    out = {}
    for host, weight in ring.items():
        if host in (served or {}):
            now = served[host]
        elif host in measured:
            now = None
        else:
            now = weight / total_weight * total_cap if total_weight > 0 else 0.0
        out[host] = HostBudget(caps[host], now)
    return out


def next_ring_load(name: str, spec: XCachePoolSpec, status: Mapping | None, kept: RingLoad | None,
                   ring: Mapping[str, float], nodes: Sequence[NodeInfo], disk: DiskRead | None) -> RingLoad:
    """The ring-weight rule's state after the exporters' read `disk` (desired/ringload.py) over the `ring`
    (the plan's weights without the hosts out); unchanged when no new read came (none yet, the same one).
    An empty `ring` (nobody reads through it) keeps no factor: every host weighs as planned."""
    if not ring:
        return RingLoad()
    load = kept if kept is not None else seeded(_lowered((status or {}).get("ringWeights")))
    if disk is None or disk.read_at is None or disk.read_at == load.at:
        return load
    caps = {h: b.cap_gbps for h, b in host_budgets(spec, ring, nodes, ()).items()}
    return next_load(load, served_counters(disk.texts, name), disk.read_at, ring, caps)


def _lowered(listed: Mapping | None) -> dict[str, float]:
    """status.ringWeights as host -> factor; an entry not a factor below 1 (edited by hand) is dropped."""
    out = {}
    for host, value in (listed or {}).items():
        if isinstance(value, (int, float)) and 0 < value < 1:
            out[str(host)] = float(value)
    return out


def ring_weight_events(before: Mapping | None, after: Mapping[str, float]) -> tuple[tuple[str, str, str], ...]:
    """A RingWeightsChanged event when the ring's weight factors differ from the status's: each host whose
    factor moved, from and to (1 for a host not listed)."""
    was = _lowered(before)
    moved = [f"{h} {was.get(h, 1.0):g}->{after.get(h, 1.0):g}" for h in sorted(was.keys() | after.keys())
             if was.get(h, 1.0) != after.get(h, 1.0)]
    if not moved:
        return ()
    return (("Normal", reasons.RING_WEIGHTS_CHANGED,
             f"ring weight factors ({len(after)} host(s) lowered): {', '.join(moved)}"),)


def hot_list(name: str, spec: XCachePoolSpec, before: Sequence[Mapping] | None, ring: Mapping[str, float],
             nodes: Sequence[NodeInfo], texts: Sequence[str], served: Mapping[str, float]) -> list[dict]:
    """status.hotFiles: decided from the exporters' `texts` over the published `ring` (published_ring), each
    host's serve from `served` (host_budgets); with no text (no exporter answered, or not read: simulated
    nodes) the list stays as it was. No ring (nobody reads through it), no hot file: a hot file's other homes
    are picked by ring readers alone."""
    previous = _hot_files(before)
    if not ring:
        return []
    if not texts:
        return [f.to_wire() for f in previous]
    rates = file_rates(texts, name)
    decided = hot_files(rates, host_budgets(spec, ring, nodes, rates, served), ring, previous)
    return [f.to_wire() for f in decided]


def _hot_files(listed: Sequence[Mapping] | None) -> tuple[HotFile, ...]:
    """The status's list as HotFiles; an entry the model refuses (edited by hand) is dropped."""
    out = []
    for entry in listed or ():
        try:
            out.append(HotFile.model_validate(entry))
        except ValueError:
            continue
    return tuple(out)


def hot_file_events(before: Sequence[Mapping] | None, after: Sequence[Mapping],
                    shown: int = 5) -> tuple[tuple[str, str, str], ...]:
    """A HotFilesChanged event when the hot list differs from the status's: files added and removed, replica
    counts changed (at most `shown` of each named)."""
    was = {f.path: f.replicas for f in _hot_files(before)}
    now = {f["path"]: f["replicas"] for f in after}
    added = [f"{p} (x{now[p]})" for p in sorted(now.keys() - was.keys())]
    removed = sorted(was.keys() - now.keys())
    moved = [f"{p} x{was[p]}->x{now[p]}" for p in sorted(now.keys() & was.keys()) if now[p] != was[p]]
    parts = [f"{what} {_named(items, shown)}" for what, items in
             (("added", added), ("removed", removed), ("replicas", moved)) if items]
    if not parts:
        return ()
    return (("Normal", reasons.HOT_FILES_CHANGED, f"hot files ({len(now)} listed): " + "; ".join(parts)),)


def _named(items: Sequence[str], shown: int) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def degraded_events(before: Mapping | None, after: cond.State, news: str = "") -> tuple[tuple[str, str, str], ...]:
    """An event when Degraded turns on, changes reason, or clears; also when `news` (a problem that names
    hosts and paths, not a measure that moves by itself) is not yet in the condition's message."""
    was = (before or {}).get("status") == "True"
    changed = (before or {}).get("reason") != after.reason or bool(news and news not in (before or {}).get("message", ""))
    if after.status and (not was or changed):
        return (("Warning", after.reason, after.message),)
    if was and not after.status:
        return (("Normal", reasons.RECOVERED,
                 "No longer degraded: every planned host is ready and below its high water mark"),)
    return ()


def tls_secret_problem(spec: XCachePoolSpec, secrets: Mapping[str, dict | None]) -> dict[str, cond.State] | None:
    """Ready=False when scitokens names a TLS Secret that is missing or not a TLS Secret (its data is never read out)."""
    wanted = spec.auth.tls_secret if spec.auth.mode == "scitokens" else None
    if not wanted or wanted not in secrets:
        return None
    secret = secrets[wanted]
    if secret is None:
        return cond.progressing(reasons.TLS_SECRET_NOT_FOUND, f"Secret {wanted} (auth.tlsSecret) does not exist")
    data = secret.get("data") or {}
    if secret.get("type") != "kubernetes.io/tls" or not data.get("tls.crt") or not data.get("tls.key"):
        return cond.failed(reasons.TLS_SECRET_INVALID, f"Secret {wanted} (auth.tlsSecret) must be of type "
                                                       "kubernetes.io/tls with tls.crt and tls.key")
    return None


def serving_gbps(spec: XCachePoolSpec, ready_by_switch: Mapping[str, int], hosts: Mapping[str, list[str]],
                 nodes: Sequence[NodeInfo]) -> float:
    nics = {n.name: n.nic_gbps for n in nodes}
    total = 0.0
    for switch, ready in ready_by_switch.items():
        # Ready pods are not tied to hosts here; count the slowest hosts first to stay conservative.
        speeds = sorted(min(nics.get(h) or spec.serve_gbps, spec.serve_gbps) for h in hosts.get(switch, []))
        total += sum(speeds[:ready])
    return round(total, 3)
