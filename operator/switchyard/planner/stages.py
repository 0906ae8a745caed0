"""Solve: the placement model's stages with HiGHS (Gbps, then the calmest peak, then the fewest moves).

Each stage pins what the earlier ones achieved, so the order is strict; large
models search a box around a rounded LP guide instead of the whole space.
"""

from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager

from ..api.uplinkscore import UTIL_SLACK, UTIL_TOLERANCE
from .formulation import Formulation, formulate
from .lp import Infeasible, LinearModel, Solution
from .problem import Problem

# Tolerances of the stages (those on the peak, UTIL_SLACK and UTIL_TOLERANCE, are in api/uplinkscore.py).
GBPS_SLACK = 1e-6      # relative: later stages keep the Gbps within this of stage 1
# Large models solve stage 1 to this relative gap (the box is accepted within it).
STAGE1_GAP = 1e-3
# Up to this many integers, stages 2 and 3 search the whole space; above, the box.
EXACT_LIMIT = 300
# Simplex iterations for the large models' first stage-2 LP, the guide cache counts are rounded
# from (primal simplex: each iteration keeps the point feasible and the peak no higher). Solved to
# the end it took over 2,000 at 5,000 nodes, a quarter of the plan's time, for counts no better.
GUIDE_ITERATIONS = 300
# Branch-and-bound nodes for the large models' cache-count MILP (started from the best box
# tried): its incumbent is taken at the limit, and the plan reports its gap to the bound.
CACHE_COUNT_NODES = 100


def upper_bound(problem: Problem) -> float:
    """LP relaxation of the routing-free (auto) model: no placement and routing delivers more."""
    fm = formulate(problem, "auto")
    return _most_gbps(fm, relax=True).objective


def solve(fm: Formulation) -> tuple[float, Solution, float | None]:
    """(LP-relaxation Gbps, integer solution, proven Gbps), stage by stage.

    The proven Gbps is stage 1's when its MILP was searched over the whole model to its gap (no
    model delivers more), else None: the box and cache-count searches are cut by design.

    Small models (up to EXACT_LIMIT integers) are solved exactly, stage after
    stage. Stage 2 (a min-max) is what branch and bound cannot finish at
    thousands of integers, so larger models go in three steps:

    1. cache counts, fixed for the rest. Tried in turn, the first that keeps
       the Gbps within STAGE1_GAP of the LP wins: in a re-plan, today's (a
       moved cache starts cold); the LP's rounded up as far as nodes and
       maxHostsPerSwitch allow (a cache host more costs no Gbps unless its
       node's room was needed for workers); a MILP with only cache counts
       and routing flags integer, started from the best box so far and cut
       at CACHE_COUNT_NODES branch-and-bound nodes.
    2. a guide: stages 2 and 3 as LPs at that Gbps.
    3. the integer stages over a box: each worker count between the floor and
       ceiling of its guide value (in a re-plan widened to take in today's
       count, so staying put is always a candidate).

    If no cache counts tried keep the Gbps within STAGE1_GAP, the best of them
    is taken (the bound and gap say how far it is). Only if no box holds a
    placement at all is stage 1 solved over the whole space, and stages 2
    and 3 search a box widened to take in that solution.
    """
    m = fm.model
    start = m.mark()
    caches = sorted(fm.caches.values())
    workers = _worker_counts(fm)
    try:
        relaxed = _most_gbps(fm, relax=True)
        m.rollback(start)
        if len(fm.integers()) <= EXACT_LIMIT:
            first = _most_gbps(fm, relax=False)
            return relaxed.objective, _calm_then_stable(fm, first.objective, relax=False, tolerance=UTIL_TOLERANCE,
                                                        start=first), first.objective if first.optimal else None
        target = relaxed.objective * (1 - STAGE1_GAP) - 1e-6
        # The guide only has to be a feasible point on the way to the calmest: the boxed stages
        # re-solve for the rounded counts. The cap keeps its cost bounded (deterministically).
        calm = _calm_then_stable(fm, target, relax=True, iterations=GUIDE_ITERATIONS)
        m.rollback(start)
        # (The LP's counts rounded to the nearest were a third candidate: on every bench case they
        # reached what rounding up reached, or less, at a box's cost each time.)
        candidates = [_rounded_caches(fm, calm, math.ceil), None]
        if fm.current:
            # a re-plan keeps today's cache hosts if that keeps the Gbps: a moved cache starts cold
            candidates.insert(0, dataclasses.replace(calm, x=_with_current(calm.x, fm.current)))
        tried: list[tuple[float, Solution]] = []
        for counts in candidates:
            accept = None
            if counts is None:
                # the best box so far is a feasible point of the cache-count MILP: its incumbent to beat
                best = max(tried, key=lambda t: t[0])[2][1] if tried else None
                counts = _cache_counts(fm, best)
                m.rollback(start)
                if tried:
                    # the last candidate: if it beats those tried (as the choice below would take it),
                    # its stages 2 and 3 run now, not in a second box for the same counts
                    most = max(t[0] for t in tried)
                    accept = most / (1 - STAGE1_GAP) + 1e-6 if fm.current else most + 1e-6
            with _fixed(m, caches, counts):
                gbps, solution, reached = _boxed_stages(fm, workers, target, start, accept=accept)
            if solution is not None:
                return relaxed.objective, solution, None
            if gbps is not None:
                tried.append((gbps, counts, reached))
        if tried:
            # none kept the Gbps within STAGE1_GAP: the best of them, at the Gbps it reached
            gbps, counts, reached = max(tried, key=lambda t: t[0])
            if fm.current:
                # a re-plan takes the first (today's counts first) within STAGE1_GAP of the best
                gbps, counts, reached = next(t for t in tried if t[0] >= gbps * (1 - STAGE1_GAP))
            with _fixed(m, caches, counts):
                chosen = _boxed_stages(fm, workers, target, start, accept=0.0, reached=reached)[1]
            if chosen is not None:
                return relaxed.objective, chosen, None
            # (the later stages found no point at the Gbps that box reached, numerically: the whole space below)
        first = _most_gbps(fm, relax=False, gap=STAGE1_GAP)
        pinned = m.mark()
        guide = _uncrossed(fm, _calm_then_stable(fm, first.objective, relax=True))
        m.rollback(pinned)
        with _box(m, workers, guide, first, current=fm.current):
            return relaxed.objective, _calm_then_stable(fm, first.objective, relax=False,
                                                        tolerance=UTIL_TOLERANCE), None
    finally:
        m.rollback(start)


