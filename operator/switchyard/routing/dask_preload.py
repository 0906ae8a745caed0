"""Dask worker preload (and plugin) that routes the worker's reads through its caches.

A WorkerFleet's Dask workers start with `--preload` (builders/workerfleet.py
`ROUTING_PRELOAD`), which imports this module when the image has switchyard
and calls `dask_setup`: from then on every `root://` read made through fsspec
or uproot in that worker goes to the cache its environment names
(switchyard.routing.hooks). A cluster started some other way can do the
same with `client.register_plugin(RoutingPlugin())`.
"""

from __future__ import annotations

import logging

from . import RoutingError
from .hooks import install

log = logging.getLogger("distributed.switchyard")  # shown in the worker log as distributed configures it


def setup() -> list[str]:
    """install(), logged: a malformed environment leaves reads unrouted and says why, once."""
    try:
        hooked = install()
    except RoutingError as error:
        log.error("switchyard routing is off: %s", error)
        return []
    if hooked:
        log.info("switchyard routing: root:// reads through %s go to the planned caches", " and ".join(hooked))
    return hooked


def dask_setup(worker=None) -> None:  # noqa: ARG001 - the preload interface passes the worker
    setup()


try:
    from distributed import WorkerPlugin
except ImportError:  # pragma: no cover - a process without distributed only uses setup()
    WorkerPlugin = object


class RoutingPlugin(WorkerPlugin):
    """The preload as a worker plugin, for clusters whose command line switchyard does not write."""

    name = "switchyard-routing"

    def setup(self, worker=None) -> None:  # noqa: ARG002
        setup()
