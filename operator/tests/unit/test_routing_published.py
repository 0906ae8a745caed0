"""The pool's routing for readers outside Kubernetes: served by the cache hosts' exporters, fetched by the client.

A reader on a batch node (no credentials, no mounted ConfigMap) is given SWITCHYARD_ROUTING_URL, the exporters'
addresses; it must pick, for every file, the cache a worker inside picks from its fleet's routing ConfigMap.
"""

from __future__ import annotations

import concurrent.futures
import http.server
import logging
import socket
import threading
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, make_wsgi_app
from test_routing_ring_file import ADDRESS, FILES, RING, Clock, KubeletVolume, hosts

from switchyard.api.plans import FleetPlan
from switchyard.builders.workerfleet import build_routing_config, routing_data
from switchyard.builders.xcachepool import build_client_map
from switchyard.observe import clientmap
from switchyard import routing
from switchyard.observe.exporter import routing_app, start_server
from switchyard.planner import hashing
from switchyard.routing import (
    HASH_RULE, ROUTING_URL_ENV, PublishedRouting, Router, RoutingError, cli, fetch_text, routing_urls,
)

HOT = [{"path": FILES[3], "replicas": 3}]


def fleet_plan() -> FleetPlan:
    return FleetPlan(facility="af", workers={"sw1": 4}, hashed={"sw1": 4}, pool="af-xc", pool_port=1094,
                     cache_switches=["sw1", "sw2"], routing={"sw1": "hashed"}, cache_ring=RING)