def _boxed_stages(fm: Formulation, workers: list[int], target: float, start: int, accept: float | None = None,
                  reached: tuple[Solution, Solution] | None = None) -> tuple[float | None, Solution | None, tuple | None]:
    """Steps 2 and 3 with the cache counts fixed: (stage-1 Gbps in the box, solution, (guide, stage-1
    point)), the solution None if the Gbps falls short of `target` (and of `accept`, when given), all
    None if the box holds no placement. `reached`: the (guide, stage-1 point) an earlier call with the
    same counts returned: its box and stage 1 are not searched again."""
    m = fm.model
    try:
        if reached is None:
            best = _most_gbps(fm, relax=True).objective
            guide = _uncrossed(fm, _calm_then_stable(fm, min(best, target), relax=True))
            m.rollback(start)
        else:
            guide = reached[0]
        with _box(m, workers, guide, current=fm.current):
            if reached is None:
                first = _most_gbps(fm, relax=False, gap=STAGE1_GAP)
            else:
                first = reached[1]
                _pin_unplaced(fm, first)
            if first.objective < (target if accept is None else min(target, accept)):
                return first.objective, None, (guide, first)
            return first.objective, _calm_then_stable(fm, first.objective, relax=False, tolerance=UTIL_TOLERANCE,
                                                      start=first), (guide, first)
    except Infeasible:
        return None, None, None
    finally:
        m.rollback(start)


def _with_current(x, current: dict[int, int]):
    x = x.copy()
    for v, value in current.items():
        x[v] = value
    return x


