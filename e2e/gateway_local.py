"""A dask-gateway-server process on loopback: what e2e/test_gateway.py and bench/gateway_bench.py share."""

from __future__ import annotations

import socket
import urllib.request

from support import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_gateway(port: int, timeout: float = 90) -> None:
    """Until the gateway answers its health check on `port` (its proxy, when it has one, listens before its API is up)."""
    def healthy():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5) as reply:
                return reply.status == 200
        except OSError:
            return False
    wait_for(healthy, timeout=timeout, interval=0.5, what=f"the gateway's health endpoint on port {port}")


def switchyard_config(port: int, namespace: str, instance: str, image: str, templates: dict) -> str:
    """A gateway configuration running switchyard's backend behind its proxy on `port`, for facility af."""
    return f"""
c.DaskGateway.backend_class = "switchyard.gateway.backend.SwitchyardBackend"
c.DaskGateway.address = "127.0.0.1:0"
c.Proxy.address = "127.0.0.1:{port}"
c.SwitchyardBackend.namespace = {namespace!r}
c.SwitchyardBackend.facility = "af"
c.SwitchyardBackend.gateway_instance = {instance!r}
c.SwitchyardBackend.images = [{image!r}]
c.SwitchyardBackend.fleet_templates = {templates!r}
"""
