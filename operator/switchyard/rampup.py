"""Start-storm shaping, pure: how many workers may start now, and each worker's jitter.

STAR at NERSC learned that tens of thousands of tasks starting at once clog
shared services; a bounded start rate per fleet plus a per-worker delay
spread environment loading and scheduler registration out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping


def jitter_seconds(name: str, max_seconds: float) -> float:
    """A delay in [0, max_seconds) fixed by the worker's name (same name, same delay)."""
    if max_seconds <= 0:
        return 0.0
    fraction = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") / 2**64
    return fraction * max_seconds


# Tokens of a running ramp accrue for at most this long between two counts. A
# reconcile cycle slower than a second (a loaded operator) still starts
# rate x cycle, so the rate holds; one stalled longer never releases a storm.
CATCH_UP_SECONDS = 5.0


@dataclass(frozen=True)
class Bucket:
    """Start tokens of one fleet's ramp: they accrue at the rate, up to the burst plus CATCH_UP_SECONDS' worth."""

    tokens: float
    at: float  # when they were last counted (monotonic seconds)


def burst(rate_per_second: float) -> float:
    """A new ramp's tokens: one second's worth, at least one."""
    return max(1.0, rate_per_second)


def most_starts(rate_per_second: float, seconds: float, from_ramp_start: bool = False) -> float:
    """The most starts one ramp allows within any `seconds`: the most its bucket holds when they begin
    (the burst plus CATCH_UP_SECONDS' worth; the burst alone when they begin with the ramp) plus what
    accrues in them. What the rate promises, for a test to hold the starts to."""
    held = burst(rate_per_second) + (0.0 if from_ramp_start else rate_per_second * CATCH_UP_SECONDS)
    return held + rate_per_second * max(0.0, seconds)


def refill(bucket: Bucket | None, rate_per_second: float, now: float) -> Bucket:
    """The bucket at `now`; a new ramp starts with one second's worth (the burst)."""
    if bucket is None:
        return Bucket(burst(rate_per_second), now)
    cap = most_starts(rate_per_second, 0.0)
    return Bucket(min(cap, bucket.tokens + rate_per_second * max(0.0, now - bucket.at)), now)


def resume(now: float) -> Bucket:
    """The bucket of a ramp this process finds under way (it took over from another leader, or
    restarted): no tokens yet. The previous process may have just spent its burst; starting with
    another would let the two together start one burst more than a single bucket allows."""
    return Bucket(0.0, now)


def spend(bucket: Bucket, started: int) -> Bucket:
    return Bucket(bucket.tokens - started, bucket.at)


def step(planned: Mapping[str, int], current: Mapping[str, int], budget: int) -> dict[str, int]:
    """Counts per switch after one ramp step.

    Scale-down happens at once; scale-up hands out at most `budget` new
    workers, to the switches furthest below plan first (ties by name).
    """
    counts = {sw: min(current.get(sw, 0), n) for sw, n in planned.items()}
    deficits = sorted(((n - counts[sw], sw) for sw, n in planned.items() if n > counts[sw]), key=lambda d: (-d[0], d[1]))
    remaining = budget
    while remaining > 0 and deficits:
        # One round: every switch still short gets an equal share (at least one).
        share = max(1, remaining // len(deficits))
        next_round = []
        for deficit, sw in deficits:
            give = min(deficit, share, remaining)
            counts[sw] += give
            remaining -= give
            if deficit - give > 0:
                next_round.append((deficit - give, sw))
            if remaining == 0:
                break
        deficits = next_round
    return {sw: n for sw, n in counts.items()}
