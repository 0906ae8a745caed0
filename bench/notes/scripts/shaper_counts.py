#!/usr/bin/env python3
"""What a full shaped link reads in the interface counters and in the shaper's own count.

One veth pair between two namespaces, shaped like every fabric link
(e2e/fabric.py shape()), filled by N bulk TCP senders for a few seconds, once
per congestion control. The interface counters see an offloaded (GSO) burst
as one packet with one header; HTB charges a header per segment. So a full
link reads 1.0 of its rate in the shaper's count, and between the payload
share (1448/1514 = 0.956) and 1.0 in the counters, by the bursts' size. Why
bench/fabric_bench.py measures with the shaper's count.

    python3 bench/notes/scripts/shaper_counts.py [--mbit 100] [--seconds 10]   # needs root; prints a table
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "e2e"))

from fabric import PREFIX, allow_congestion, down, run, shape, shaped_bytes  # noqa: E402

NS = (PREFIX + "cc-a", PREFIX + "cc-b")
RECEIVER = """
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("10.99.0.2", 5001)); s.listen(64)
def drain(c):
    while c.recv(1 << 20):
        pass
while True:
    c, _ = s.accept(); threading.Thread(target=drain, args=(c,), daemon=True).start()
"""
SENDER = """
import socket, sys, threading, time
buf = b"x" * (1 << 20)
def send():
    c = socket.create_connection(("10.99.0.2", 5001))
    while True:
        c.sendall(buf)
for _ in range(int(sys.argv[1])):
    threading.Thread(target=send, daemon=True).start()
time.sleep(3600)
"""


def counts() -> tuple[int, int, int]:
    """(interface tx bytes, tx packets, shaper bytes) of the sender's end."""
    link = json.loads(run("ip", "-n", NS[0], "-j", "-s", "link", "show", "dev", "ea").stdout)[0]["stats64"]["tx"]
    return link["bytes"], link["packets"], shaped_bytes(NS[0], "ea")["ea"]


def measure(congestion: str, flows: int, mbit: float, seconds: float) -> dict:
    down(PREFIX + "cc-")
    allow_congestion(congestion)
    processes = []
    try:
        for ns in NS:
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.tcp_congestion_control={congestion}")
        run("ip", "link", "add", "name", "ea", "netns", NS[0], "type", "veth", "peer", "name", "eb", "netns", NS[1])
        for ns, dev, ip in ((NS[0], "ea", "10.99.0.1/24"), (NS[1], "eb", "10.99.0.2/24")):
            run("ip", "-n", ns, "addr", "add", ip, "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "up")
        shape(NS[0], "ea", mbit)
        processes.append(subprocess.Popen(["ip", "netns", "exec", NS[1], sys.executable, "-c", RECEIVER],
                                          stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        processes.append(subprocess.Popen(["ip", "netns", "exec", NS[0], sys.executable, "-c", SENDER, str(flows)],
                                          stderr=subprocess.DEVNULL))
        time.sleep(3)                                     # past slow start
        b0, p0, h0 = counts()
        time.sleep(seconds)
        b1, p1, h1 = counts()
    finally:
        for p in processes:
            p.kill()
            p.wait()
        down(PREFIX + "cc-")
    rate = mbit * 1e6 / 8 * seconds
    return {"congestion": congestion, "flows": flows, "counters": (b1 - b0) / rate, "shaper": (h1 - h0) / rate,
            "bytes_per_packet": (b1 - b0) / max(1, p1 - p0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mbit", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    available = pathlib.Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    print(f"A link shaped at {args.mbit:g} Mbit/s, filled for {args.seconds:g} s: what each count reads of its rate\n")
    print("| congestion control | flows | interface counters | shaper (HTB bytes) | counted bytes per packet |")
    print("|---|---:|---:|---:|---:|")
    for congestion in [c for c in ("bbr", "cubic") if c in available]:
        for flows in (1, 8):
            r = measure(congestion, flows, args.mbit, args.seconds)
            print(f"| {congestion} | {flows} | {r['counters']:.3f} | {r['shaper']:.3f} | {r['bytes_per_packet']:.0f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
