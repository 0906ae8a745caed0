"""The WAN share as a pace: how long a reader waits before it takes more bytes. Shared by the reader threads
(a lock) and it sleeps; the clock and the sleep are given, so a test runs it on a fake clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Pace:
    """A shared virtual clock: every byte any reader takes moves `due` on by 1/rate seconds; a reader that
    took n bytes waits until the clock had room for them. So by any time t after the start, the readers have
    taken at most rate x t bytes plus one chunk each (what each read before its wait): the bound holds for
    the total, however many files are read at once, and a reader that stalls (a slow cache) leaves its
    share to the others instead of saving it up for a burst (`due` never lags the clock)."""

    def __init__(self, bytes_per_second: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not bytes_per_second > 0:
            raise ValueError(f"a pace must be above 0 bytes/s, not {bytes_per_second!r}")
        self.rate = float(bytes_per_second)
        self._clock, self._sleep = clock, sleep
        self._due: float | None = None
        self._lock = threading.Lock()

    def took(self, count: int) -> float:
        """Record `count` bytes read; wait (sleep) until the pace allows them. Returns the wait."""
        with self._lock:
            now = self._clock()
            start = now if self._due is None else max(now, self._due)
            self._due = start + count / self.rate
            wait = self._due - now
        if wait > 0:
            self._sleep(wait)
        return max(wait, 0.0)
