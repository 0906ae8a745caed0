"""Sequential readers as a closed queueing network: the hypothesis for the loss near a cache host's cap.

The fair share (planner/fairshare.py) is a fluid model: every reader takes
its file shares from every host at once. A reader reads ONE file at a time,
from the one host that file hashes to, then the next. How many readers a
host holds at a moment is random, not its mean; a host serves min(C, n * d)
for n readers of cap d (processor sharing), concave in n, so fluctuations
cost throughput when the mean is near C, and readers pile up on a host
while it is slow.

Readers cycling over hosts with probabilities = their file shares, hosts as
processor-sharing stations of rate min(C_h, n * d): a closed product-form
(BCMP) network, no fitted parameter. One class of readers (or classes
alike in cap and shares) is solved exactly (the convolution algorithm) while
it is small; otherwise, and for several classes (reader groups with their own
cap d and shares), each host is an open station fed by the classes' rates,
with the classes' caps pooled into one load-weighted cap, and the class
rates are the fixed point that keeps every class's reader count (the
many-reader limit of the closed network: error of order 1/readers, checked
against the exact solution in operator/tests/unit/test_occupancy.py).

Checked on the fabric runs on record (bench/notes/scripts/fairshare_report.py,
column "closed"): it explains a few per cent of the Nebraska-like loss, not its
13-19%, and it moves netbound (a) and Chicago-like (c) away from the
measurement, so it is a bench tool, not the product's prediction
(bench/notes/fabric-notes.md; bench/notes/scripts/fabric_replay.py finds where the loss
comes from).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from switchyard.planner.fairshare import progressive_filling, readers, streams_of

_EXACT_WORK = 200_000        # readers^2 x hosts up to which one class is solved exactly
_ROUNDS = 400
_TOLERANCE = 1e-9
_NEAR_FULL = 1 - 1e-9


@dataclass(frozen=True)
class Readers:
    """Identical sequential readers: how many, what one reads while its host has room, its file shares."""

    count: float
    cap_gbps: float
    shares: Mapping[str, float]      # host -> share of its bytes (sums to 1)


def mean_readers(arrival_gbps: float, cap_gbps: float, capacity_gbps: float) -> float:
    """Mean readers on an open processor-sharing host fed `arrival_gbps`, serving min(capacity, n x cap)."""
    if arrival_gbps <= 0:
        return 0.0
    if arrival_gbps >= capacity_gbps * _NEAR_FULL:
        return math.inf
    a = arrival_gbps / cap_gbps                      # readers it would hold with no cap
    m = math.floor(capacity_gbps / cap_gbps + 1e-12)  # readers it serves at their full cap
    rho = arrival_gbps / capacity_gbps
    if m == 0:                                       # one reader fills it: M/M/1
        return rho / (1 - rho)
    spread = 12 * math.sqrt(a) + 30                  # Poisson terms beyond are below e^-70
    if m >= a + spread:
        return a
    low = max(0, int(min(m, a) - spread))
    logs = [j * math.log(a) - math.lgamma(j + 1) for j in range(low, m + 1)]
    top = max(logs)
    terms = [math.exp(x - top) for x in logs]
    total = sum(terms)
    first = sum((low + i) * t for i, t in enumerate(terms))
    tail = terms[-1]                                 # beyond m the host serves capacity: geometric in rho
    total += tail * rho / (1 - rho)
    first += tail * (m * rho / (1 - rho) + rho / (1 - rho) ** 2)
    return first / total


def delivered(capacity: Mapping[str, float], classes: Sequence[Readers]) -> tuple[float, ...]:
    """Gbps each class delivers (its readers together). Hosts missing from `capacity` do not limit. When every
    class is alike in cap and shares (two racks of the same readers), they are one class: solved exactly while
    small, and split back by their counts."""
    live = [c for c in classes if c.count > 0 and c.cap_gbps > 0]
    alike = {_likeness(c) for c in live}
    count = sum(c.count for c in live)
    if len(alike) == 1 and count == int(count) and count ** 2 * len(live[0].shares) <= _EXACT_WORK:
        one = exact(capacity, Readers(count, live[0].cap_gbps, live[0].shares))
        return tuple(one * c.count / count if c in live else 0.0 for c in classes)
    return _many(capacity, classes)


def _likeness(c: Readers) -> tuple:
    """Cap and shares to 9 places, none of zero: classes built from sums of the same figures compare alike."""
    return round(c.cap_gbps, 9), tuple(sorted((h, round(s, 9)) for h, s in c.shares.items() if round(s, 9)))


def exact(capacity: Mapping[str, float], readers: Readers) -> float:
    """One class, exactly: the convolution algorithm, throughput = G(N-1) / G(N) (scaled to stay finite)."""
    n = int(readers.count)
    scale = n * readers.cap_gbps                     # makes the terms of order one near the throughput
    g = [1.0] + [0.0] * n
    for host, share in readers.shares.items():
        if share <= 0:
            continue
        cap = capacity.get(host, math.inf)
        f = [1.0]
        for j in range(1, n + 1):
            f.append(f[-1] * scale * share / min(cap, j * readers.cap_gbps))
        g = [sum(g[i] * f[k - i] for i in range(k + 1)) for k in range(n + 1)]
        top = max(g)
        g = [x / top for x in g]
    return scale * g[n - 1] / g[n]


def _many(capacity: Mapping[str, float], classes: Sequence[Readers]) -> tuple[float, ...]:
    """The many-reader limit: class rates at the fixed point rate_c = count_c x cap_c / sum_h share_ch x slowdown_h."""
    rate = [c.count * c.cap_gbps if c.count > 0 else 0.0 for c in classes]
    hosts = sorted({h for c in classes for h in c.shares if h in capacity})
    step = 0.5
    worst = math.inf
    for _ in range(_ROUNDS):
        _keep_below(capacity, classes, rate)
        slow = _slowdowns(capacity, classes, rate, hosts)
        target = [c.count * c.cap_gbps / sum(s * slow.get(h, 1.0) for h, s in c.shares.items()) if r > 0 else 0.0
                  for c, r in zip(classes, rate)]
        change = max((abs(t - r) / r for t, r in zip(target, rate) if r > 0), default=0.0)
        if change < _TOLERANCE:
            break
        if change > worst:                            # oscillating about the fixed point: smaller steps
            step = max(step * 0.7, 0.02)
        worst = change
        rate = [r + step * (t - r) for r, t in zip(rate, target)]
    return tuple(rate)


def _keep_below(capacity: Mapping[str, float], classes: Sequence[Readers], rate: list[float]) -> None:
    """Scale down the classes of any host fed at or above its capacity (the closed network never is)."""
    arrival = _arrivals(classes, rate)
    factor = {h: capacity[h] * (1 - 1e-6) / a for h, a in arrival.items() if h in capacity and a >= capacity[h] * _NEAR_FULL}
    for i, c in enumerate(classes):
        f = min((factor[h] for h in c.shares if h in factor), default=1.0)
        rate[i] *= f


def _arrivals(classes: Sequence[Readers], rate: Sequence[float]) -> dict[str, float]:
    arrival: dict[str, float] = {}
    for c, r in zip(classes, rate):
        for h, s in c.shares.items():
            arrival[h] = arrival.get(h, 0.0) + r * s
    return arrival


def _slowdowns(capacity: Mapping[str, float], classes: Sequence[Readers], rate: Sequence[float],
               hosts: Sequence[str]) -> dict[str, float]:
    """Per host: time a reader spends there ÷ what it would with no cap (mean readers ÷ uncapped mean)."""
    arrival = _arrivals(classes, rate)
    uncapped: dict[str, float] = {}                  # readers the host would hold with no cap: sum of rate / cap
    for c, r in zip(classes, rate):
        for h, s in c.shares.items():
            uncapped[h] = uncapped.get(h, 0.0) + r * s / c.cap_gbps
    slow = {}
    for h in hosts:
        if uncapped.get(h, 0.0) <= 0:
            continue
        pooled_cap = arrival[h] / uncapped[h]        # the classes' caps, weighted by the readers they put there
        slow[h] = mean_readers(arrival[h], pooled_cap, capacity[h]) / uncapped[h]
    return slow


def of_placement(topology, pools, fleets, placement, weights=None, files=()) -> float:
    """Delivered Gbps of a placement as a closed network: the fair share's reader groups as classes, each
    reader's cap d = its max-min rate with every link but the hosts' serving caps (node links, uplinks, the
    WAN), the hosts' serving caps as the stations."""
    the = readers(topology, pools, fleets, placement, weights, files)
    not_hosts = {link: c for link, c in the.capacity.items() if not link.startswith("serve:")}
    caps = progressive_filling(not_hosts, streams_of(the.groups)).rates
    hosts: dict[str, float] = {}
    classes = []
    for g, cap in zip(the.groups, caps):
        shares = {}
        for host, share in g.shares.items():
            station = next(link for link in g.uses[host] if link.startswith("serve:"))
            hosts[station] = the.capacity[station]
            shares[station] = share
        classes.append(Readers(g.count, cap, shares))
    return sum(delivered(hosts, classes))
