#!/usr/bin/env python3
"""XCache benchmark: a real xrootd cache (switchyard's rendered config) in front of a real origin.

Writes bench/results/xcache.md with:
  * warm read throughput through the cache vs direct origin reads vs raw local
    file reads, for 1, 4, 16 and 32 concurrent clients;
  * origin amplification (origin bytes / unique bytes) when 32 clients read the
    same cold file at once;
  * the effect of block size and prefetch on cold and warm single-client reads.

Everything runs on loopback as the unprivileged xrootd user (hack/install-xrootd.sh),
so the absolute numbers are this machine's; the ratios are what the report is for.
Usage: python3 bench/xcache_bench.py [--file-mib 64] [--clients 1,4,16,32] [--out bench/results/xcache.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "operator" / "tests" / "integration"))

from xrootd_fixtures import Account, cache_pool, start_cache, start_origin, workspace  # noqa: E402
from headline import about  # noqa: E402

MIB = 1 << 20


def copy_to_null(url: str) -> None:
    result = subprocess.run(["xrdcp", "--force", "--nopbar", url, "/dev/null"],
                            capture_output=True, text=True, check=False, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"xrdcp {url} failed: {result.stderr.strip()}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a process has used (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_local(path: Path) -> None:
    with open(path, "rb", buffering=0) as handle:
        while handle.read(8 * MIB):
            pass


def throughput(job, count: int, size: int) -> float:
    """MB/s of `count` concurrent runs of `job`, each moving `size` bytes."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=count) as pool:
        for future in [pool.submit(job) for _ in range(count)]:
            future.result()
    return count * size / (time.perf_counter() - start) / 1e6


REPEATS = 3


def medians(jobs: dict, count: int, size: int) -> dict:
    """Median MB/s of each job over REPEATS rounds, the jobs interleaved so drift hits all alike.

    Also "rounds": each round's MB/s per job, for the spread between rounds.
    """
    samples: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(REPEATS):
        for name, job in jobs.items():
            samples[name].append(throughput(job, count, size))
    return {**{name: statistics.median(values) for name, values in samples.items()}, "rounds": samples}


def concurrency_table(base: Path, account: Account, file_mib: int, clients: list[int]) -> list[dict]:
    origin = start_origin(base, account)
    try:
        size = file_mib * MIB
        lfn = origin.put("bench.root", os.urandom(size))
        data = account.make_dir(base / "c-data")
        meta = account.make_dir(base / "c-meta")
        cache = start_cache(base, account, cache_pool(origin.daemon.port, [str(data)], str(meta),
                                                      pfc={"blockSizeKiB": 1024, "prefetchBlocks": 10}))
        try:
            copy_to_null(cache.url_for(lfn))  # warm the cache
            local = origin.root / lfn.lstrip("/")
            rows = []
            for count in clients:
                servers = {"origin": origin.daemon.process.pid, "cache": cache.daemon.process.pid}
                before = {name: cpu_seconds(pid) for name, pid in servers.items()}
                row = {"clients": count, **medians({
                    "local": lambda: read_local(local),
                    "origin": lambda: copy_to_null(origin.daemon.url + lfn),
                    "cache": lambda: copy_to_null(cache.url_for(lfn)),
                }, count, size)}
                # Each server is busy only in its own rounds (the warm cache does not read the origin).
                gib = REPEATS * count * size / 2**30
                for name, pid in servers.items():
                    row[f"{name}_cpu_per_gib"] = (cpu_seconds(pid) - before[name]) / gib
                rows.append(row)
            return rows
        finally:
            cache.daemon.stop()
    finally:
        origin.daemon.stop()
        origin.meter.close()


def amplification(base: Path, account: Account, file_mib: int, clients: int) -> dict:
    sub = account.make_dir(base / "amplification")
    origin = start_origin(sub, account)
    try:
        size = file_mib * MIB
        lfn = origin.put("cold.root", os.urandom(size))
        cache = start_cache(sub, account, cache_pool(origin.daemon.port, [str(account.make_dir(sub / "data"))],
                                                     str(account.make_dir(sub / "meta"))))
        try:
            before = origin.bytes_sent_now()
            rate = throughput(lambda: copy_to_null(cache.url_for(lfn)), clients, size)
            sent = origin.bytes_sent_now() - before
            return {"clients": clients, "unique": size, "origin": sent, "ratio": sent / size, "rate": rate}
        finally:
            cache.daemon.stop()
    finally:
        origin.daemon.stop()
        origin.meter.close()


def block_table(base: Path, account: Account, file_mib: int) -> list[dict]:
    sub = account.make_dir(base / "blocks")
    origin = start_origin(sub, account)
    rows = []
    try:
        size = file_mib * MIB
        direct_lfn = origin.put("direct.root", os.urandom(size))
        for block_kib in (128, 1024, 4096):
            for prefetch in (0, 10):
                name = f"b{block_kib}p{prefetch}"
                lfn = origin.put(f"{name}.root", os.urandom(size))
                pool = cache_pool(origin.daemon.port, [str(account.make_dir(sub / f"{name}-data"))],
                                  str(account.make_dir(sub / f"{name}-meta")),
                                  pfc={"blockSizeKiB": block_kib, "prefetchBlocks": prefetch})
                cache = start_cache(sub, account, pool)
                try:
                    cold = throughput(lambda: copy_to_null(cache.url_for(lfn)), 1, size)
                    measured = medians({"warm": lambda: copy_to_null(cache.url_for(lfn)),
                                        "direct": lambda: copy_to_null(origin.daemon.url + direct_lfn)}, 1, size)
                finally:
                    cache.daemon.stop()
                rows.append({"block_kib": block_kib, "prefetch": prefetch, "cold": cold, **measured})
    finally:
        origin.daemon.stop()
        origin.meter.close()
    return rows


