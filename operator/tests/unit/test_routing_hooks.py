"""The hooks that apply a worker's routing below fsspec and uproot, and the Dask preload that installs them."""

from __future__ import annotations

import logging

import fsspec
import pytest
import uproot.source.xrootd as sources
from fsspec_xrootd import XRootDFileSystem

from switchyard.api import WorkerFleetSpec
from switchyard.api.plans import FleetPlan
from switchyard.builders.workerfleet import ROUTING_PRELOAD, build_fleet
from switchyard.planner import hashing
from switchyard.routing import Router
from switchyard.routing import hooks

RING = {"cache-a": 1.0, "cache-b": 1.0, "cache-c": 2.0}
ENV = {"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": "rendezvous-sha256-v1",
       "SWITCHYARD_CACHE_RING": ",".join(f"root://{h}:1094={w:g}" for h, w in RING.items())}


@pytest.fixture
def restore_hooks():
    """Undo install(): the stock fsspec-xrootd class and uproot's own constructors."""
    yield
    fsspec.register_implementation("root", XRootDFileSystem, clobber=True)
    for name in ("XRootDSource", "MultithreadedXRootDSource"):
        cls = getattr(sources, name)
        cls.__init__ = getattr(cls.__init__, "switchyard_original", cls.__init__)
    hooks._INSTALLED.clear()


def test_nothing_is_hooked_without_routing(restore_hooks):
    before = fsspec.get_filesystem_class("root")
    assert hooks.install(Router()) == []
    assert fsspec.get_filesystem_class("root") is before


def test_fsspec_reads_each_file_from_its_routed_caches_and_lists_at_the_origin(restore_hooks):
    assert "fsspec" in hooks.install(Router.from_env(ENV))
    assert hooks.install(Router.from_env(ENV))  # twice is harmless: one subclass of the stock class
    cls = fsspec.get_filesystem_class("root")
    assert cls.__name__ == "RoutedXRootDFileSystem" and cls.__mro__[1].__name__ == "XRootDFileSystem"

    for name in [f"/store/f{i}.root" for i in range(50)]:
        fs, path = fsspec.core.url_to_fs(f"root://origin.example.org:1094/{name}")
        assert fs.hostid == "origin.example.org:1094"  # ls and glob go where the URL says
        url, urls = fs._switchyard_routes(path)
        assert url == f"root://origin.example.org:1094/{name}"
        assert urls == [f"root://{h}:1094/{name}" for h in hashing.order(name, RING)]
        cache, where = fs._switchyard_cache(urls[0])
        assert type(cache).__name__ == "XRootDFileSystem" and cache.hostid == f"{hashing.home(name, RING)}:1094"
        assert where == name


def test_uproot_xrootd_sources_open_the_routed_urls(restore_hooks, monkeypatch):
    opened = []

    def fake_init(self, file_path, **options):
        opened.append(file_path)
        if len(opened) == 1:
            raise OSError("connection refused")

    monkeypatch.setattr(sources.XRootDSource, "__init__", fake_init)
    assert "uproot" in hooks.install(Router.from_env(ENV))
    sources.XRootDSource("root://origin//store/x.root")
    order = hashing.order("/store/x.root", RING)
    assert opened == [f"root://{h}:1094//store/x.root" for h in order[:2]]  # home refused: the next one


def test_failover_tries_the_caches_in_order_and_a_missing_file_is_not_retried():
    seen = []

    def attempt(url):
        seen.append(url)
        if url != "c":
            raise ConnectionRefusedError(f"{url} down")
        return "read from " + url

    assert hooks._in_order("u", ["a", "b", "c"], attempt) == "read from c" and seen == ["a", "b", "c"]
    with pytest.raises(hooks.AllCachesFailed, match="no cache could serve u: a: a down; b: b down"):
        hooks._in_order("u", ["a", "b"], attempt)

    def missing(url):
        seen.append(url)
        raise FileNotFoundError(url)

    seen.clear()
    with pytest.raises(FileNotFoundError):
        hooks._in_order("u", ["a", "b"], missing)
    assert seen == ["a"]


