#!/usr/bin/env python3
"""Does a host's NIC shaped by e2e/fabric.py shape_host (flows in turn) stay full, against shape() (one FIFO)?

    sudo python3 bench/notes/scripts/host_queue_fill.py [fair|fifo,FLOWS ...]    # default: fair,48 fifo,48

Two namespaces (syprobe-a, syprobe-b; removed after each trial), a veth between them; a's end shaped at
67.5 Mbit/s (a cache host's serving cap in the outside-readers bench) by shape_host or shape, b's at twice
that. A server in a on port 1094 sends to FLOWS clients in b as fast as TCP lets it, for 30 s; the figure is
what a's shaper sent over the last 19 s ÷ its rate (1.0: full). bench/notes/outside-readers-host-fifo.md.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "e2e"))
from fabric import run, shape, shape_host  # noqa: E402

A, B = "syprobe-a", "syprobe-b"
MBIT, SECONDS, WARM = 67.5, 30, 8
SERVER = """
import socket, sys, threading, time
n, secs = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("10.99.0.1", 1094)); s.listen(256)
def send(c):
    end = time.time() + secs
    try:
        while time.time() < end: c.sendall(b"x" * 65536)
    except OSError: pass
for _ in range(n):
    c, _ = s.accept(); threading.Thread(target=send, args=(c,), daemon=True).start()
time.sleep(secs + 1)
"""
CLIENT = """
import socket, sys, threading, time
n, secs = int(sys.argv[1]), float(sys.argv[2])
def sink():
    c = socket.create_connection(("10.99.0.1", 1094))
    while c.recv(1 << 16): pass
for _ in range(n): threading.Thread(target=sink, daemon=True).start(); time.sleep(0.01)
time.sleep(secs + 2)
"""


def sent() -> int:
    qdiscs = json.loads(run("tc", "-n", A, "-j", "-s", "qdisc", "show", "dev", "pa").stdout)
    return next(q for q in qdiscs if q["kind"] == "htb")["bytes"]


def trial(kind: str, flows: int) -> float:
    for ns in (A, B):
        run("ip", "netns", "del", ns, check=False)
    processes = []
    try:
        for ns in (A, B):
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "link", "add", "name", "pa", "netns", A, "type", "veth", "peer", "name", "pb", "netns", B)
        run("ip", "-n", A, "addr", "add", "10.99.0.1/24", "dev", "pa")
        run("ip", "-n", B, "addr", "add", "10.99.0.4/24", "dev", "pb")
        for ns, dev in ((A, "pa"), (B, "pb")):
            run("ip", "-n", ns, "link", "set", dev, "up")
        (shape_host if kind == "fair" else shape)(A, "pa", MBIT)
        shape(B, "pb", 2 * MBIT)
        processes.append(subprocess.Popen(["ip", "netns", "exec", A, sys.executable, "-c", SERVER, str(flows), str(SECONDS)]))
        time.sleep(1)
        processes.append(subprocess.Popen(["ip", "netns", "exec", B, sys.executable, "-c", CLIENT, str(flows), str(SECONDS)]))
        time.sleep(WARM)
        b0, t0 = sent(), time.time()
        time.sleep(SECONDS - WARM - 3)
        b1, t1 = sent(), time.time()
        return (b1 - b0) / (MBIT * 1e6 / 8 * (t1 - t0))
    finally:
        for p in processes:
            p.kill()
            p.wait()
        for ns in (A, B):
            run("ip", "netns", "del", ns, check=False)


if __name__ == "__main__":
    for spec in sys.argv[1:] or ["fair,48", "fifo,48"]:
        kind, flows = spec.split(",")
        print(f"{kind}, {flows} flows: {trial(kind, int(flows)):.3f} of the rate", flush=True)
