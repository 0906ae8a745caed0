"""The hot-spot bench's workload and figures (pure): Zipf popularity, each reader's fixed list of reads routed
by the product's client rule, the hot list the product decides, and the run's summary figures.

bench/hotspots_bench.py runs what this decides on the emulated fabric; tests/unit/test_hotspots_workload.py
checks it without one.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from switchyard.api.xcachepool import XCachePoolBody
from switchyard.builders.workerfleet import hot_list_text
from switchyard.desired.hotfiles import HotFileRules, file_rates, hot_files
from switchyard.desired.ringload import Counter, RingLoad, RingLoadRules, factors, next_load
from switchyard.desired.xcachepool import host_budgets
from switchyard.observe.fileload import TAU_SECONDS
from switchyard.routing import Cache, Router, parse_hot

GIGA = 1e9


def popularity(files: Sequence[str], exponent: float | None, seed: int) -> dict[str, float]:
    """Each file's share of the reads: Zipf with `exponent` (the rank-r file weighs r^-exponent), or uniform
    for None. Which file has which rank is a permutation seeded by `seed`, so repeats put the hottest files
    on other caches of the ring."""
    ranked = list(files)
    random.Random(f"ranks/{seed}").shuffle(ranked)
    weights = [1.0 if exponent is None else (rank + 1) ** -exponent for rank in range(len(ranked))]
    total = sum(weights)
    return {f: w / total for f, w in zip(ranked, weights)}


def draw_reads(shares: Mapping[str, float], reads: int, seed: str) -> list[str]:
    """One reader's fixed workload: `reads` files drawn by their shares (with repeats), seeded."""
    paths = sorted(shares)
    return random.Random(seed).choices(paths, weights=[shares[p] for p in paths], k=reads)


class _Listed:
    """A hot list already read: what routing.HotFile gives a Router, without a mounted file."""

    def __init__(self, text: str | None) -> None:
        self._hot = parse_hot(text) if text else {}

    def current(self) -> dict[str, int]:
        return self._hot


def route(paths: Sequence[str], ring: Mapping[str, float], addresses: Mapping[str, str], reader: str,
          hot_text: str | None, origin: str) -> list[tuple[str, str]]:
    """(cache, path) for each read, as a worker named `reader` picks it: switchyard.routing's Router over the
    ring (cache -> weight; addresses: cache -> host:port) with the fleet ConfigMap's `hot` text (None: no
    hot file), each path asked for as root://origin//path."""
    router = Router("hashed", ring=tuple(Cache(c, addresses[c], w) for c, w in ring.items()),
                    hot_file=_Listed(hot_text), reader=reader)
    cache_of = {addresses[c]: c for c in ring}
    out = []
    for path in paths:
        url = router.route(f"root://{origin}/{path}")
        out.append((cache_of[url.split("://", 1)[1].split("/", 1)[0]], path))
    return out


def warm_pairs(reads: Sequence[Sequence[tuple[str, str]]]) -> dict[str, set[str]]:
    """cache -> the files some reader reads from it: what must be in it (filled once from the origin)."""
    out: dict[str, set[str]] = {}
    for stream in reads:
        for cache, path in stream:
            out.setdefault(cache, set()).add(path)
    return out


def steady_rates(rates: Mapping[str, Mapping[str, float]], seconds: float,
                 tau: float = TAU_SECONDS) -> dict[str, dict[str, float]]:
    """The exporters' decaying rates (observe/fileload.py) of a load that started `seconds` ago, as they read
    once it has lasted: a steady load reads (1 - e^(-seconds/tau)) of itself after `seconds`."""
    seen = 1.0 - math.exp(-seconds / tau)
    return {h: {p: r / seen for p, r in by.items()} for h, by in rates.items()}


def decide_hot(texts: Sequence[str], pool: str, body: XCachePoolBody, ring: Mapping[str, float], hosts,
               scale: float, seconds: float, rules: HotFileRules = HotFileRules(),
               served: Mapping[str, float] | None = None) -> tuple[list[dict], str | None]:
    """The pool's hot list from its exporters' /metrics `texts` by the operator's rule (desired/hotfiles.py
    with desired/xcachepool.py's host budgets), and the routing ConfigMap's `hot` text for it.

    The fabric carries `scale` Mbit/s per model Gbps, so a measured Gbps is 1000 / scale model Gbps;
    `seconds`: how long the load had run when the texts were read (steady_rates); `served`: cache -> model
    Gbps by its exporter's served-bytes counter between two reads (what the operator's ring-weight rule
    keeps for the budgets), None: the files' rates stand in."""
    measured = {h: {p: g * 1000 / scale for p, g in by.items()} for h, by in file_rates(texts, pool).items()}
    return hot_from_rates(steady_rates(measured, seconds), pool, body, ring, hosts, rules, served)


