"""AnalysisFacility: plan the placement; its inline children and the plans of attached fleets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .. import conditions as cond
from ..policy import hostpaths
from .. import planner
from ..api import AnalysisFacilitySpec, reasons, uplinkscore
from ..api.plans import FleetPlan, PoolPlan, decode
from ..api.workerfleet import WorkerFleetSpec
from ..builders.facility import build_children, fleet_object_name, pool_object_name, refused_fleet_plan
from ..builders.workerfleet import worker_image
from ..policy.imagepolicy import refusal
from ..planner import FleetRequest, Placement, PoolRequest
from ..planner.explain import full_both_ways, shortfall
from ..planner.fairshare import with_fair_share
from ..policy.settings import Settings
from ..topology import NodeInfo, Topology, snapshot
from . import Outcome, held, validate

KIND = "AnalysisFacility"
CHILD_KINDS = ("XCachePool", "WorkerFleet", "S3Staging")
KEPT_STATUS = ("switches", "caches", "workers", "plan", "drift")
DRIFT_STATUS = "drift"  # the drift check's streaks under way: the handler writes them after the plan (handlers/drift.py)


@dataclass(frozen=True, kw_only=True)
class FacilityOutcome(Outcome):
    """A facility that converges (`children` set): what its handler needs besides the children."""

    spec: AnalysisFacilitySpec
    plan: planner.Plan
    fleet_plans: tuple[tuple[str, FleetPlan], ...]   # (name, plan) of every valid attached fleet: its status.plan
    placed: tuple[dict, ...]                          # the attached fleets the plan places (facility_states)
    problems: tuple[tuple[str, str], ...]             # what the plan had to do without (plan_problems)

    def states_after_write(self, live: Iterable[dict]) -> dict[str, cond.State]:
        """The states again, the children judged as the writes left them (`live`: each child as the API
        server answered the write): one just given a new spec has not seen it yet, so is not ready."""
        return facility_states(_as_desired(self.children, list(live)), self.problems, self.placed)


def desired_facility(name: str, spec_raw: dict, old_status: dict | None, nodes: Sequence[NodeInfo],
                     children: Sequence[dict], standalone: Sequence[dict], settings: Settings
                     ) -> FacilityOutcome | Outcome:
    """The facility's children, the plans of its attached fleets, and its status.

    `children`: the objects it owns now (kind, metadata, status); `standalone`:
    WorkerFleets of other owners whose facilityRef names it. Bad input, a
    refused image or disk, or no possible plan: a plain Outcome, nothing is
    applied or pruned.
    """
    keep = {k: v for k, v in (old_status or {}).items() if k in KEPT_STATUS}
    spec, error = validate(AnalysisFacilitySpec, spec_raw)
    if spec is None:
        return held(keep, cond.failed(reasons.INVALID_SPEC, error))
    blocked = refusal(_images(spec), settings.images) or hostpaths.refusal(
        [path for pool in spec.cache_pools for path in hostpaths.pool_paths(pool.storage)], settings.host_paths)
    if blocked:
        return held(keep, blocked)

    topology = snapshot(list(nodes), spec.network, spec.outside_readers)
    attached = [(f, s) for f in standalone for s in [validate(WorkerFleetSpec, f["spec"])[0]] if s is not None]
    try:
        plan, refused = plan_with_attached(topology, spec, attached,
                                           current_placement(children, standalone, spec, name))
    except planner.Unsatisfiable as exc:
        return held(keep, cond.failed(exc.reason, exc.message, degraded=bool(children)))
    except Exception as exc:  # noqa: BLE001 - a planner fault is this facility's condition, not a crash loop
        return Outcome(keep, cond.failed(reasons.PLANNING_FAILED,
                                         f"the planner failed on this input ({type(exc).__name__}); "
                                         "running children are left as they are", degraded=bool(children)),
                       errors=(cond.printable(f"Planning failed: {type(exc).__name__}: {exc}"),))

    desired = build_children(name, spec, *inline_plans(name, spec, plan))
    plans = tuple((f["metadata"]["name"], refused_fleet_plan(name, spec, *refused[f["metadata"]["name"]])
                   if f["metadata"]["name"] in refused else fleet_plan(name, spec, plan, f["metadata"]["name"], s.pool))
                  for f, s in attached)
    status = {
        **{k: v for k, v in keep.items() if k == DRIFT_STATUS},   # until the handler writes it anew
        "switches": sum(1 for s in topology.switches if s.hosts),
        "caches": sum(len(n) for by_sw in plan.placement.caches.values() for n in by_sw.values()),
        "workers": sum(n for by_sw in plan.placement.workers.values() for n in by_sw.values()),
        "plan": {**summary(plan, topology), "target": shortfall(
            spec.target_gbps, plan, topology, [PoolRequest(p.name, p) for p in spec.cache_pools],
            [FleetRequest(f.name, f) for f in spec.fleets])},
    }
    # A standalone fleet the facility could not place answers for itself (its own condition).
    placed = tuple(f for f, _ in attached if f["metadata"]["name"] not in refused)
    problems = tuple(plan_problems(topology, plan))
    states = facility_states(_as_desired(desired, children), problems, placed)
    return FacilityOutcome(status, states, children=desired, spec=spec, plan=plan, fleet_plans=plans,
                           placed=placed, problems=problems)


def inline_plans(facility: str, spec: AnalysisFacilitySpec, plan: planner.Plan
                 ) -> tuple[dict[str, PoolPlan], dict[str, FleetPlan]]:
    """Each inline pool's and fleet's slice of the plan, by its name (what build_children hands them)."""
    return ({p.name: pool_plan(facility, plan, p.name, spec.network.switch_label, spec) for p in spec.cache_pools},
            {f.name: fleet_plan(facility, spec, plan, f.name, f.pool) for f in spec.fleets})


def pool_plan(facility: str, plan: planner.Plan, pool: str, switch_label: str,
              spec: AnalysisFacilitySpec | None = None) -> PoolPlan:
    """A pool's slice of the plan: its cache hosts per switch; with outside readers declared (`spec`), their
    address ranges by switch (every group's: any may reach any cache) and, if some read through this pool,
    its ring, which its exporters serve them."""
    outside = spec.outside_readers if spec is not None else []
    networks: dict[str, set[str]] = {}
    for group in outside:
        networks.setdefault(group.switch, set()).update(group.cidrs)
    first = spec.cache_pools[0].name if spec is not None and spec.cache_pools else None
    read_through = any((group.pool or first) == pool for group in outside)
    return PoolPlan(facility=facility, switch_label=switch_label,
                    hosts={sw: sorted(nodes) for sw, nodes in sorted(plan.placement.caches.get(pool, {}).items())},
                    outside_networks={sw: sorted(c) for sw, c in sorted(networks.items())} if networks else None,
                    cache_ring=dict(sorted((plan.hash_weights.get(pool) or {}).items())) if read_through else None)


def fleet_plan(facility: str, spec: AnalysisFacilitySpec, plan: planner.Plan, fleet_key: str,
               pool_ref: str | None) -> FleetPlan:
    """A fleet's slice of the plan: its workers per switch and where its caches are."""
    pool_name = pool_ref or (spec.cache_pools[0].name if spec.cache_pools else None)
    pool = next((p for p in spec.cache_pools if p.name == pool_name), None)
    return FleetPlan(
        facility=facility,
        switch_label=spec.network.switch_label,
        workers=dict(sorted(plan.placement.workers.get(fleet_key, {}).items())),
        # Of those, the ring (hashed) readers per switch: read back as the current placement.
        hashed=dict(sorted((plan.placement.hashed.get(fleet_key) or {}).items())),
        pool=pool_object_name(facility, pool.name) if pool else None,
        pool_port=pool.port if pool else 1094,
        pool_origin_mode=pool.origin.mode if pool else "fixed",
        cache_switches=sorted(plan.placement.caches.get(pool_name, {})),
        routing=dict(sorted(plan.routing.items())),
        # The ring hashed readers use: cache host (node name) -> weight.
        cache_ring=dict(sorted((plan.hash_weights.get(pool_name) or {}).items())),
        # Workers no node of the facility's switches has room for (cores, memory, pod slots).
        unplaced=plan.unplaced.get(fleet_key, 0),
    )


def facility_states(children: Sequence[dict], problems: Sequence[tuple[str, str]],
                    attached: Sequence[dict] = ()) -> dict[str, cond.State]:
    """Ready when every child of its own is; Degraded by what the plan had to do without (first reason
    wins), or by a Degraded child.

    `attached`: the standalone fleets it places, another team's: they answer for themselves (their own
    conditions) and never hold the facility's Ready, so one team's fleet, starting, stuck or asking for more
    than the nodes hold, does not turn the shared facility Ready=False; their workers that fit no node are
    its Degraded WorkersUnplaced, and a Degraded one is named as a child is."""
    states = children_state(children, attached)
    if problems:
        states["Degraded"] = cond.State(True, problems[0][0], "; ".join(message for _, message in problems))
    return states


def _as_desired(desired: Sequence[dict], observed: Sequence[dict]) -> list[dict]:
    """Each desired child as observed; one not seen yet stands for itself, without a status (not ready)."""
    seen = {(c["kind"], c["metadata"]["name"]): c for c in observed}
    return [seen.get((d["kind"], d["metadata"]["name"]), {"kind": d["kind"], "metadata": d["metadata"]}) for d in desired]


def plan_with_attached(topology, spec: AnalysisFacilitySpec, attached: Sequence[tuple[dict, WorkerFleetSpec]],
                       current: Placement | None) -> tuple[planner.Plan, dict[str, tuple[str, str]]]:
    """Plan the facility's own pools and fleets with the standalone fleets it can place.

    One team's fleet must not stop the facility: a standalone fleet naming a
    pool the facility lacks, or one no node can hold, is left out of the plan
    and refused alone (returned as {fleet: (reason, message)}); so is one the
    planner fails on. What fails without any standalone fleet is the facility's.
    """
    pools = [PoolRequest(p.name, p) for p in spec.cache_pools]
    inline = [FleetRequest(f.name, f) for f in spec.fleets]
    pool_names = {p.name for p in spec.cache_pools}
    refused: dict[str, tuple[str, str]] = {}
    for fleet, fleet_spec in attached:
        if fleet_spec.pool is not None and fleet_spec.pool not in pool_names:
            refused[fleet["metadata"]["name"]] = (
                reasons.UNKNOWN_POOL, f"pool {fleet_spec.pool!r} is not one of the facility's cache pools "
                                      f"({', '.join(sorted(pool_names)) or 'it has none'})")
    while True:
        requests = [FleetRequest(f["metadata"]["name"], s) for f, s in attached if f["metadata"]["name"] not in refused]
        try:
            result = planner.plan(topology, pools, inline + requests, spec.routing, current=current)
        except planner.Unsatisfiable as exc:
            if exc.fleet is None or exc.fleet not in {r.name for r in requests}:
                raise
            refused[exc.fleet] = (exc.reason, exc.message)
        except Exception:
            if not requests:
                raise
            # Find the standalone fleets the planner fails on, one at a time, beside the facility's own.
            planner.plan(topology, pools, inline, spec.routing)  # raises if the facility's own input fails
            for request in requests:
                try:
                    planner.plan(topology, pools, inline + [request], spec.routing)
                except Exception as exc:  # noqa: BLE001
                    refused[request.name] = (reasons.PLANNING_FAILED,
                                             f"the planner failed on this fleet ({type(exc).__name__})")
            if not any(r.name in refused for r in requests):
                raise
        else:
            missing = unaccounted(result, inline + requests)
            if not missing:
                # outside the try: a fault of the prediction is the facility's, not a standalone fleet's
                return with_fair_share(topology, pools, inline + requests, result), refused
            own = [f.name for f in inline if f.name in missing]
            if own or not requests:
                raise planner.Unsatisfiable(reasons.PLAN_INCOMPLETE,
                                            "; ".join(missing[name] for name in own or missing))
            for name in missing:
                refused[name] = (reasons.PLAN_INCOMPLETE, missing[name])


def unaccounted(plan: planner.Plan, fleets: Sequence[FleetRequest]) -> dict[str, str]:
    """Fleets whose workers the plan neither places nor counts as unplaced, and what it has of them.

    Such a plan would leave a fleet waiting for a re-plan that brings the same (AwaitingPlan, with no
    reason): the planner's fault on a degenerate input. The fleet is refused with this message instead."""
    out = {}
    for fleet in fleets:
        placed = sum(plan.placement.workers.get(fleet.name, {}).values())
        unplaced = plan.unplaced.get(fleet.name, 0)
        if placed + unplaced != fleet.body.replicas:
            out[fleet.name] = (f"fleet {fleet.name}: the plan places {placed} and leaves {unplaced} unplaced of its "
                               f"{fleet.body.replicas} workers; the planner failed on this input")
    return out


def current_placement(children: Sequence[dict], standalone: Sequence[dict], spec: AnalysisFacilitySpec,
                      facility: str) -> Placement:
    """The placement the children realise now, read back from the plans they hold (status.plan)."""
    pools = {pool_object_name(facility, p.name): p.name for p in spec.cache_pools}
    fleets = {fleet_object_name(facility, f.name): f.name for f in spec.fleets}
    caches, workers, hashed = {}, {}, {}
    for child in [*children, *standalone]:
        name = child["metadata"]["name"]
        if child["kind"] == "XCachePool" and name in pools:
            pool, _ = decode(PoolPlan, child.get("status"), facility)
            if pool is not None:
                caches[pools[name]] = {sw: tuple(nodes) for sw, nodes in pool.hosts.items()}
        elif child["kind"] == "WorkerFleet":
            fleet, _ = decode(FleetPlan, child.get("status"), facility)
            if fleet is not None and fleet.problem is None:
                workers[fleets.get(name, name)] = dict(fleet.workers)
                hashed[fleets.get(name, name)] = dict(fleet.hashed)
    return Placement(caches=caches, workers=workers, hashed=hashed)


def summary(plan: planner.Plan, topology: Topology | None = None) -> dict:
    """status.plan: the LP optimum and its per-uplink loads, and beside them (when the plan has it) the fair
    share competing flows get, per switch what its cache hosts serve and what its uplink carries each way;
    the readers outside Kubernetes on a switch (topology.outside) apart from its pods."""
    fair = plan.fair
    outside = {u.switch: topology.outside_on(u.switch) for u in plan.uplinks} if topology is not None else {}
    both_ways = set(full_both_ways(fair)) if fair else set()
    doc = {
        "predictedGbps": plan.predicted_gbps,
        "boundGbps": plan.bound_gbps,
        "optimal": plan.optimal,
        "gap": plan.gap,
        "bottleneck": plan.bottleneck,
        "planner": plan.planner,
        "switches": [{
            "name": u.switch,
            "caches": plan.placement.cache_count(u.switch),
            "workers": plan.placement.worker_count(u.switch),
            "inGbps": u.in_gbps,
            "outGbps": u.out_gbps,
            "utilisation": round(u.utilisation, 4),
            "routing": plan.routing.get(u.switch, "local"),
            **({"serveGbps": fair.switch_served.get(u.switch, 0.0),
                "fairInGbps": fair.uplinks[u.switch][uplinkscore.IN],
                "fairOutGbps": fair.uplinks[u.switch][uplinkscore.OUT]} if fair else {}),
            **{f"fullHostsBehind{d.title()}": len(hosts) for d in uplinkscore.DIRECTIONS
               if fair and (hosts := fair.full_hosts_behind.get(uplinkscore.link(d, u.switch)))},
            **({"fullBothWays": True} if u.switch in both_ways else {}),
            **({"outsideReaders": sum(g.count for g in groups),
                "outsideGbps": round(sum(g.demand_gbps for g in groups), 3),
                **({"outsideFairGbps": fair.outside.get(u.switch, 0.0)} if fair else {})}
               if (groups := outside.get(u.switch)) else {}),
        } for u in plan.uplinks],
    }
    if fair:
        doc["fairShareGbps"] = fair.delivered_gbps
    return doc


def _images(spec: AnalysisFacilitySpec) -> list[str]:
    """Every image the inline children would run (the operator's own helper image aside)."""
    images = [p.image for p in spec.cache_pools] + [worker_image(f) for f in spec.fleets]
    if spec.staging is not None and spec.staging.embedded is not None:
        images.append(spec.staging.embedded.image)
    return images


def _ready(child: dict) -> bool:
    """Ready, and for the spec it has now: a child just given a new spec is not ready until it has seen it."""
    status = child.get("status") or {}
    current = status.get("observedGeneration", 0) >= (child.get("metadata") or {}).get("generation", 0)
    return current and cond.is_true(status.get("conditions"), "Ready")


def children_state(children: Sequence[dict], attached: Sequence[dict] = ()) -> dict[str, cond.State]:
    not_ready = [c for c in children if not _ready(c)]
    degraded = [c for c in [*children, *attached] if cond.is_true((c.get("status") or {}).get("conditions"), "Degraded")]
    if not not_ready:
        states = cond.ready(f"{len(children)} children ready")
    else:
        names = ", ".join(f"{c['kind']} {c['metadata']['name']}" for c in not_ready[:5])
        states = cond.progressing(reasons.CHILDREN_NOT_READY, f"waiting for {names}")
    # A child can be Ready and still Degraded (a bucket over quota, a host down).
    if degraded:
        states["Degraded"] = cond.State(True, reasons.CHILD_DEGRADED,
                                        ", ".join(f"{c['kind']} {c['metadata']['name']}" for c in degraded[:5]))
    return states


def plan_problems(topology, plan: planner.Plan) -> list[tuple[str, str]]:
    """(reason, message) for what the plan had to do without, most pressing first."""
    problems = []
    if lost := topology.not_ready_nodes:
        problems.append((reasons.NODES_NOT_READY,
                         f"{len(lost)} node(s) on the facility's switches are NotReady and left "
                         f"out of the plan: {', '.join(lost[:5])}{', …' if len(lost) > 5 else ''}"))
    if plan.unplaced:
        problems.append((reasons.WORKERS_UNPLACED, ", ".join(f"fleet {name}: {n} worker(s) fit no node"
                                                             for name, n in sorted(plan.unplaced.items()))))
    if unknown := topology.unknown_switch_nodes:
        problems.append((reasons.NODES_ON_UNKNOWN_SWITCH, f"{len(unknown)} node(s) carry a switch not in "
                                                          f"spec.network.switches, e.g. {unknown[0]}"))
    return problems
