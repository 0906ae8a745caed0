"""Load-fed weights of one XCachePool's hash ring: which hosts' rendezvous weights are lowered, how far (pure).

The plan weighs each cache host by what it can serve, which assumes the load
spreads as the weights do. Skewed reads (hot files, planner/hashing.py steps
5-7, take the hottest) can still leave one host above its share while others
idle. This module lowers such a host's weight by a factor (status.ringWeights;
the fleets publish weight x factor) and restores it when its load has gone.

Measure. served(h): Gbps host h served between two reads, from the deltas of
its exporter's `switchyard_xcache_served_bytes_total` (summed over
client_switch) over the reads' times, which the caller passes in. The
counters, not the per-file rate gauges: they count every byte (an exporter
lists only its 20 hottest files), and do not lag (the gauges decay with a 60 s
time constant), so a step's effect is seen when it lands. Every reader's
bytes count, a local reader's too (desired/xcachepool.py runs the rule only
while someone reads through the ring), though weights cannot move them: the
caps are judged on all of a host's load (a host busy with its switch's local
readers has no room for moved reads, and is relieved by shedding ring reads);
client_switch cannot tell the two apart on a switch with both kinds of
reader; and the proof below holds, as local reads are a demand no weight
moves. A counter that went back or whose exporter restarted gives no figure
for that read. Over the ring R
(the planned hosts without status.ringOut): total = sum of served(h);
planned(h) = the host's plan weight / the ring's plan weight x total (its
share of what the pool serves now, by the plan's weights, never the lowered
ones); cap(h) = what it can serve (serveGbps less headroom, NIC-capped).

The rule, at each read where every host of R was measured (otherwise nothing
moves and every streak restarts):
1. Over: served(h) > over_share x planned(h), served(h) >= busy_share x cap(h)
   (a lowered weight moves files' homes, which costs cache misses: worth it
   only on a busy host), and some other host g of R has room,
   served(g) < room_share x cap(g).
2. Lower: a host over at `reads` consecutive settled reads gets one step:
   factor -= step, not below floor. The step records served(h) and the total
   at that read; over the next settle_seconds its shed, the most served(h)
   fell below the recorded figure at any read, is measured.
3. Restore: a lowered host whose predicted load, served(h) + what its last
   step's shed would bring back now, is at most restore_share x planned(h), or
   below quiet_share x cap(h), at `reads` consecutive settled reads, gets its
   last step back (factor += step). The shed brought back: while the total is
   at most the step's total T0, the shed less what the total fell by (the
   reads that stopped are taken from the moved ones first: a hot file no
   longer read), at least 0; above T0, the shed x total / T0.
4. Settled: a read at least settle_seconds after the host's factor last
   changed; before that its streaks stay 0 (the ConfigMap reaches the readers
   within about a minute; the step's effect is not measured yet).
A host that leaves R forgets its steps (it returns at factor 1, its cache
cold anyway). Factors are step multiples above floor, rounded to 1e-6.

Why it cannot oscillate. Under a steady demand (the same reads, noise within
the bands' gaps), no restore ever follows a lowering, so each host's factor
only falls, by bounded steps to a floor: at most (1 - floor) / step changes
per host, then none. Proof: lowering a host's rendezvous weight moves only
files whose home it was (every other host's scores are unchanged), so a
lowering of g never takes load from h, and the total is unchanged (weights
move reads, the demand stays): planned(h) and the shed's scale stay put. Take
the first restore, of h, after its last step taken with served s0; since that
step only lowerings happened, so served(h) now >= its least in the settle
window, s0 - shed: predicted >= s0. And s0 was over: s0 > over_share x
planned(h) and s0 >= busy_share x cap(h), while a restore needs predicted <=
restore_share x planned(h) (0.2 x planned below) or < quiet_share x cap(h)
(0.2 x cap below). So the restore
cannot be, under noise smaller than those gaps. When the demand moves the
figures move with it: a load that goes away restores (the total falls, the
shed brought back with it, and a quiet host is restored step by step), a skew
that comes back lowers again; a change then follows a change of the load,
each at most one step per settle_seconds + `reads` reads per host.
Assumptions the proof rests on: a step has landed within settle_seconds
(readers re-read the ring as the kubelet refreshes it; a file open at the
step is read to its end where it was), and the hot list, which moves readers
among a hot file's homes, does not change within a settle window (it moves
on its own bands, desired/hotfiles.py). Left: a fall of demand elsewhere is
taken as the moved reads stopping, so a host whose moved reads are still hot
may be restored, then lowered again: a change after a change of the load.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from ..observe.drift import metric_samples
from ..observe.exporterspec import PREFIX

SERVED_SAMPLE = PREFIX + "served_bytes_total"
STARTED_SAMPLE = PREFIX + "exporter_start_time_seconds"  # its counters restart with it
BITS_PER_BYTE_GIGA = 8 / 1e9  # bytes/s -> Gbps


@dataclass(frozen=True)
class RingLoadRules:
    over_share: float = 1.1     # of planned: above it a host is over
    busy_share: float = 0.7     # of cap: only a host serving at least this is lowered
    room_share: float = 0.8     # of cap: another host below it has room
    restore_share: float = 0.9  # of planned: predicted at most this, a lowered host gets a step back
    quiet_share: float = 0.5    # of cap: predicted below this, likewise
    reads: int = 3              # consecutive settled reads before a step either way
    step: float = 0.1
    floor: float = 0.5
    settle_seconds: float = 180.0

    def __post_init__(self) -> None:
        if not (0 < self.restore_share < 1 < self.over_share and 0 < self.quiet_share < self.busy_share <= 1
                and 0 < self.room_share <= 1 and self.reads >= 1 and 0 < self.step <= 1 - self.floor
                and 0 < self.floor < 1 and self.settle_seconds >= 0):
            raise ValueError("bands must leave gaps (restore_share < 1 < over_share, quiet_share < busy_share), "
                             "reads >= 1, 0 < floor < 1 and 0 < step <= 1 - floor")

    @property
    def max_steps(self) -> int:
        return math.ceil((1 - self.floor) / self.step - 1e-9)


@dataclass(frozen=True)
class Counter:
    """A host's served bytes (summed over reader switches) and when its exporter started (None: not reported)."""

    served_bytes: float
    started: float | None = None