def workload_rates(reads: Sequence[Sequence[tuple[str, str]]], file_bytes: int, seconds: float,
                   scale: float) -> dict[str, dict[str, float]]:
    """cache -> path -> model Gbps that the readers' routed `reads` asked of it over `seconds` (the bench's own
    count, beside the exporters')."""
    out: dict[str, dict[str, float]] = {}
    for stream in reads:
        for cache, path in stream:
            by = out.setdefault(cache, {})
            by[path] = by.get(path, 0.0) + file_bytes * 8 / seconds / 1e6 / scale
    return out


def hot_from_rates(rates: Mapping[str, Mapping[str, float]], pool: str, body: XCachePoolBody,
                   ring: Mapping[str, float], hosts, rules: HotFileRules = HotFileRules(),
                   served: Mapping[str, float] | None = None) -> tuple[list[dict], str | None]:
    """The hot list desired/hotfiles.py decides from per-file rates (cache -> path -> model Gbps), and its text."""
    hot = hot_files(rates, host_budgets(body, ring, hosts, rates, served), ring, (), rules)
    wire = [f.to_wire() for f in hot]
    return wire, hot_list_text(pool, wire)


def bench_load_rules(read_seconds: float) -> RingLoadRules:
    """RingLoadRules with the product's bands, steps and reads, settled as a round of the bench needs.

    Each round's readers read by one ring from its start (the bench re-routes them), so no minute passes for
    the kubelet to bring a step; a round's first read has no delta (the counters restart), its second (~2
    reads in) measures what the step shed, and the rule judges from its third (settled past 2.5 reads)."""
    return RingLoadRules(settle_seconds=2.5 * read_seconds)


@dataclass(frozen=True)
class LoadFedRound:
    weights: dict          # cache -> the ring weight its readers read by this round
    factors: dict          # cache -> factor after the round (lowered hosts only)
    run: object = None     # what measure() returned beside the reads (the bench's run figures)


def load_fed_rounds(ring: Mapping[str, float], caps_gbps: Mapping[str, float],
                    measure: Callable[[dict], tuple[list[tuple[float, dict]], object]], rules: RingLoadRules,
                    max_rounds: int) -> tuple[list[LoadFedRound], bool]:
    """switchyard.desired.ringload's rule run step by step against load measured again after each step.

    Each round re-routes the readers by the ring's weights times the factors so far and measures them:
    measure(weights) -> ([(seconds from the round's start, cache -> bytes it has sent)], the run's figures);
    caps_gbps in the same units as those bytes per second x 8e-9. The reads are fed to the rule on one clock
    (each round starts where the last step was taken); once a round's reads step a factor, the rest of that
    round (read under the old ring) is not fed, and the next round reads by the new factors. It ends when a
    round steps nothing (the factors have stopped changing: returns True) or after max_rounds (False; the
    last round's factors were not measured)."""
    state, lowered, rounds, start = RingLoad(), {}, [], 0.0
    for _ in range(max_rounds):
        weights = {c: w * lowered.get(c, 1.0) for c, w in ring.items()}
        reads, run = measure(weights)
        state = replace(state, at=None, counters={})  # between rounds: fills and new readers, not this load
        changed = False
        for seconds, sent in reads:
            at = start + seconds
            state = next_load(state, {c: Counter(float(n)) for c, n in sent.items()}, at, ring, caps_gbps, rules)
            if factors(state, rules) != lowered:
                changed, start = True, at
                break
        lowered = factors(state, rules)
        rounds.append(LoadFedRound(weights, dict(lowered), run))
        if not changed:
            return rounds, True
    return rounds, False


@dataclass(frozen=True)
class RunFigures:
    """One run's figures, in model Gbps."""

    delivered_gbps: float       # bytes into the readers' nodes ÷ the time the last reader took
    slowest_over_median: float  # the slowest reader's completion ÷ the median reader's
    served_gbps: dict           # cache -> Gbps it served over the run
    origin_over_unique: float   # bytes from the origin (the fills this set-up needed) ÷ the distinct files' bytes


def completion(seconds: Sequence[float]) -> tuple[float, float, float]:
    """(slowest, median, slowest ÷ median) of the readers' completion times."""
    slowest, median = max(seconds), statistics.median(seconds)
    return slowest, median, slowest / median if median > 0 else math.inf


def figures(reader_bytes: float, cache_bytes: Mapping[str, float], origin_bytes: float, unique_bytes: float,
            seconds: Sequence[float], scale: float) -> RunFigures:
    """A run's figures from its byte counts and its readers' completion times (seconds from the start)."""
    makespan = max(seconds)

    def gbps(n: float) -> float:
        return n * 8 / makespan / 1e6 / scale

    return RunFigures(round(gbps(reader_bytes), 3), round(completion(seconds)[2], 3),
                      {c: round(gbps(b), 3) for c, b in sorted(cache_bytes.items())},
                      round(origin_bytes / unique_bytes, 3) if unique_bytes else math.nan)
