#!/usr/bin/env python3
"""One TCP flow each way over a link shaped like a real-node bench uplink: does it stay full both ways?

    sudo python3 bench/notes/scripts/two_way_uplink.py [CC,WAYS ...]    # default: bbr,1 bbr,2 reno,1 reno,2

Two namespaces (probe_pair.py; removed after each trial) and a veth between them, each end shaped by
e2e/fabric.py shape() at 30 Mbit/s (a 10 Gbps uplink at bench-fabric-real's 3 Mbit/s per Gbps) with its
drop-tail FIFO (256 KB: 68 ms). A bulk flow a -> b, and with WAYS 2 one b -> a too (a worker pod on each
side reading from the other side's cache over one XRootD connection), CC in both namespaces, for 30 s. The
figures are what each end's shaper sent over the last 19 s ÷ its rate (the ACKs of the other flow included:
about 2% of it). bench/notes/fabric-real-two-way.md.
"""

from __future__ import annotations

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "e2e"))
from fabric import shape  # noqa: E402
from probe_pair import A, B, pair, sent, spawn  # noqa: E402

MBIT, SECONDS, WARM = 30.0, 30, 8
SINK = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 5001)); s.listen(1)
c, _ = s.accept()
while c.recv(1 << 16): pass
"""
SOURCE = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5001)); end = time.time() + float(sys.argv[2])
try:
    while time.time() < end: c.sendall(b"x" * 65536)
except OSError: pass          # the sink stopped first
"""


def trial(cc: str, ways: int) -> tuple[float, float]:
    processes = []
    with pair(cc, processes):
        for end in (A, B):
            shape(end[0], end[2], MBIT)
        pairs = [(A, B), (B, A)][:ways]           # (sender, receiver)
        for _, receiver in pairs:
            processes.append(spawn(receiver, SINK, receiver[1]))
        time.sleep(1)
        for sender, receiver in pairs:
            processes.append(spawn(sender, SOURCE, receiver[1], str(SECONDS)))
        time.sleep(WARM)
        a0, b0, t0 = sent(A), sent(B), time.time()
        time.sleep(SECONDS - WARM - 3)
        a1, b1, t1 = sent(A), sent(B), time.time()
        full = MBIT * 1e6 / 8 * (t1 - t0)
        return (a1 - a0) / full, (b1 - b0) / full


if __name__ == "__main__":
    for spec in sys.argv[1:] or ["bbr,1", "bbr,2", "reno,1", "reno,2"]:
        cc, ways = spec.split(",")
        a_to_b, b_to_a = trial(cc, int(ways))
        print(f"{cc}, {ways} way(s): a->b {a_to_b:.3f}, b->a {b_to_a:.3f} of the rate", flush=True)
