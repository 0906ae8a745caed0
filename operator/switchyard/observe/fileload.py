"""Per-file read load on one cache host: decaying read rates of a bounded set of files (pure).

The exporter adds the bytes clients read per path (the f-stream's transfer
records, every fstat interval, and closes) with the time they arrived. Each
file keeps an exponentially decaying byte count: bytes read `age` seconds ago
weigh exp(-age / tau), and the file's rate is that count / tau. For a steady
load the rate converges to the load's bytes/s; when the reads stop it falls by
a factor e every tau, so what is published decays with the load, never holds a
file hot because it was hot once.

Memory is bounded: at most `capacity` files are tracked; one more evicts the
coldest (the one with the least decayed count, possibly the newcomer). Counts
are kept scaled to a moving origin (weight = bytes x exp((t - origin) / tau)),
so files compare without recomputing every decay; the origin moves before the
scale could overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

TAU_SECONDS = 60.0  # six fstat intervals of 10 s: smooths the 10 s steps, follows a change within minutes
CAPACITY = 4096     # files tracked per cache host; far more than are ever hot, so a newcomer's bar is low
_REBASE_AFTER = 200.0  # in units of tau: exp(200) is about 1e87, far from a float's limit


@dataclass
class FileLoad:
    """Decaying read rates (bytes/s) per path; feed it with `add`, read it with `hottest`."""

    tau: float = TAU_SECONDS
    capacity: int = CAPACITY
    origin: float | None = None
    _weights: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tau <= 0 or self.capacity < 1:
            raise ValueError("tau must be positive and capacity at least 1")

    def add(self, path: str, read_bytes: int, now: float) -> None:
        """`read_bytes` more read from `path` at `now` (seconds, the same clock for every call)."""
        if read_bytes <= 0:
            return
        if self.origin is None:
            self.origin = now
        if (now - self.origin) / self.tau > _REBASE_AFTER:
            self._rebase(now)
        self._weights[path] = self._weights.get(path, 0.0) + read_bytes / self._decay(now)
        if len(self._weights) > self.capacity:
            del self._weights[min(self._weights, key=lambda p: (self._weights[p], p))]

    def rate(self, path: str, now: float) -> float:
        """The file's decayed read rate at `now`, bytes/s (0 when not tracked)."""
        return self._weights.get(path, 0.0) * self._decay(now) / self.tau

    def hottest(self, count: int, now: float, floor: float = 0.0) -> list[tuple[str, float]]:
        """The `count` files with the highest rate at `now` above `floor` bytes/s, hottest first (ties by path)."""
        factor = self._decay(now) / self.tau
        ranked = sorted(self._weights.items(), key=lambda item: (-item[1], item[0]))[:count]
        return [(path, weight * factor) for path, weight in ranked if weight * factor > floor]

    def __len__(self) -> int:
        return len(self._weights)

    def _decay(self, now: float) -> float:
        """What a byte read at the origin weighs at `now` (add divides by it: at most e^_REBASE_AFTER)."""
        # A time before the origin (a clock stepped back) counts as the origin: no weight ever grows by waiting.
        return math.exp(-max(0.0, now - self.origin) / self.tau) if self.origin is not None else 1.0

    def _rebase(self, now: float) -> None:
        decay = self._decay(now)
        self._weights = {path: weight * decay for path, weight in self._weights.items() if weight * decay > 0}
        self.origin = now
