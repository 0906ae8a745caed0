"""A network namespace joined to the host by a veth pair: a reader with an address of its own (root, iproute2)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def veth_namespace(tag: str, subnet: str) -> Iterator[tuple[str, str, str]]:
    """(namespace, host-side address, namespace address) on a /30 of `subnet` ("10.213.{}.{}") per test
    process, named after `tag` (a few letters); removed afterwards. Skips without root (fails under CI)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        message = "network namespaces need root and iproute2"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    number = os.getpid() % 50000
    name, host_if, ns_if = f"sy-{tag}-{number}", f"sy{tag}h{number}", f"sy{tag}n{number}"
    third, base = (number // 64) % 256, (number % 64) * 4
    host_addr, ns_addr = subnet.format(third, base + 1), subnet.format(third, base + 2)
    _ip("netns", "add", name)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", name)
        _ip("addr", "add", f"{host_addr}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", name, "addr", "add", f"{ns_addr}/30", "dev", ns_if)
        _ip("-n", name, "link", "set", ns_if, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield name, host_addr, ns_addr
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def xrdcp_from(namespace: str, url: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real client, reading `url` to /dev/null from inside `namespace`."""
    return subprocess.run(["ip", "netns", "exec", namespace, "xrdcp", "--force", "--nopbar", url, "/dev/null"],
                          capture_output=True, text=True, timeout=timeout, check=False)