class Exporter:
    """A cache host's exporter HTTP server over a kubelet volume holding its pool's client-map ConfigMap."""

    def __init__(self, volume: KubeletVolume) -> None:
        self.volume = volume
        self.httpd, self.thread = start_server(0, "127.0.0.1", routing_app(make_wsgi_app(CollectorRegistry()),
                                                                             str(volume.root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"

    def publish(self, config: dict) -> None:
        self.volume.publish(config["data"])

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def exporters(tmp_path):
    started = []

    def start(name: str, config: dict | None = None) -> Exporter:
        exporter = Exporter(KubeletVolume(tmp_path / name))
        if config is not None:
            exporter.publish(config)
        started.append(exporter)
        return exporter

    yield start
    for exporter in started:
        exporter.stop()


def pool_map(hot=()) -> dict:
    """The pool's client-map ConfigMap as the pool publishes it while outside readers read through it."""
    return build_client_map("af-xc", {"rack-1": ["10.8.0.0/22"]},
                            routing=routing_data("af-xc", RING, 1094, ADDRESS, hot))


def env(*urls: str) -> dict[str, str]:
    return {ROUTING_URL_ENV: ",".join(urls), "SWITCHYARD_READER": "condor-slot1@batch-7"}


def test_an_outside_reader_gets_the_cache_a_worker_inside_gets_for_every_file(exporters, tmp_path):
    fleet = build_routing_config("f", fleet_plan(), ADDRESS, HOT)
    published = pool_map(HOT)
    # One text: what the fleet's workers mount is what the exporters serve.
    assert published["data"]["ring"] == fleet["data"]["ring"] and published["data"]["hot"] == fleet["data"]["hot"]
    assert set(published["data"]) == {clientmap.KEY, "ring", "hot"}
    exporter = exporters("c0", published)
    inside_volume = KubeletVolume(tmp_path / "fleet")
    inside_volume.publish(fleet["data"])
    inside = Router.from_env({"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": HASH_RULE,
                              "SWITCHYARD_CACHE_RING_FILE": str(inside_volume.root / "ring"),
                              "SWITCHYARD_READER": "condor-slot1@batch-7"})
    outside = Router.from_env(env(exporter.url))
    assert outside.routing == "hashed" and outside.published is not None
    for path in FILES:
        assert hosts(outside, path) == hosts(inside, path)
    assert hosts(outside, FILES[0]) == [ADDRESS[n] for n in hashing.order(FILES[0], RING)]
    assert outside.hot_list() == {FILES[3]: 3}  # the hot file too: read from this reader's pick of 3


def test_the_cli_routes_from_the_published_routing(exporters, monkeypatch, capsys):
    exporter = exporters("c0", pool_map())
    for name, value in env(exporter.url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # a batch node's proxy: not used for the exporters
    assert cli.main(["--all", "root://origin.example.org//" + FILES[0].lstrip("/")]) == 0
    printed = capsys.readouterr().out.split()
    assert [u.split("//")[1].split(":")[0] for u in printed] == [ADDRESS[n] for n in hashing.order(FILES[0], RING)]


def test_the_first_exporter_that_answers_serves_and_a_dead_one_is_passed_over(exporters):
    dead = exporters("dead")
    dead.stop()
    alive = exporters("alive", pool_map())
    router = Router.from_env(env(dead.url, alive.url))
    assert hosts(router, FILES[0])[0] == ADDRESS[hashing.home(FILES[0], RING)]
    assert router.published.bases[router.published._first] == alive.url  # asked first next time


def test_a_changed_ring_is_fetched_again_after_the_interval_and_a_failure_keeps_the_last(exporters, caplog):
    exporter = exporters("c0", pool_map())
    clock = Clock()
    published = PublishedRouting(routing_urls(exporter.url), recheck=30.0, clock=clock)
    router = Router("hashed", published=published)
    smaller = {n: w for n, w in RING.items() if n != "sw1-c-1"}
    exporter.publish(build_client_map("af-xc", {}, routing=routing_data("af-xc", smaller, 1094, ADDRESS)))
    clock.now += 29.0
    assert {p: hosts(router, p)[0] for p in FILES} == {p: ADDRESS[hashing.home(p, RING)] for p in FILES}
    clock.now += 1.0
    assert {p: hosts(router, p)[0] for p in FILES} == {p: ADDRESS[hashing.home(p, smaller)] for p in FILES}
    caplog.set_level(logging.WARNING, "switchyard.routing")
    exporter.stop()
    for _ in range(3):
        clock.now += 30.0
        assert [c.name for c in published.ring()] == sorted(smaller)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "keeping the last good ring (sw1-c-0,sw2-c-0)" in warnings[0], warnings


def test_no_exporter_answering_at_start_or_no_routing_published_is_an_error(exporters):
    dead = exporters("dead")
    dead.stop()
    with pytest.raises(RoutingError, match=f"{ROUTING_URL_ENV}: no exporter answered"):
        Router.from_env(env(dead.url))
    # with the ring inline as well, it stands until an exporter answers
    assert hosts(Router.from_env({**env(dead.url), "SWITCHYARD_CACHE_RING": "root://from-env:1094=1"}),
                 FILES[0]) == ["from-env"]
    unpublished = exporters("plain", build_client_map("af-xc", {"rack-1": ["10.8.0.0/22"]}))
    with pytest.raises(RoutingError, match="404.*"):
        Router.from_env(env(unpublished.url))


def test_the_exporter_serves_the_mounted_keys_and_its_metrics(exporters):
    exporter = exporters("c0", pool_map())
    assert fetch_text(exporter.url + "/routing/ring") == pool_map()["data"]["ring"]
    with pytest.raises(OSError, match="404"):  # no hot file: no key, the reader has none
        fetch_text(exporter.url + "/routing/hot")
    with urllib.request.urlopen(urllib.request.Request(exporter.url + "/routing/ring", method="HEAD")) as head:
        assert head.status == 200 and head.read() == b"" and head.headers["Cache-Control"] == "no-cache"
    with urllib.request.urlopen(exporter.url + "/metrics") as metrics:
        assert metrics.status == 200
    exporter.publish(pool_map(HOT))
    assert fetch_text(exporter.url + "/routing/hot") == pool_map(HOT)["data"]["hot"]


class CountingServer:
    """A plain http.server serving `ring` at /routing/ring (404 elsewhere), counting the requests it gets."""

    def __init__(self, ring: str) -> None:
        counted = self.paths = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                counted.append(self.path)
                body = ring.encode() if self.path == "/routing/ring" else b"not here\n"
                self.send_response(200 if self.path == "/routing/ring" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                """quiet"""

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def counting():
    servers = []

    def start(ring: str) -> CountingServer:
        servers.append(CountingServer(ring))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_the_module_route_keeps_one_router_per_environment(counting, monkeypatch):
    """route(url) in a task's loop (docs/analyst-guide.md) fetches the published routing once (ring and hot
    list), not per call; a changed routing variable builds it again; concurrent first calls build it once."""
    monkeypatch.setattr(routing, "_process_router", None)
    first = counting(pool_map()["data"]["ring"])
    for name, value in env(first.url).items():
        monkeypatch.setenv(name, value)
    url = "root://origin.example.org//" + FILES[0].lstrip("/")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        routed = set(pool.map(lambda _: routing.route(url), range(32)))
    assert len(routed) == 1 and routed.pop().startswith(f"root://{ADDRESS[hashing.home(FILES[0], RING)]}:")
    for path in FILES:
        routing.candidates("root://origin.example.org//" + path.lstrip("/"))
    assert first.paths == ["/routing/ring", "/routing/hot"]
    assert routing.process_router() is routing.process_router()
    # another exporter named: built again from it; the first is asked no more
    smaller = {n: w for n, w in RING.items() if n != "sw1-c-1"}
    second = counting(routing_data("af-xc", smaller, 1094, ADDRESS)["ring"])
    monkeypatch.setenv(ROUTING_URL_ENV, second.url)
    assert {routing.route("root://o//" + p.lstrip("/")).split("//")[1].split(":")[0] for p in FILES} == \
        {ADDRESS[hashing.home(p, smaller)] for p in FILES}
    assert first.paths == ["/routing/ring", "/routing/hot"] and second.paths == ["/routing/ring", "/routing/hot"]
    # an environment passed in is read as given, each call
    routing.route(url, env(first.url))
    assert len(first.paths) == 4


def raw_response(url: str, method: str, path: str) -> bytes:
    """Everything the server sends for one request, read to its close (HTTP/1.0: a client that knows HEAD has
    no body would not read one, so a body sent would go unseen)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(f"{method} {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    return received


@pytest.mark.parametrize("path", ["/routing/ring", "/routing/hot"])
def test_head_gets_the_headers_of_get_and_no_body_found_or_not(exporters, path):
    exporter = exporters("c0", pool_map())  # a ring, no hot file: 200 and 404
    got = raw_response(exporter.url, "GET", path)
    head = raw_response(exporter.url, "HEAD", path)
    status = got.split(b"\r\n", 1)[0]
    assert status.split()[1] == (b"200" if path.endswith("ring") else b"404")
    assert got.split(b"\r\n\r\n", 1)[1]  # GET has a body
    assert head.split(b"\r\n", 1)[0] == status and head.endswith(b"\r\n\r\n"), head
    assert b"Content-Length: %d" % len(got.split(b"\r\n\r\n", 1)[1]) in head


@pytest.mark.parametrize(("value", "bases"), [
    ("10.0.1.5:9933", ("http://10.0.1.5:9933",)),
    ("http://10.0.1.5:9933/, http://[fd00::5]:9933", ("http://10.0.1.5:9933", "http://[fd00::5]:9933")),
])
def test_routing_urls(value, bases):
    assert routing_urls(value) == bases


@pytest.mark.parametrize(("value", "message"), [
    ("root://10.0.1.5:1094", "is not an http://host:port URL"),
    ("http://10.0.1.5:port", "is not an http://host:port URL"),
    (" , ", "names no exporter"),
])
def test_malformed_routing_urls(value, message):
    with pytest.raises(RoutingError, match=message):
        routing_urls(value)
