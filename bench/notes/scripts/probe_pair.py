"""Two namespaces and a veth between them, for the two-namespace probes (host_queue_fill.py, two_way_uplink.py).

    with pair(cc="bbr"):   # syprobe-a 10.99.0.1 (veth pa) <-> syprobe-b 10.99.0.2 (veth pb), removed on leaving
        ...
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "e2e"))
from fabric import run, shaped_bytes  # noqa: E402

A, B = ("syprobe-a", "10.99.0.1", "pa"), ("syprobe-b", "10.99.0.2", "pb")


def remove() -> None:
    for ns, _, _ in (A, B):
        run("ip", "netns", "del", ns, check=False)


@contextmanager
def pair(cc: str = "", processes: list[subprocess.Popen] | None = None) -> Iterator[None]:
    """The pair, with `cc` as TCP congestion control in both ("": the host's); `processes` are killed on leaving."""
    remove()
    try:
        for ns, _, _ in (A, B):
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            if cc:
                run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.tcp_congestion_control={cc}")
        run("ip", "link", "add", "name", A[2], "netns", A[0], "type", "veth", "peer", "name", B[2], "netns", B[0])
        for ns, ip, dev in (A, B):
            run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "up")
        yield
    finally:
        for p in processes or ():
            p.kill()
            p.wait()
        remove()


def sent(end: tuple[str, str, str]) -> int:
    """Bytes the shaper on that end's veth has sent."""
    ns, _, dev = end
    return shaped_bytes(ns, dev)[dev]


def spawn(end: tuple[str, str, str], code: str, *args: str) -> subprocess.Popen:
    """Python `code` run in that end's namespace with `args`."""
    return subprocess.Popen(["ip", "netns", "exec", end[0], sys.executable, "-c", code, *args])
