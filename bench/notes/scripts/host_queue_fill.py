#!/usr/bin/env python3
"""Does a host's NIC shaped by e2e/fabric.py shape_host (flows in turn) stay full, against shape() (one FIFO)?

    sudo python3 bench/notes/scripts/host_queue_fill.py [fair|fifo,FLOWS ...]    # default: fair,48 fifo,48

Two namespaces (probe_pair.py; removed after each trial), a veth between them; a's end shaped at
67.5 Mbit/s (a cache host's serving cap in the outside-readers bench) by shape_host or shape, b's at twice
that. A server in a on port 1094 sends to FLOWS clients in b as fast as TCP lets it, for 30 s; the figure is
what a's shaper sent over the last 19 s ÷ its rate (1.0: full). bench/notes/outside-readers-host-fifo.md.
"""

from __future__ import annotations

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "e2e"))
from fabric import shape, shape_host  # noqa: E402
from probe_pair import A, B, pair, sent, spawn  # noqa: E402

MBIT, SECONDS, WARM = 67.5, 30, 8
SERVER = """
import socket, sys, threading, time
n, secs = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[3], 1094)); s.listen(256)
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
    c = socket.create_connection((sys.argv[3], 1094))
    while c.recv(1 << 16): pass
for _ in range(n): threading.Thread(target=sink, daemon=True).start(); time.sleep(0.01)
time.sleep(secs + 2)
"""


def trial(kind: str, flows: int) -> float:
    processes = []
    with pair(processes=processes):
        (shape_host if kind == "fair" else shape)(A[0], A[2], MBIT)
        shape(B[0], B[2], 2 * MBIT)
        processes.append(spawn(A, SERVER, str(flows), str(SECONDS), A[1]))
        time.sleep(1)
        processes.append(spawn(B, CLIENT, str(flows), str(SECONDS), A[1]))
        time.sleep(WARM)
        b0, t0 = sent(A), time.time()
        time.sleep(SECONDS - WARM - 3)
        b1, t1 = sent(A), time.time()
        return (b1 - b0) / (MBIT * 1e6 / 8 * (t1 - t0))


if __name__ == "__main__":
    for spec in sys.argv[1:] or ["fair,48", "fifo,48"]:
        kind, flows = spec.split(",")
        print(f"{kind}, {flows} flows: {trial(kind, int(flows)):.3f} of the rate", flush=True)
