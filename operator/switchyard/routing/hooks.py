"""Reads by origin URL, served by the cache the plan names: no change to user code.

`install()` applies the worker's routing (switchyard.routing) below the
libraries an analysis uses, at the two places every `root://` read of the
Python stack goes through:

- fsspec: the `root` protocol (fsspec-xrootd's filesystem) is replaced by a
  subclass that reads each file from its routed caches, in order (the next
  one when a cache cannot be reached). Listing and globbing stay with the
  host the URL names. This covers uproot's default source (FSSpecSource),
  coffea, dask's `read_bytes` and any `fsspec.open("root://...")`.
- uproot: its XRootD sources (`handler=uproot.XRootDSource`, which bypass
  fsspec) open the routed URLs, in the same order.

A library that is not installed is skipped. Nothing is changed when the
environment names no routing. Dask workers call it through the preload in
switchyard.routing.dask_preload; any other Python process (a TaskVine task)
can call `switchyard.routing.hooks.install()` itself.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from . import Router

log = logging.getLogger("switchyard.routing")
_INSTALLED: dict[str, Router] = {}


def install(router: Router | None = None) -> list[str]:
    """Route reads through `router` (default: from this process's environment); returns what was hooked."""
    router = Router.from_env() if router is None else router
    if not router.active:
        return []
    hooked = [name for name, hook in (("fsspec", _install_fsspec), ("uproot", _install_uproot)) if hook(router)]
    _INSTALLED.update((name, router) for name in hooked)
    return hooked


def installed() -> dict[str, Router]:
    """What install() hooked in this process, with the routing each hook applies."""
    return dict(_INSTALLED)


class AllCachesFailed(OSError):
    """No cache of a file's candidate list could serve it."""


class _Failover:
    """The errors of one file's candidates so far: a missing file is not retried elsewhere."""

    def __init__(self, url: str) -> None:
        self.url, self.errors = url, []

    def failed(self, candidate: str, error: OSError) -> None:
        if isinstance(error, FileNotFoundError):
            raise error
        log.warning("switchyard routing: %s failed (%s); trying the next cache", candidate, error)
        self.errors.append(f"{candidate}: {error}")

    def exhausted(self) -> AllCachesFailed:
        return AllCachesFailed(f"no cache could serve {self.url}: " + "; ".join(self.errors))


def _in_order(url: str, urls: list[str], attempt: Callable[[str], Any]) -> Any:
    """attempt(u) for each candidate until one succeeds."""
    failover = _Failover(url)
    for candidate in urls:
        try:
            return attempt(candidate)
        except OSError as error:
            failover.failed(candidate, error)
    raise failover.exhausted()


async def _in_order_async(url: str, urls: list[str], attempt: Callable[[str], Awaitable[Any]]) -> Any:
    failover = _Failover(url)
    for candidate in urls:
        try:
            return await attempt(candidate)
        except OSError as error:
            failover.failed(candidate, error)
    raise failover.exhausted()


def _failing_over(file: Any, url: str, cache: str, rest: list[str], reopen: Callable[[str], Any]) -> Any:
    """`file` (open for reading on `cache`) reads on from the next caches in `rest` if its cache fails.

    A cache can die between a file's open and its last read: each range is read again from the next
    cache that opens the same file (reads of a read-only file can be repeated anywhere), and a close
    that fails after every read succeeded loses nothing (the data is whole), so it is logged, not raised.
    """
    fetch, close, others, serving = file._fetch_range, file.close, list(rest), [cache]

    def fetch_range(start: int, end: int) -> Any:
        failover = _Failover(url)
        try:
            return fetch(start, end)
        except OSError as error:
            failover.failed(serving[0], error)
        while others:
            candidate = others.pop(0)
            try:
                replacement = reopen(candidate)
                if replacement.size != file.size:
                    raise OSError(f"{candidate} holds {replacement.size} bytes, not {file.size}")
                # The handle moves to `file`; the replacement's own close (at garbage collection) must not close it.
                file._myFile, replacement.closed, serving[0] = replacement._myFile, True, candidate
                return fetch(start, end)
            except OSError as error:
                failover.failed(candidate, error)
        raise failover.exhausted()

    def close_after_reads() -> None:
        try:
            close()
        except OSError as error:
            log.warning("switchyard routing: closing %s failed after its reads (%s); nothing was lost", url, error)
            file.closed = True

    # fsspec's block cache keeps the bound method it was made with: it fetches through the wrapper too.
    file._fetch_range, file.cache.fetcher, file.close = fetch_range, fetch_range, close_after_reads
    return file


def routed_filesystem_class(base: type, router: Router) -> type:
    """A subclass of fsspec-xrootd's filesystem that reads every file through `router`."""

    class RoutedXRootDFileSystem(base):  # type: ignore[misc, valid-type]
        """fsspec-xrootd, reading each file from the caches switchyard routes it to."""

        switchyard_router = router

        def _switchyard_routes(self, path: str) -> tuple[str, list[str]]:
            url = self.unstrip_protocol(path)
            return url, self.switchyard_router.candidates(url)

        def _switchyard_cache(self, url: str) -> tuple[Any, str]:
            """The plain filesystem of the cache `url` names, and the path on it (sync callers)."""
            from XRootD import client

            hostid = client.URL(url).hostid
            caches = self.__dict__.setdefault("_switchyard_caches", {})
            if hostid not in caches:
                options = {k: v for k, v in self.storage_options.items() if k != "hostid"}
                caches[hostid] = base(hostid=hostid, **options)
            return caches[hostid], base._strip_protocol(url)

        async def _switchyard_cache_async(self, url: str) -> tuple[Any, str]:
            # fsspec-xrootd's constructor waits on the IO loop, so it cannot run on it: make
            # a cache's filesystem on a thread the first time, then reuse it.
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, self._switchyard_cache, url)

        async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            url, urls = self._switchyard_routes(path)
            if urls == [url]:
                return await super()._info(path, **kwargs)

            async def attempt(candidate: str) -> dict[str, Any]:
                fs, where = await self._switchyard_cache_async(candidate)
                info = await fs._info(where, **kwargs)
                return {**info, "name": path}

            return await _in_order_async(url, urls, attempt)

        async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> Any:
            url, urls = self._switchyard_routes(path)
            if urls == [url]:
                return await super()._cat_file(path, start, end, **kwargs)

            async def attempt(candidate: str) -> Any:
                fs, where = await self._switchyard_cache_async(candidate)
                return await fs._cat_file(where, start, end, **kwargs)

            return await _in_order_async(url, urls, attempt)

        async def _get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
            url, urls = self._switchyard_routes(rpath)
            if urls == [url]:
                return await super()._get_file(rpath, lpath, **kwargs)

            async def attempt(candidate: str) -> None:
                fs, where = await self._switchyard_cache_async(candidate)
                return await fs._get_file(where, lpath, **kwargs)

            return await _in_order_async(url, urls, attempt)

        async def _cat_vector_read(self, path: str, chunks: list[tuple[int, int]], batch_size: int) -> tuple[str, list[bytes]]:
            url, urls = self._switchyard_routes(path)
            if urls == [url]:
                return await super()._cat_vector_read(path, chunks, batch_size)

            async def attempt(candidate: str) -> tuple[str, list[bytes]]:
                fs, where = await self._switchyard_cache_async(candidate)
                _, data = await fs._cat_vector_read(where, chunks, batch_size)
                return path, data  # _cat_ranges matches results by the path it asked for

            return await _in_order_async(url, urls, attempt)

        def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
            url, urls = self._switchyard_routes(path)
            if urls == [url] or "r" not in mode:
                return super()._open(path, mode, *args, **kwargs)

            def attempt(candidate: str) -> Any:
                fs, where = self._switchyard_cache(candidate)
                return fs._open(where, mode, *args, **kwargs)

            opened: list[str] = []

            def open_at(candidate: str) -> Any:
                file = attempt(candidate)
                opened.append(candidate)
                return file

            file = _in_order(url, urls, open_at)
            return _failing_over(file, url, opened[0], urls[urls.index(opened[0]) + 1:], attempt)

    RoutedXRootDFileSystem.__qualname__ = RoutedXRootDFileSystem.__name__
    return RoutedXRootDFileSystem


def _install_fsspec(router: Router) -> bool:
    try:
        import fsspec
        from fsspec_xrootd import XRootDFileSystem
    except ImportError:
        return False
    current = fsspec.get_filesystem_class("root")
    base = getattr(current, "switchyard_base", None) or XRootDFileSystem
    routed = routed_filesystem_class(base, router)
    routed.switchyard_base = base
    fsspec.register_implementation("root", routed, clobber=True)
    return True


def _install_uproot(router: Router) -> bool:
    try:
        import uproot.source.xrootd as sources
    except ImportError:
        return False
    for name in ("XRootDSource", "MultithreadedXRootDSource"):
        cls = getattr(sources, name, None)
        if cls is None:
            continue
        original = getattr(cls.__init__, "switchyard_original", cls.__init__)

        @functools.wraps(original)
        def __init__(self, file_path: str, _original=original, **options: Any) -> None:
            _in_order(file_path, router.candidates(file_path), lambda url: _original(self, url, **options))

        __init__.switchyard_original = original
        cls.__init__ = __init__
    return True