class OpenFile:
    """The parts of fsspec-xrootd's XRootDFile the failover touches: a handle, a size, a block cache, close."""

    class Cache:
        fetcher = None

    def __init__(self, cache: str, size: int = 10, dead: set[str] | None = None) -> None:
        self._myFile, self.size, self.closed, self.dead = cache, size, False, dead if dead is not None else set()
        self.cache = self.Cache()

    def _fetch_range(self, start: int, end: int) -> bytes:
        if self._myFile in self.dead:
            raise ConnectionResetError(f"{self._myFile} reset")
        return f"{self._myFile}[{start}:{end}]".encode()

    def close(self) -> None:
        if self._myFile in self.dead:
            raise OSError(f"File did not close properly: {self._myFile} reset")
        self.closed = True


def test_an_open_file_reads_on_from_the_next_cache_and_a_failed_close_after_its_reads_is_not_an_error(caplog):
    dead: set[str] = set()
    file = hooks._failing_over(OpenFile("a", dead=dead), "u", "a", ["b", "c"],
                               lambda cache: OpenFile(cache, size=10 if cache != "b" else 9, dead=dead))
    assert file.cache.fetcher(0, 4) == b"a[0:4]"
    dead.add("a")
    # b holds another size (not the same file): skipped; c reads the range, and the ranges after it.
    assert file.cache.fetcher(4, 10) == b"c[4:10]" and file._fetch_range(0, 2) == b"c[0:2]"
    dead.add("c")
    with caplog.at_level(logging.WARNING, logger="switchyard.routing"):
        file.close()
        with pytest.raises(hooks.AllCachesFailed, match="no cache could serve u: c: c reset"):
            file.cache.fetcher(0, 1)
    assert file.closed and "closing u failed after its reads" in caplog.text


def fleet(**dask) -> WorkerFleetSpec:
    return WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 2, "dask": {"schedulerAddress": "tcp://s:8786", **dask}})


@pytest.mark.parametrize("pool, preloaded", [("af-xc", True), (None, False)])
def test_dask_workers_of_a_fleet_with_a_pool_load_the_routing_preload(pool, preloaded):
    plan = FleetPlan(facility="af", workers={"sw1": 2}, pool=pool, cache_switches=["sw1"] if pool else [])
    (deployment,) = build_fleet("f", "ns", fleet(), plan, helper_image="h:1")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (["--preload", ROUTING_PRELOAD] == args[-2:]) is preloaded
    assert args.count("--preload") == int(preloaded)


def test_the_preload_text_is_the_routing_preload_or_a_warning_when_switchyard_is_missing(monkeypatch, caplog):
    assert " " in ROUTING_PRELOAD  # distributed treats it as script text, not a module name
    namespace: dict = {}
    exec(compile(ROUTING_PRELOAD, "preload", "exec"), namespace)
    from switchyard.routing.dask_preload import dask_setup

    assert namespace["dask_setup"] is dask_setup

    monkeypatch.setitem(__import__("sys").modules, "switchyard.routing.dask_preload", None)  # as in an image without it
    namespace = {}
    with caplog.at_level(logging.WARNING, logger="distributed.switchyard"):
        exec(compile(ROUTING_PRELOAD, "preload", "exec"), namespace)
    assert "dask_setup" not in namespace
    assert "root:// reads are not routed through the caches" in caplog.text


def test_the_preload_logs_a_malformed_environment_instead_of_failing_the_worker(monkeypatch, caplog, restore_hooks):
    from switchyard.routing import dask_preload

    monkeypatch.setenv("SWITCHYARD_ROUTING", "hashed")
    monkeypatch.setenv("SWITCHYARD_CACHE_RING", "root://a:1094=lots")
    with caplog.at_level(logging.ERROR, logger="distributed.switchyard"):
        assert dask_preload.setup() == []
    assert "switchyard routing is off: SWITCHYARD_CACHE_RING: the weight of 'root://a:1094' is 'lots'" in caplog.text