def report(concurrency: list[dict], amp: dict, blocks: list[dict], file_mib: int, seconds: float,
           load: tuple[float, float]) -> str:
    xrootd = subprocess.run(["xrootd", "-v"], capture_output=True, text=True, check=False)
    version = (xrootd.stdout or xrootd.stderr).strip().splitlines()[0] if (xrootd.stdout or xrootd.stderr) else "?"
    lines = [
        "# XCache benchmark",
        "",
        *about("reads through a real xrootd cache started from the config switchyard renders, against the "
               "origin direct and the local file: warm-read throughput by concurrent clients, origin traffic for "
               "concurrent cold reads of one file, block size and prefetch",
               "`make bench-xcache` (`python3 bench/xcache_bench.py`)"),
        "Generated by `bench/xcache_bench.py`: a real xrootd cache started from the config",
        "switchyard renders, in front of a real xrootd origin, both on loopback. Each client is one",
        f"`xrdcp` to /dev/null of a {file_mib} MiB file; the local read is the same file read from",
        "the origin's disk (page cache warm). Throughputs are medians of "
        f"{REPEATS} interleaved rounds (cold reads: one round, a cold file exists once).",
        "Absolute numbers are this machine's (2 cores, shared); compare ratios.",
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        f"- xrootd: {version}; run took {seconds:.0f} s",
        f"- 1-minute load average at start {load[0]:.1f}, at end {load[1]:.1f} "
        "(anything else running shares the same cores and moves every figure)",
        "",
        "## Warm reads: cache vs direct origin vs local file",
        "",
        "| clients | local MB/s | direct origin MB/s | warm cache MB/s | cache ÷ origin | origin ÷ local "
        "| cache ÷ origin per round, lowest–highest | origin server CPU s/GiB | cache server CPU s/GiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in concurrency:
        per_round = [c / o for c, o in zip(row["rounds"]["cache"], row["rounds"]["origin"])]
        lines.append(f"| {row['clients']} | {row['local']:.0f} | {row['origin']:.0f} | {row['cache']:.0f} "
                     f"| {row['cache'] / row['origin']:.2f} | {row['origin'] / row['local']:.2f} "
                     f"| {min(per_round):.2f}–{max(per_round):.2f} "
                     f"| {row['origin_cpu_per_gib']:.2f} | {row['cache_cpu_per_gib']:.2f} |")
    worst = min(row["cache"] / row["origin"] for row in concurrency)
    lines += [
        "",
        f"Target: warm reads through the cache at ≥ 0.90 of direct-origin throughput. "
        f"Lowest ratio measured: **{worst:.3f}** ({'met' if worst >= 0.9 else 'NOT met'}). The ratios are of "
        "medians; single rounds spread further (column 7), as client and servers share this machine's two cores. "
        "The server CPU columns are each daemon's user and system CPU over its own rounds, per GiB it served: "
        "equal figures mean the cache's data path costs no more per byte than the origin's.",
        "",
        "## Origin amplification: concurrent clients on one cold file",
        "",
        "| clients | unique bytes | bytes the origin sent | origin ÷ unique | aggregate MB/s |",
        "|---:|---:|---:|---:|---:|",
        f"| {amp['clients']} | {amp['unique']:,} | {amp['origin']:,} | {amp['ratio']:.3f} | {amp['rate']:.0f} |",
        "",
        "Bytes the origin sent are the origin's own xrd.report link counter (protocol overhead",
        f"included). Target 1.00: **{amp['ratio']:.3f}** ({'met' if amp['ratio'] < 1.01 else 'NOT met'}).",
        "",
        "## Block size and prefetch (one client)",
        "",
        "| block | prefetch blocks | cold MB/s | warm MB/s | direct origin MB/s | warm ÷ origin |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in blocks:
        lines.append(f"| {row['block_kib']} KiB | {row['prefetch']} | {row['cold']:.0f} | {row['warm']:.0f} "
                     f"| {row['direct']:.0f} | {row['warm'] / row['direct']:.2f} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file-mib", type=int, default=64)
    parser.add_argument("--clients", default="1,4,16,32")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "xcache.md")
    args = parser.parse_args(argv)
    global REPEATS
    REPEATS = args.repeats
    for command in ("xrootd", "xrdcp"):
        if shutil.which(command) is None:
            print(f"{command} missing: run hack/install-xrootd.sh", file=sys.stderr)
            return 2
    account = Account.for_daemons()
    base = workspace(account)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    try:
        clients = [int(c) for c in args.clients.split(",")]
        concurrency = concurrency_table(base, account, args.file_mib, clients)
        amp = amplification(base, account, args.file_mib, max(clients))
        blocks = block_table(base, account, args.file_mib)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = report(concurrency, amp, blocks, args.file_mib, time.perf_counter() - started,
                  (load_before, os.getloadavg()[0]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