@dataclass(frozen=True)
class Step:
    """One lowering step of a host: its served Gbps and the ring's total when taken, and the shed it measured."""

    served_gbps: float
    total_gbps: float
    shed_gbps: float = 0.0


@dataclass(frozen=True)
class HostLoad:
    steps: tuple[Step, ...] = ()
    over: int = 0                       # consecutive settled reads over
    under: int = 0                      # consecutive settled reads in the restore band
    changed_at: float = -math.inf      # read time of its last step either way
    lowered_last: bool = False          # whether that step was a lowering (its shed is being measured)


@dataclass(frozen=True)
class RingLoad:
    """What the rule keeps between reads: the last counters and when read, each lowered or counting host, and
    what each host served between the last two reads (Gbps; desired/hotfiles.py's budgets read it too)."""

    at: float | None = None
    counters: Mapping[str, Counter] = field(default_factory=dict)
    hosts: Mapping[str, HostLoad] = field(default_factory=dict)
    served: Mapping[str, float] = field(default_factory=dict)


def over_its_share(served: float, share: float, cap: float, over_share: float, busy_share: float) -> bool:
    """Rule 1's test of a host (and desired/hotfiles.py's of a hot file's home): it serves more than over_share x
    its `share` of what the ring serves now, and at least busy_share of its `cap`."""
    return served > over_share * share and served >= busy_share * cap


def served_counters(texts: Iterable[str], pool: str) -> dict[str, Counter]:
    """host -> its served bytes counter, from exporters' /metrics texts (one that does not parse adds nothing)."""
    served: dict[str, float] = {}
    started: dict[str, float] = {}
    for text in texts:
        for sample in metric_samples(text):
            if sample.labels.get("pool") != pool:
                continue
            host = sample.labels.get("host", "")
            if sample.name == SERVED_SAMPLE:
                served[host] = served.get(host, 0.0) + sample.value
            elif sample.name == STARTED_SAMPLE:
                started[host] = sample.value
    return {host: Counter(bytes_, started.get(host)) for host, bytes_ in sorted(served.items())}


