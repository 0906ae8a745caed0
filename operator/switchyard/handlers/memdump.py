"""A heap report of the running operator (tracemalloc), for profiling its memory at scale.

Only used when SWITCHYARD_MEMDUMP_DIR is set (startup.memory_dump_on_signal). The
first call starts tracing; every call writes the live objects by type and the
process's VmRSS, and, once tracing, the biggest allocation sites (by file, line and
traceback) of what was allocated since tracing started and is still alive.
"""

from __future__ import annotations

import collections
import gc
import os
import pathlib
import time
import tracemalloc


def _rss_kib() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _allocations(top: int) -> list[str]:
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    traced, peak = tracemalloc.get_traced_memory()
    lines = [f"traced since the first signal: {traced / 2**20:.1f} MiB live (peak {peak / 2**20:.1f} MiB)", "",
             "## by file"]
    lines += [str(s) for s in snapshot.statistics("filename")[:top]]
    lines += ["", "## by line"]
    lines += [str(s) for s in snapshot.statistics("lineno")[:top]]
    lines += ["", "## by traceback (top 10)"]
    for stat in snapshot.statistics("traceback")[:10]:
        lines.append(f"{stat.size / 2**20:.1f} MiB in {stat.count} blocks")
        lines += [f"    {frame}" for frame in stat.traceback.format()[-12:]]
    return lines


def dump(directory: str, top: int = 40, frames: int = 12) -> pathlib.Path:
    types = collections.Counter(type(o).__name__ for o in gc.get_objects())
    lines = [f"VmRSS {_rss_kib() / 1024:.1f} MiB", ""]
    if tracemalloc.is_tracing():
        lines += _allocations(top)
    else:
        tracemalloc.start(frames)
        lines.append("tracing starts now")
    lines += ["", "## gc-tracked objects by type"]
    lines += [f"{n:>9} {name}" for name, n in types.most_common(top)]
    path = pathlib.Path(directory) / f"switchyard-heap-{os.getpid()}-{time.strftime('%H%M%S')}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path
