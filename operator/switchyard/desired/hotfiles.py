"""Hot files of one XCachePool's ring: which files get more than one home, and how many (pure).

Readers apply the published list with planner/hashing.py's steps 5-7: a file
listed with k replicas is read from its first k caches of the rendezvous
order, each taking about 1/k of its readers. This module decides the list
from what the cache hosts' exporters measure
(`switchyard_xcache_hot_file_read_bytes_per_second{path}`, read by
`file_rates`) and what the plan gives each host. A cache's path is read as
readers hash it (`hashed_path`: one leading slash, a forwarding proxy's
embedded origin URL dropped), and only paths status.hotFiles can hold are
listed.

The rule. For each file f: L(f) = its read Gbps summed over every host of the
pool (wherever readers took it from), home(f) = its first cache of the ring,
cap(h) = what host h can serve (serveGbps, capped by its NIC), served(h) =
what h serves now (its served-bytes counter between the pool's last two
reads of its exporters; until there are two, the sum of its listed files'
rates, which reads low on a host serving many files: its exporter lists its
top 20), share(h) = h's weight over the ring's total weight.

1. Enter: an unlisted file enters when L(f) >= enter_share x cap(home), or,
   while its home is overloaded, when L(f) >= overloaded_share x cap(home).
   A home is overloaded when it serves more than over_share (1.1) x its
   share of what the ring serves now (served(home) > over_share x share(home)
   x the sum of served) and at least busy_share (0.5) of its cap: readers
   skewed onto it, and it is busy enough for that to matter (the test the
   ring-weight rule makes, desired/ringload.py rule 1, on a lower busy share:
   a replica costs one file's fetch, a lowered weight many). Not "above
   planned": planned is the ring at full capacity (the pool's status carries
   no other), which a hot spot's home reaches only once it is the
   bottleneck, and then every reader waits on it (bench-hotspots: Zipf 1.1's
   busiest cache served 9.2 of its 10 Gbps, 1.8x its share, never "above plan").
2. Stay: a listed file stays while L(f) >= leave_share x cap(home);
   leave_share is well below both entry thresholds (a factor of 2 below the
   lower by default).
3. Bound: at most max_files files, the hottest by L, a listed file counted
   at `incumbent_weight` x L (2 by default), so a newcomer displaces a listed
   file only when that much hotter; ties by path.
4. Replicas, hottest file first (ties by path), each file's homes being its
   first k caches of the ring: k is the least k >= 2 (at most max_replicas
   and the ring's size) such that every one of those homes keeps
   (a) L/k <= spread_share x cap(h), and (b) the hot-file load already placed
       on h, plus L/k, <= cap(h): no cache above its cap by hot-file load alone.
   A listed file keeps its previous k while that k still meets (b) and lies
   between that least k and k_roomy, the least k meeting (a) with
   shrink_share (< spread_share) in place of spread_share: k grows as soon
   as it must, and shrinks, to k_roomy, only when fewer replicas than before
   would leave each home at most shrink_share of its cap.
   When no k meets (b) the file gets the k whose busiest home is least
   loaded (the list cannot do better; the plan's caps are short).
5. The list is returned sorted by path, so an unchanged list publishes
   unchanged text.

Why it does not oscillate: L(f) sums the file's reads over every host, so
the list and the replica counts, which only move readers between the file's
homes, do not change the L(f) the next call measures; a file enters and
leaves on its own load crossing thresholds a factor of 2 or more apart
(entry at >= 0.10-0.25 of its home's cap, leave below 0.05), and its k moves
on bands (spread_share against shrink_share) the same way. The home's
overload (rule 1, the only input the list itself changes) is used for entry
only: once listed, a file leaves only when its own load has fallen below
leave_share, whatever the split did to its home. The exporters' rates decay
(tau 60 s, observe/fileload.py), so a file's L falls when its reads stop and
the file leaves within minutes; noise that stays within the bands changes
nothing. One coupling is left, and bounded: each exporter publishes its top
20 files, so a replicated file's 1/k share on a busy host may be unseen and
L under-read by that share; the factor of 2 between entry and leave covers a
k-way split's under-reading up to half the load.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from ..api.xcachepool import MAX_HOT_FILES, MAX_HOT_REPLICAS, HotFile
from ..observe.drift import metric_samples
from ..observe.exporterspec import PREFIX
from ..planner import hashing
from .ringload import over_its_share

HOT_FILE_SAMPLE = PREFIX + "hot_file_read_bytes_per_second"
BITS_PER_BYTE_GIGA = 8 / 1e9  # bytes/s -> Gbps
_EMBEDDED_ORIGIN = re.compile(r"^/*(?:root|xroot)s?://[^/]*", re.IGNORECASE)


@dataclass(frozen=True)
class HostBudget:
    """One cache host of the ring: what it can serve and what it serves now (Gbps)."""

    cap_gbps: float
    served_gbps: float | None = None  # None: the sum of its files' rates stands in


@dataclass(frozen=True)
class HotFileRules:
    enter_share: float = 0.25       # of the home's cap: a file this hot enters
    overloaded_share: float = 0.10  # of the home's cap: enough to enter while the home is overloaded
    over_share: float = 1.1         # a home serving above this x its share of the ring's serve now is overloaded ...
    busy_share: float = 0.5         # ... when it serves at least this of its cap
    leave_share: float = 0.05       # of the home's cap: a listed file this cold leaves
    spread_share: float = 0.15      # of each home's cap: the most a replica of one file may take
    shrink_share: float = 0.10      # of each home's cap: k shrinks only when one fewer keeps each home this low
    max_files: int = 64
    max_replicas: int = 8
    incumbent_weight: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.leave_share < min(self.enter_share, self.overloaded_share):
            raise ValueError("leave_share must be positive and below both entry shares")
        if not (self.over_share >= 1 and 0 <= self.busy_share <= 1):
            raise ValueError("over_share must be at least 1 and busy_share within 0..1")
        if not 0 < self.shrink_share < self.spread_share <= 1:
            raise ValueError("shrink_share must be positive and below spread_share, at most 1")
        if not (0 <= self.max_files <= MAX_HOT_FILES and 2 <= self.max_replicas <= MAX_HOT_REPLICAS
                and self.incumbent_weight >= 1):
            raise ValueError(f"max_files in 0..{MAX_HOT_FILES}, max_replicas in 2..{MAX_HOT_REPLICAS} (what "
                             "status.hotFiles holds) and incumbent_weight >= 1")


def file_rates(texts: Iterable[str], pool: str) -> dict[str, dict[str, float]]:
    """host -> path -> read Gbps of `pool`'s files, from exporters' /metrics texts (one that does not parse
    adds nothing)."""
    out: dict[str, dict[str, float]] = {}
    for text in texts:
        for sample in metric_samples(text):
            if sample.name == HOT_FILE_SAMPLE and sample.labels.get("pool") == pool and "path" in sample.labels:
                out.setdefault(sample.labels.get("host", ""), {})[sample.labels["path"]] = (
                    sample.value * BITS_PER_BYTE_GIGA)
    return out


def hot_files(rates: Mapping[str, Mapping[str, float]], budgets: Mapping[str, HostBudget],
              weights: Mapping[str, float], previous: Iterable[HotFile] = (),
              rules: HotFileRules = HotFileRules()) -> tuple[HotFile, ...]:
    """The pool's hot files with their replica counts (the module docstring's rule), sorted by path.

    `rates`: host -> path -> read Gbps (`file_rates`); `budgets`: each ring host's budget; `weights`: the
    pool's ring (`Plan.hash_weights[pool]`; hosts without a budget are left out of it); `previous`: the list
    this returned last time (the pool's status.hotFiles). The result is what status.hotFiles holds.
    """
    ring = {host: weight for host, weight in weights.items() if weight > 0 and host in budgets}
    if len(ring) < 2:
        return ()
    load = _file_loads(rates)
    before = {f.path: f.replicas for f in previous}
    served = {host: b.served_gbps if b.served_gbps is not None else sum(rates.get(host, {}).values())
              for host, b in budgets.items()}
    orders = {path: hashing.order(path, ring) for path in load}
    overloaded = _overloaded(ring, budgets, served, rules)
    listed = [path for path in load if _is_hot(load[path], budgets[orders[path][0]],
                                                orders[path][0] in overloaded, path in before, rules)]
    rank = sorted(listed, key=lambda p: (-load[p] * (rules.incumbent_weight if p in before else 1.0), p))
    kept = sorted(rank[:rules.max_files], key=lambda p: (-load[p], p))
    placed: dict[str, float] = dict.fromkeys(ring, 0.0)
    out = []
    for path in kept:
        replicas = _replicas(load[path], orders[path], budgets, placed, before.get(path), rules)
        for host in orders[path][:replicas]:
            placed[host] += load[path] / replicas
        out.append(HotFile(path=path, replicas=replicas))
    return tuple(sorted(out, key=lambda f: f.path))


def _file_loads(rates: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """path -> its Gbps summed over every host, for the paths status.hotFiles can hold."""
    load: dict[str, float] = {}
    for by_path in rates.values():
        for path, gbps in by_path.items():
            if gbps > 0:
                hashed = hashed_path(path)
                load[hashed] = load.get(hashed, 0.0) + gbps
    return {path: gbps for path, gbps in load.items() if _publishable(path)}


def hashed_path(lfn: str) -> str:
    """The path readers hash (routing.file_path) for a path a cache was asked for: one leading slash, and, from
    a forwarding proxy (`/root://origin:1094//store/a.root`), the origin's path alone."""
    return "/" + _EMBEDDED_ORIGIN.sub("", lfn, count=1).lstrip("/")


def _publishable(path: str) -> bool:
    """Whether readers can be told the path (a white space or query in it, say, could not be a line of `hot`)."""
    try:
        HotFile(path=path, replicas=2)
    except ValidationError:
        return False
    return True


def _overloaded(ring: Mapping[str, float], budgets: Mapping[str, HostBudget], served: Mapping[str, float],
                rules: HotFileRules) -> set[str]:
    """Rule 1's overloaded homes: above over_share x their share of what the ring serves now, and busy."""
    total_weight, total_served = sum(ring.values()), sum(served[h] for h in ring)
    return {h for h, weight in ring.items()
            if over_its_share(served[h], weight / total_weight * total_served, budgets[h].cap_gbps,
                              rules.over_share, rules.busy_share)}


def _is_hot(gbps: float, home: HostBudget, overloaded: bool, listed: bool, rules: HotFileRules) -> bool:
    if listed:
        return gbps >= rules.leave_share * home.cap_gbps
    return gbps >= (rules.overloaded_share if overloaded else rules.enter_share) * home.cap_gbps


def _replicas(gbps: float, order: Sequence[str], budgets: Mapping[str, HostBudget], placed: Mapping[str, float],
              previous: int | None, rules: HotFileRules) -> int:
    """Rule 4: the file's k."""
    candidates = range(2, min(rules.max_replicas, len(order)) + 1)

    def fits(k: int, share: float) -> bool:
        return all(gbps / k <= share * budgets[h].cap_gbps and placed[h] + gbps / k <= budgets[h].cap_gbps
                   for h in order[:k])

    least = next((k for k in candidates if fits(k, rules.spread_share)), None)
    if least is None:   # the caps are short: the k whose busiest home is least loaded
        return min(candidates, key=lambda k: (max((placed[h] + gbps / k) / budgets[h].cap_gbps
                                                  for h in order[:k]), k))
    roomy = next((k for k in candidates if fits(k, rules.shrink_share)), candidates[-1])
    if previous is None:
        return least
    if previous > roomy:
        return roomy
    return previous if previous >= least and fits(previous, 1.0) else least
