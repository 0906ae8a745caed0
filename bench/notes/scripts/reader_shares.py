#!/usr/bin/env python3
"""Each fabric reader's share, from outside a running bench: what bench/notes/outside-readers-host-fifo.md quotes.

    python3 bench/notes/scripts/reader_shares.py sample SAMPLES.jsonl      # every 5 s until stopped (root)
    python3 bench/notes/scripts/reader_shares.py report SAMPLES.jsonl [RUN]

`sample` records, every 5 s, each fabric_reader.py process's bytes read (/proc/PID/io rchar) and `ss -tinp`
of every syfab-* namespace (each TCP connection's bytes acked, window, RTT, congestion state). `report`
takes one run (a stretch of samples with the readers alive; RUN counts from 0, default the last) and prints,
from the caches' side of each connection, what each reader read per cache (Mbit/s over the run), the
connection's cwnd and ssthresh at the end, and each reader address's total per 5 s sample.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

PERIOD = 5.0


def readers() -> dict[str, int]:
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = [a for a in open(f"/proc/{pid}/cmdline").read().split("\0") if a]
            if not any(a.endswith("fabric_reader.py") for a in argv):
                continue
            io = dict(line.split(": ") for line in open(f"/proc/{pid}/io").read().splitlines())
            out[f"{pid} {os.path.basename(argv[-1])}"] = int(io["rchar"])
        except (OSError, ValueError, KeyError):
            continue                       # gone between the listing and the read
    return out


def sample(path: str) -> None:
    with open(path, "a") as out:
        while True:
            t = time.time()
            names = subprocess.run(["ip", "netns"], capture_output=True, text=True).stdout.split()
            ss = {ns: subprocess.run(["ip", "netns", "exec", ns, "ss", "-tinp", "state", "established"],
                                     capture_output=True, text=True).stdout
                  for ns in names if ns.startswith("syfab")}
            out.write(json.dumps({"t": t, "readers": readers(), "ss": ss}) + "\n")
            out.flush()
            time.sleep(max(0.1, PERIOD - (time.time() - t)))


def connections(record: dict) -> dict[tuple[str, str], dict]:
    """(local, peer) -> what ss said, for every connection of every namespace."""
    out = {}
    for text in record["ss"].values():
        lines = text.strip().split("\n")[1:]
        for head, info in zip(lines[::2], lines[1::2]):
            fields = head.split()
            value = lambda key: (re.search(r"\b" + key + r":(\S+)", info) or [None, None])[1]  # noqa: E731
            pid = re.search(r"pid=(\d+)", head)
            out[fields[2], fields[3]] = {"acked": int(value("bytes_acked") or 0), "cwnd": value("cwnd"),
                                         "ssthresh": value("ssthresh"), "pid": pid and pid.group(1)}
    return out


def runs(records: list[dict]) -> list[list[dict]]:
    """Stretches of samples with many readers alive, split where the samples stop."""
    out: list[list[dict]] = []
    for r in (r for r in records if len(r["readers"]) >= 4):
        if out and r["t"] - out[-1][-1]["t"] < 3 * PERIOD:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def report(path: str, which: int = -1) -> None:
    run = runs([json.loads(line) for line in open(path)])[which]
    states = [connections(r) for r in run]
    first, last, seconds = states[1], states[-1], run[-1]["t"] - run[1]["t"]
    name = {pid: spec for r in run for pid, spec in (n.split(" ", 1) for n in r["readers"] if " " in n)}
    reader_of = {local: s["pid"] for (local, peer), s in last.items() if peer.endswith(":1094")}
    per_reader: dict[str, list[str]] = {}
    for (local, peer), s in sorted(last.items()):
        if not local.endswith(":1094") or (local, peer) not in first:
            continue
        mbit = (s["acked"] - first[local, peer]["acked"]) * 8 / seconds / 1e6
        pid = reader_of.get(peer)
        per_reader.setdefault(f"{peer.split(':')[0]} {name.get(pid, pid)}", []).append(
            f"{local.split(':')[0]} {mbit:.2f} Mbit/s (cwnd {s['cwnd']}, ssthresh {s['ssthresh']})")
    print(f"{len(run)} samples over {seconds:.0f} s; per reader (address, process), from each cache:")
    for reader, rows in sorted(per_reader.items()):
        print(f"  {reader}: " + "; ".join(rows))
    print("per sample, Mbit/s to each reader address:")
    for before, after, r in zip(states, states[1:], run[1:]):
        dt = r["t"] - run[0]["t"]
        by: dict[str, float] = {}
        for key, s in after.items():
            if key[0].endswith(":1094") and key in before:
                by[key[1].split(":")[0]] = by.get(key[1].split(":")[0], 0) + (s["acked"] - before[key]["acked"]) * 8 / PERIOD / 1e6
        print(f"  {dt:5.0f} s: " + ", ".join(f"{a} {v:.1f}" for a, v in sorted(by.items()) if v > 0.5))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("sample", "report"):
        sys.exit(__doc__)
    if sys.argv[1] == "sample":
        sample(sys.argv[2])
    else:
        report(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else -1)