def _rounded_caches(fm: Formulation, guide: Solution, rounding) -> Solution:
    """Cache counts rounded (up, or to the nearest), within each class's nodes and each pool's maxHostsPerSwitch.

    Every count first gets its floor (or today's count, if that is a rounding of the guide); then
    the counts that round up get one more, the largest fractions first: pools competing for a
    class's last node get it in the order the LP wanted it, not in pool order."""
    x = guide.x.copy()
    on_class: dict[tuple[int, int], int] = {}
    on_switch: dict[tuple[int, int], int] = {}
    problem = fm.problem

    def room(p: int, s: int, k: int, v: int) -> int:
        return int(min(problem.switches[s].classes[k].count - on_class.get((s, k), 0),
                       problem.pools[p].max_hosts_per_switch - on_switch.get((p, s), 0), fm.model.ub[v] - x[v]))

    def add(p: int, s: int, k: int, v: int, n: int) -> None:
        x[v] += n
        on_class[s, k] = on_class.get((s, k), 0) + n
        on_switch[p, s] = on_switch.get((p, s), 0) + n

    ups = []
    for (p, s, k), v in sorted(fm.caches.items()):
        g = guide.x[v]
        lo, hi = math.floor(g + 1e-6), math.ceil(g - 1e-6)
        x[v] = 0
        if lo <= fm.current.get(v, -1) <= hi:
            add(p, s, k, v, max(0, min(fm.current[v], room(p, s, k, v))))     # keep what runs today
            continue
        add(p, s, k, v, max(0, min(lo, room(p, s, k, v))))
        frac = g - lo
        if hi > lo and (rounding is math.ceil or frac >= 0.5):
            ups.append((-frac, (p, s, k), v))
    for _, (p, s, k), v in sorted(ups):
        if room(p, s, k, v) > 0:
            add(p, s, k, v, 1)
    return dataclasses.replace(guide, x=x)


def _cache_counts(fm: Formulation, start: Solution | None = None) -> Solution:
    """Stage 1 with only cache counts and routing flags integer, workers continuous, from `start`
    (a feasible point) if given, within CACHE_COUNT_NODES branch-and-bound nodes. Its cache counts
    are fixed for the boxed stages, which choose the calmest placement for them (choosing the
    counts by the peak too took as long again, for a few points of one uplink's utilisation)."""
    m = fm.model
    with _continuous(m, _worker_counts(fm)):
        return _most_gbps(fm, relax=False, gap=STAGE1_GAP, start=start, nodes=CACHE_COUNT_NODES)


def _worker_counts(fm: Formulation) -> list[int]:
    """The integers that count workers (neither routing flags nor cache counts)."""
    other = fm.flags | set(fm.caches.values())
    return [v for v in fm.integers() if v not in other]


def _uncrossed(fm: Formulation, guide: Solution) -> Solution:
    """The same LP point, with no switch both serving and reading a pool's ring.

    The LP may have a switch export ring bytes while its own ring readers
    import as many: that is delta less export and import and delta more local
    reads (workers turned from ring to local readers), no worse on any
    capacity. Rounding around the crossed point would clash with the auto
    model's rule that ring serving and ring reading never share a switch.
    """
    if fm.mode != "auto":
        return guide
    x = guide.x.copy()
    fleets = fm.problem.fleets
    for (p, s), serve in fm.ring_serve.items():
        read, local = fm.reads_ring.get((p, s)), fm.reads_local.get((p, s))
        if read is None or local is None:
            continue
        delta = min(x[serve], x[read])
        if delta <= 1e-9:
            continue
        x[serve] -= delta
        x[read] -= delta
        x[local] += delta
        for j in sorted(j for j, f in enumerate(fleets) if f.pool == p and (j, s) in fm.ring and (j, s) in fm.local):
            read = fm.problem.switch_read(j, s)
            shift = min(x[fm.ring[j, s]], delta / read)
            x[fm.ring[j, s]] -= shift
            x[fm.local[j, s]] += shift
            delta -= shift * read
            if delta <= 1e-9:
                break
    return dataclasses.replace(guide, x=x)


@contextmanager
def _box(m: LinearModel, variables: list[int], guide: Solution, keep: Solution | None = None,
         current: dict[int, int] | None = None):
    """Bound each variable to the floor and ceiling of its guide value, widened to take in
    `keep`'s value and the current placement's (so staying put is always in the box)."""
    original = (list(m.lb), list(m.ub))
    for v in variables:
        lo, hi = math.floor(guide.x[v] + 1e-6), math.ceil(guide.x[v] - 1e-6)
        for value in ([round(keep.x[v])] if keep is not None else []) + ([current[v]] if current and v in current else []):
            lo, hi = min(lo, value), max(hi, value)
        m.lb[v], m.ub[v] = max(original[0][v], lo), min(original[1][v], hi)
    try:
        yield
    finally:
        m.lb, m.ub = original


@contextmanager
def _continuous(m: LinearModel, variables: list[int]):
    saved = [m.integer[v] for v in variables]
    for v in variables:
        m.integer[v] = False
    try:
        yield
    finally:
        for v, integer in zip(variables, saved):
            m.integer[v] = integer


