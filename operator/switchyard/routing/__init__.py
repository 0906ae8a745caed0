"""Which cache serves a file: a worker's `root://` URLs turned into its cache's URLs.

Every worker of a fleet that reads through a pool is told, in its environment
(builders/workerfleet.py `cache_env`):

- `SWITCHYARD_ROUTING`: `local` or `hashed`;
- `SWITCHYARD_CACHE_ENDPOINT`: `root://host:port`, its switch's cache Service
  (local) or the pool-wide one;
- `SWITCHYARD_CACHE_ORIGIN_MODE`: the pool's `origin.mode`, `fixed` (default)
  or `forward`;
- in `hashed` routing, `SWITCHYARD_CACHE_RING` (`root://host:port=weight,...`,
  the pool's cache hosts with the weights the planner publishes) and
  `SWITCHYARD_HASH_RULE` (`rendezvous-sha256-v1`).

`Router.from_env()` reads them; `Router.candidates(url)` is the ordered list
of URLs to read a file from: in `local` routing the switch's endpoint; in
`hashed` routing the ring's caches in the order of the planner's rule
(switchyard/planner/hashing.py): the file's home cache first, then the next
ones as failover. `Router.route(url)` is the first of them.

What is hashed is the file's path as the server sees it: the URL's path with
one leading slash, without `?query`: `root://origin//store/a.root` and
`root://origin:1094/store/a.root` both hash `/store/a.root`. A pool in
`fixed` origin mode reads every miss from its configured origin, so the
origin's host is dropped (`root://cache:1094//store/a.root`); a pool of
forwarding proxies (`forward`) is given the origin's URL as the path
(`root://cache:1094//root://origin:1094//store/a.root`). The query is kept
(tokens travel there).

Left as they are: URLs that are not XRootD URLs (local paths, `s3://`,
`https://`), forwarding-proxy URLs (`root://cache//root://origin//path`), and
every URL when the environment names no routing (a worker of a fleet without
a pool). This package imports neither kopf nor the Kubernetes client: it runs
in worker images.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .rule import hashing

HASH_RULE = "rendezvous-sha256-v1"  # the rule of switchyard/planner/hashing.py, as workers are told it
ROUTING_ENV = "SWITCHYARD_ROUTING"
ENDPOINT_ENV = "SWITCHYARD_CACHE_ENDPOINT"
RING_ENV = "SWITCHYARD_CACHE_RING"
RULE_ENV = "SWITCHYARD_HASH_RULE"
ORIGIN_MODE_ENV = "SWITCHYARD_CACHE_ORIGIN_MODE"
SCHEMES = ("root", "roots", "xroot", "xroots")
_TLS_SCHEMES = ("roots", "xroots")
_EMBEDDED_URL = re.compile(r"^[a-z][a-z0-9+.-]*:/", re.IGNORECASE)


class RoutingError(ValueError):
    """The routing environment cannot be applied; the message names the variable and what is wrong."""


@dataclass(frozen=True)
class Cache:
    """One cache of the ring: its name for the rule (the host's node name) and its address."""

    name: str
    address: str  # host[:port], as in the ring's URL
    weight: float


def _address(value: str, variable: str) -> tuple[str, str, str]:
    """(scheme, host name, host[:port]) of a `root://host[:port]` value, or RoutingError."""
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as error:
        raise RoutingError(f"{variable}: {value!r} is not a root://host:port URL ({error})") from None
    if parts.scheme.lower() not in SCHEMES or not host or parts.path.strip("/") or parts.query:
        raise RoutingError(f"{variable}: {value!r} is not a root://host[:port] URL")
    return parts.scheme.lower(), host, parts.netloc.rsplit("@", 1)[-1]


def parse_ring(value: str) -> tuple[Cache, ...]:
    """`root://host:port=weight,...` (SWITCHYARD_CACHE_RING) → the caches, in the order given."""
    caches: dict[str, Cache] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        url, sep, weight_text = item.rpartition("=")
        if not sep:
            raise RoutingError(f"{RING_ENV}: {item!r} has no '=weight' (expected root://host:port=weight,...)")
        _, host, address = _address(url, RING_ENV)
        try:
            weight = float(weight_text)
        except ValueError:
            raise RoutingError(f"{RING_ENV}: the weight of {url!r} is {weight_text!r}, not a number") from None
        if not math.isfinite(weight) or weight < 0:
            raise RoutingError(f"{RING_ENV}: the weight of {url!r} is {weight_text!r}; it must be a finite number >= 0")
        if host in caches:
            raise RoutingError(f"{RING_ENV}: cache {host!r} is listed twice")
        caches[host] = Cache(host, address, weight)
    if not any(c.weight > 0 for c in caches.values()):
        raise RoutingError(f"{RING_ENV}: {value!r} names no cache of weight > 0")
    return tuple(caches.values())


def file_path(url: str) -> str | None:
    """The path a routed URL reads and the rule hashes, or None for a URL that is not routed."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in SCHEMES or not parts.netloc:
        return None
    path = parts.path.lstrip("/")
    if not path or _EMBEDDED_URL.match(path):
        return None
    return "/" + path


@dataclass(frozen=True)
class Router:
    """How one worker reads: `routing` None (no pool: URLs stay), "local" or "hashed"."""

    routing: str | None = None
    endpoint: str | None = None  # root://host:port
    ring: tuple[Cache, ...] = field(default=())
    origin_mode: str = "fixed"  # the pool's origin.mode: "forward" puts the origin's URL in the path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Router":
        """The worker's routing, from SWITCHYARD_* variables; RoutingError names what is malformed."""
        env = os.environ if environ is None else environ
        routing = (env.get(ROUTING_ENV) or "").strip() or None
        endpoint = (env.get(ENDPOINT_ENV) or "").strip() or None
        ring_text = (env.get(RING_ENV) or "").strip()
        rule = (env.get(RULE_ENV) or "").strip()
        origin_mode = (env.get(ORIGIN_MODE_ENV) or "").strip() or "fixed"
        if routing is None and endpoint is None and not ring_text:
            return cls()
        if routing is None:
            routing = "hashed" if ring_text else "local"
        if routing not in ("local", "hashed"):
            raise RoutingError(f"{ROUTING_ENV}: {routing!r} is not 'local' or 'hashed'")
        if origin_mode not in ("fixed", "forward"):
            raise RoutingError(f"{ORIGIN_MODE_ENV}: {origin_mode!r} is not 'fixed' or 'forward'")
        if endpoint is not None:
            scheme, _, address = _address(endpoint, ENDPOINT_ENV)
            endpoint = f"{scheme}://{address}"
        ring: tuple[Cache, ...] = ()
        if routing == "hashed" and ring_text:
            if rule and rule != HASH_RULE:
                raise RoutingError(f"{RULE_ENV}: {rule!r} is a rule this client does not know (it applies {HASH_RULE})")
            ring = parse_ring(ring_text)
        if endpoint is None and not ring:
            needs = ENDPOINT_ENV if routing == "local" else f"{RING_ENV} or {ENDPOINT_ENV}"
            raise RoutingError(f"{ROUTING_ENV} is {routing!r} but {needs} is not set")
        return cls(routing, endpoint, ring, origin_mode)

    @property
    def active(self) -> bool:
        return self.routing is not None

    def caches(self, path: str) -> list[str]:
        """host[:port] of the caches to read `path` from, in order (the rule's, in hashed routing)."""
        if self.routing == "hashed" and self.ring:
            weights = {c.name: c.weight for c in self.ring}
            addresses = {c.name: c.address for c in self.ring}
            return [addresses[name] for name in hashing().order(path, weights)]
        assert self.endpoint is not None
        return [self.endpoint.split("://", 1)[1]]

    def candidates(self, url: str) -> list[str]:
        """The URLs to read `url` from, best first; [url] itself when it is not routed."""
        path = file_path(url) if self.active else None
        if path is None:
            return [url]
        parts = urlsplit(url)
        scheme = "roots" if parts.scheme.lower() in _TLS_SCHEMES else (self.endpoint or "root://").split("://")[0]
        user = parts.netloc.rpartition("@")[0]
        tail = path[1:] + (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")
        if self.origin_mode == "forward":
            tail = f"{parts.scheme}://{parts.netloc}//{tail}"
        return [f"{scheme}://{user + '@' if user else ''}{address}//{tail}" for address in self.caches(path)]

    def route(self, url: str) -> str:
        """The URL of the cache that should serve `url` (`url` itself when it is not routed)."""
        return self.candidates(url)[0]


def route(url: str, environ: Mapping[str, str] | None = None) -> str:
    """`url` rewritten for the worker whose environment is `environ` (default: this process's)."""
    return Router.from_env(environ).route(url)


def candidates(url: str, environ: Mapping[str, str] | None = None) -> list[str]:
    return Router.from_env(environ).candidates(url)


__all__ = ["HASH_RULE", "Cache", "Router", "RoutingError", "candidates", "file_path", "parse_ring", "route"]