def served_gbps(before: Mapping[str, Counter], after: Mapping[str, Counter], seconds: float) -> dict[str, float]:
    """host -> Gbps served between two reads `seconds` apart; a host whose counter went back or whose exporter
    restarted in between has no figure."""
    if seconds <= 0:
        return {}
    return {host: (now.served_bytes - was.served_bytes) / seconds * BITS_PER_BYTE_GIGA
            for host, now in after.items() if (was := before.get(host)) is not None
            and now.started == was.started and now.served_bytes >= was.served_bytes}


def factor(host: HostLoad, rules: RingLoadRules = RingLoadRules()) -> float:
    return round(max(rules.floor, 1 - rules.step * len(host.steps)), 6)


def factors(load: RingLoad, rules: RingLoadRules = RingLoadRules()) -> dict[str, float]:
    """host -> weight factor, the lowered hosts only (what status.ringWeights holds), by host."""
    return {h: f for h, state in sorted(load.hosts.items()) if (f := factor(state, rules)) != 1.0}


def seeded(lowered: Mapping[str, float], rules: RingLoadRules = RingLoadRules()) -> RingLoad:
    """The state a process starts from: the factors status.ringWeights carries, as steps whose shed is lost
    (each host's first restore is judged on its served Gbps alone)."""
    hosts = {}
    for host, f in lowered.items():
        count = min(rules.max_steps, max(0, round((1 - f) / rules.step)))
        if count:
            hosts[host] = HostLoad(steps=(Step(0.0, 0.0),) * count)
    return RingLoad(hosts=hosts)


def next_load(before: RingLoad, counters: Mapping[str, Counter], at: float, weights: Mapping[str, float],
              caps: Mapping[str, float], rules: RingLoadRules = RingLoadRules()) -> RingLoad:
    """The state after a read at `at` (seconds, any monotonic clock) of `counters`; `weights`: the plan's ring
    without the hosts out of it (host -> weight); `caps`: each ring host's cap, Gbps (the module's rule)."""
    ring = {h: w for h, w in weights.items() if w > 0 and h in caps}
    hosts = {h: state for h, state in before.hosts.items() if h in ring}
    served = served_gbps(before.counters, counters, at - before.at) if before.at is not None else {}
    if not ring or any(h not in served for h in ring):  # nothing to judge: streaks restart
        return RingLoad(at, dict(counters), {h: replace(s, over=0, under=0) for h, s in hosts.items()}, served)
    total, weight = sum(served[h] for h in ring), sum(ring.values())
    out = {}
    for host in sorted(ring):
        state = hosts.get(host, HostLoad())
        planned = ring[host] / weight * total
        if state.lowered_last and at - state.changed_at <= rules.settle_seconds:
            last = state.steps[-1]
            state = replace(state, steps=state.steps[:-1] + (
                replace(last, shed_gbps=max(last.shed_gbps, last.served_gbps - served[host])),))
        if at - state.changed_at < rules.settle_seconds:
            out[host] = replace(state, over=0, under=0)
            continue
        over = (over_its_share(served[host], planned, caps[host], rules.over_share, rules.busy_share)
                and any(served[g] < rules.room_share * caps[g] for g in ring if g != host)
                and len(state.steps) < rules.max_steps)
        under = bool(state.steps) and _restorable(state.steps[-1], served[host], total, planned, caps[host], rules)
        state = replace(state, over=state.over + 1 if over else 0, under=state.under + 1 if under else 0)
        if state.over >= rules.reads:
            state = HostLoad(state.steps + (Step(served[host], total),), changed_at=at, lowered_last=True)
        elif state.under >= rules.reads:
            state = HostLoad(state.steps[:-1], changed_at=at)
        out[host] = state
    return RingLoad(at, dict(counters), {h: s for h, s in out.items() if s != HostLoad()}, served)


def _restorable(last: Step, served: float, total: float, planned: float, cap: float, rules: RingLoadRules) -> bool:
    if total >= last.total_gbps:
        shed = last.shed_gbps * total / last.total_gbps if last.total_gbps > 0 else 0.0
    else:
        shed = max(0.0, last.shed_gbps - (last.total_gbps - total))
    predicted = served + shed
    return predicted <= rules.restore_share * planned or predicted < rules.quiet_share * cap