@contextmanager
def _fixed(m: LinearModel, variables: list[int], at: Solution):
    saved = [(m.lb[v], m.ub[v]) for v in variables]
    for v in variables:
        m.lb[v] = m.ub[v] = round(at.x[v])
    try:
        yield
    finally:
        for v, (lo, hi) in zip(variables, saved):
            m.lb[v], m.ub[v] = lo, hi


def pin_gbps(fm: Formulation, gbps: float, slack: float = GBPS_SLACK) -> None:
    """A row that keeps the Gbps at least `gbps` (less `slack`, relative) for the stages that follow."""
    fm.model.row(fm.delivered(), lb=gbps - slack * max(1.0, gbps))


def _most_gbps(fm: Formulation, relax: bool, gap: float = 1e-4, start: Solution | None = None,
               nodes: int | None = None) -> Solution:
    """Stage 1. When not every worker fits: the most Gbps, then among those the fewest unplaced workers.

    (A worker left Pending costs no Gbps; a cache host dropped to make room for
    one would.) The solution returned satisfies both pins; its objective is the Gbps.
    """
    m: LinearModel = fm.model
    gbps = fm.delivered()
    if not any(m.ub[v] for v in fm.unplaced.values()):
        try:
            return m.solve(gbps, maximise=True, relax=relax, gap=gap, start=start, nodes=nodes)
        except Infeasible:
            if not fm.unplaced:
                raise
        for j, v in fm.unplaced.items():
            m.ub[v] = fm.problem.fleets[j].replicas
    most = m.solve(gbps, maximise=True, relax=relax, gap=gap, nodes=nodes)
    unplaced = {v: 1.0 for v in fm.unplaced.values()}
    if most.value(unplaced) < 1e-6:
        m.row(unplaced, ub=1e-6)    # every worker placed already: nothing for a second solve to lower
        return most
    mark = m.mark()
    pin_gbps(fm, most.objective)
    fewest = m.solve(unplaced, relax=relax, start=most, nodes=nodes)
    m.rollback(mark)       # the caller pins the Gbps, and may loosen it for stage 3
    m.row(unplaced, ub=fewest.objective + 1e-6)
    return dataclasses.replace(fewest, objective=most.objective)


def _pin_unplaced(fm: Formulation, first: Solution) -> None:
    """The unplaced-workers row _most_gbps leaves behind with `first` as its solution."""
    if not any(fm.model.ub[v] for v in fm.unplaced.values()):
        return      # _most_gbps added none: no worker may be left unplaced
    unplaced = {v: 1.0 for v in fm.unplaced.values()}
    value = first.value(unplaced)
    fm.model.row(unplaced, ub=1e-6 if value < 1e-6 else value + 1e-6)


def _calm_then_stable(fm: Formulation, gbps: float, relax: bool, tolerance: float = UTIL_SLACK,
                      start: Solution | None = None, iterations: int | None = None) -> Solution:
    """Stage 2 (lowest peak utilisation at `gbps`), then stage 3 (fewest moves, then most caches).

    With a current placement, stage 3 counts Gbps within STAGE1_GAP as equal:
    a re-plan does not move pods for a 0.1% gain (which the large-model
    stages could not promise to find the same way twice anyway). Without a
    current placement stage 3 only maximises cache hosts: as a guide (relaxed),
    or with the counts fixed, stage 2 is enough.
    """
    m: LinearModel = fm.model
    mark = m.mark()
    pin_gbps(fm, gbps)
    # Peaks within the tolerance count as equal, so the search may stop that close to the best.
    second = m.solve({fm.util: 1.0}, relax=relax, abs_gap=tolerance / 2, start=start, iterations=iterations)
    if not fm.moves and (relax or all(m.lb[v] == m.ub[v] for v in fm.caches.values())):
        return second       # nothing left for stage 3 to choose
    if fm.moves:
        m.rollback(mark)
        pin_gbps(fm, gbps, STAGE1_GAP)
    m.row({fm.util: 1.0}, ub=second.objective + tolerance)
    # Moves dominate: one pod moved outweighs every cache host there could be.
    weight = 1.0 + sum(m.ub[v] for v in fm.caches.values())
    third = {v: weight * c for v, c in fm.moves.items()}
    for v in fm.caches.values():
        third[v] = third.get(v, 0.0) - 1.0
    return m.solve(third, relax=relax, start=second)
