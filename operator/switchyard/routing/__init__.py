"""Which cache serves a file: a worker's `root://` URLs turned into its cache's URLs.

Every worker of a fleet that reads through a pool is told, in its environment
(builders/workerfleet.py `cache_env`):

- `SWITCHYARD_ROUTING`: `local` or `hashed`;
- `SWITCHYARD_CACHE_ENDPOINT`: `root://host:port`, its switch's cache Service
  (local) or the pool-wide one;
- `SWITCHYARD_CACHE_ORIGIN_MODE`: the pool's `origin.mode`, `fixed` (default)
  or `forward`;
- in `hashed` routing, `SWITCHYARD_CACHE_RING_FILE` (a file of the fleet's
  routing ConfigMap, mounted as a directory: the ring changes without a pod
  restart) or, for clients outside Kubernetes, `SWITCHYARD_CACHE_RING`
  (the same ring inline), and `SWITCHYARD_HASH_RULE` (`rendezvous-sha256-v1`).

The ring, in the variable or the file: entries separated by commas or new
lines, each `[name@]root://host[:port]=weight`; in the file, lines starting
with `#` are comments. `name` is the cache's identity for the rule (the cache
host's node name), `host` where it is reached (its node's InternalIP, say
`sw1-c-0@root://10.0.0.5:1094=1.5`); without `name@` the host is the name.
The rule hashes the name, never the address, so a cache host whose address
changes keeps its files.

Readers outside Kubernetes (HTCondor jobs on batch nodes, with no credentials
and no mounted ConfigMap) are given `SWITCHYARD_ROUTING_URL` instead: a comma
list of the pool's cache hosts' exporters, `http://<InternalIP>:9933` each,
which serve the same ring text at `/routing/ring` and the hot list at
`/routing/hot` (observe/exporter.py; published while a facility's
spec.outsideReaders read through the pool). They are fetched again at most
every ROUTING_URL_RECHECK_SECONDS, from the first exporter that answers (the
one that answered last first): each cache host serves the whole pool's ring,
so any one that is up will do. No proxy is used (a batch node's `http_proxy`
would not reach, or would cache, the caches' own addresses). The first fetch
failing on every one, with no inline ring to fall back on, is a RoutingError;
after that a failed fetch keeps the last good ring and hot list, logged once.

When several are given the ring file wins, then the routing URL, then the
inline ring. The file is re-read when it changes (a stat of
its path at most every RING_RECHECK_SECONDS; the kubelet swaps the mounted
directory's `..data` symlink atomically, so the path names a new inode): each
read picks its caches from the ring of the moment it starts and keeps that
failover order to its end. A file missing, unreadable or malformed keeps the
last good ring (the variable's when the file never parsed) and is logged once.

Hot files: beside the ring file, the same ConfigMap's `hot` key (a file
`hot` in the ring file's directory; SWITCHYARD_CACHE_HOT_FILE names another)
lists the files many readers open, one `replicas path` per line (`#` starts
a comment line; `path` as the rule hashes it, below). The count comes first
and the path is the rest of the line, so no path needs quoting (the pool's
status forbids white space in it). Each reader reads such a file from one of
its first `replicas` caches, picked by the reader's identity and the path
(planner/hashing.py, steps 5-7), and keeps the ring's failover order past it.
The reader's identity is SWITCHYARD_READER, else HOSTNAME (in a pod, the
pod's name: unique among the fleet's workers and the same for the pod's whole
life, so each worker keeps its pick and the fleet's workers spread), else the
host's name. The file is re-read as the ring file is; missing (no hot file:
the ConfigMap has no `hot` key), unreadable or malformed, no file is hot,
which a read never fails on; a malformed one is logged once. Nothing in the
pod's template names it, so publishing a hot list restarts no worker.

`Router.from_env()` reads them; `Router.candidates(url)` is the ordered list
of URLs to read a file from: in `local` routing the switch's endpoint; in
`hashed` routing the ring's caches in the order of the planner's rule
(switchyard/planner/hashing.py): the file's home cache first, then the next
ones as failover. `Router.route(url)` is the first of them. The module's
`route(url)` and `candidates(url)` use one Router per process
(`process_router()`), built again only when a routing variable changes.

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

import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .rule import hashing

HASH_RULE = "rendezvous-sha256-v1"  # the rule of switchyard/planner/hashing.py, as workers are told it
ROUTING_ENV = "SWITCHYARD_ROUTING"
ENDPOINT_ENV = "SWITCHYARD_CACHE_ENDPOINT"
RING_ENV = "SWITCHYARD_CACHE_RING"
RING_FILE_ENV = "SWITCHYARD_CACHE_RING_FILE"
RING_RECHECK_SECONDS = 5.0  # how often a ring file's path is stat'ed, at most: the kubelet refreshes in ~1 minute
RULE_ENV = "SWITCHYARD_HASH_RULE"
RING_KEY = "ring"  # the ring's key in the routing ConfigMaps (the fleets', and beside a pool's client map)
HOT_KEY = "hot"  # the hot list's key in the routing ConfigMap, so its file beside the ring file
ROUTING_URL_ENV = "SWITCHYARD_ROUTING_URL"  # exporters serving the pool's routing (readers outside Kubernetes)
ROUTING_PATH = "/routing"  # where an exporter serves it: ROUTING_PATH/ring (RING_KEY's text), ROUTING_PATH/hot
ROUTING_URL_RECHECK_SECONDS = 30.0  # how often it is fetched again, at most: the kubelet refreshes in ~1 minute
ROUTING_URL_TIMEOUT_SECONDS = 3.0  # per exporter: one that does not answer is passed over quickly
HOT_FILE_ENV = "SWITCHYARD_CACHE_HOT_FILE"  # another place for it (a client outside Kubernetes)
READER_ENV = "SWITCHYARD_READER"  # the reader's identity for the hot-file rule; else HOSTNAME, the pod's name
ORIGIN_MODE_ENV = "SWITCHYARD_CACHE_ORIGIN_MODE"
SCHEMES = ("root", "roots", "xroot", "xroots")
_TLS_SCHEMES = ("roots", "xroots")
_EMBEDDED_URL = re.compile(r"^[a-z][a-z0-9+.-]*:/", re.IGNORECASE)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a node name (DNS subdomain)
log = logging.getLogger("switchyard.routing")


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


def ring_entry(name: str, address: str, weight: float, scheme: str = "root") -> str:
    """One entry of the ring as the operator writes it: `name@root://address=weight` (`address` is
    host:port, an IPv6 host in brackets); just `root://address=weight` when the name is the host."""
    prefix = "" if address.rsplit(":", 1)[0].strip("[]") == name else f"{name}@"
    return f"{prefix}{scheme}://{address}={weight:g}"


def parse_ring(value: str, source: str = RING_ENV, *, allow_empty: bool = False) -> tuple[Cache, ...]:
    """`[name@]root://host:port=weight,...` (SWITCHYARD_CACHE_RING, or a ring file: new lines separate
    too, `#` starts a comment line) → the caches, in the order given. `allow_empty`: a ring of no
    entry at all is () rather than an error (a ring file while the pool has no cache)."""
    caches: dict[str, Cache] = {}
    items = [i.strip() for line in value.splitlines() if not line.strip().startswith("#") for i in line.split(",")]
    for item in items:
        if not item:
            continue
        url, sep, weight_text = item.rpartition("=")
        if not sep:
            raise RoutingError(f"{source}: {item!r} has no '=weight' (expected [name@]root://host:port=weight,...)")
        name, at, rest = url.partition("@")
        if at and "://" not in name:
            url = rest
            if not _NAME.match(name):
                raise RoutingError(f"{source}: {name!r} in {item!r} is not a cache host's node name")
        else:
            name = ""
        _, host, address = _address(url, source)
        name = name or host
        try:
            weight = float(weight_text)
        except ValueError:
            raise RoutingError(f"{source}: the weight of {url!r} is {weight_text!r}, not a number") from None
        if not math.isfinite(weight) or weight < 0:
            raise RoutingError(f"{source}: the weight of {url!r} is {weight_text!r}; it must be a finite number >= 0")
        if name in caches:
            raise RoutingError(f"{source}: cache {name!r} is listed twice")
        caches[name] = Cache(name, address, weight)
    if allow_empty and not caches:
        return ()
    if not any(c.weight > 0 for c in caches.values()):
        raise RoutingError(f"{source}: {value!r} names no cache of weight > 0")
    return tuple(caches.values())


class MountedFile:
    """A file the kubelet refreshes (a ConfigMap key mounted as a directory), re-read when it changes.

    `current()` costs a clock read, and a stat at most every `recheck` seconds: the file is parsed
    again only when its path names another file (inode) or it was rewritten (mtime, size). A problem
    (unreadable, unparsable) is logged once per distinct problem; what the value becomes then is the
    subclass's (`_unusable`)."""

    def __init__(self, path: str, fallback=None, recheck: float = RING_RECHECK_SECONDS, clock=time.monotonic) -> None:
        self.path, self.recheck, self._clock = path, recheck, clock
        self._value, self._seen, self._checked, self._problem = fallback, None, None, ""
        self._lock = threading.Lock()
        self.current()

    def current(self):
        now = self._clock()
        if self._checked is not None and now - self._checked < self.recheck:
            return self._value
        with self._lock:
            if self._checked is None or now - self._checked >= self.recheck:
                self._checked = now
                self._refresh()
        return self._value

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
            seen = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            if seen == self._seen:
                return
            with open(self.path, encoding="utf-8") as f:
                value = self._parse(f.read())
        except (OSError, UnicodeDecodeError, RoutingError) as error:
            problem = f"{type(error).__name__}: {error}"
            self._unusable(error, problem, logged=problem == self._problem)
            self._problem = problem
            return
        if self._seen is not None and value != self._value:
            self._changed(value)
        self._value, self._seen, self._problem = value, seen, ""

    def _parse(self, text: str):
        raise NotImplementedError

    def _unusable(self, error: Exception, problem: str, logged: bool) -> None:
        raise NotImplementedError

    def _changed(self, value) -> None:
        pass


class RingFile(MountedFile):
    """The ring file: what it cannot read or parse keeps the last good ring (`fallback` until one parsed)."""

    def __init__(self, path: str, fallback: tuple[Cache, ...] = (), recheck: float = RING_RECHECK_SECONDS,
                 clock=time.monotonic) -> None:
        super().__init__(path, fallback, recheck, clock)

    def current(self) -> tuple[Cache, ...]:
        return super().current()

    def _parse(self, text: str) -> tuple[Cache, ...]:
        return parse_ring(text, f"{RING_FILE_ENV} {self.path}", allow_empty=True)

    def _unusable(self, error: Exception, problem: str, logged: bool) -> None:
        if not logged:
            kept = ",".join(c.name for c in self._value) or "none"
            log.warning("switchyard routing: cannot use the ring file %s (%s); keeping the last good ring (%s)",
                        self.path, problem, kept)

    def _changed(self, value: tuple[Cache, ...]) -> None:
        log.info("switchyard routing: the ring file %s changed: %s", self.path,
                 ",".join(f"{c.name}={c.weight:g}" for c in value) or "no cache")


def parse_hot(value: str, source: str = HOT_FILE_ENV) -> dict[str, int]:
    """A hot list (`replicas path` per line, `#` starts a comment line) → {path: replicas}.

    `replicas` is an integer >= 2, `path` the rest of the line: the file's path as the rule hashes it
    (file_path: one leading slash, no query), with no white space. Anything else is RoutingError."""
    hot: dict[str, int] = {}
    for number, line in enumerate(value.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        replicas, path = parts if len(parts) == 2 else ("", "")
        if not replicas.isdigit() or int(replicas) < 2 or not path.startswith("/"):
            raise RoutingError(f"{source}: line {number} {line!r} is not 'replicas path' (replicas >= 2, path /...)")
        if path in hot:
            raise RoutingError(f"{source}: {path!r} is listed twice")
        hot[path] = int(replicas)
    return hot


class HotFile(MountedFile):
    """The hot list's file: missing (the list is empty: the ConfigMap has no such key) or unusable, no
    hot file, so every file is read from the ring's order; a read never fails on it."""

    def __init__(self, path: str, recheck: float = RING_RECHECK_SECONDS, clock=time.monotonic) -> None:
        super().__init__(path, {}, recheck, clock)

    def current(self) -> dict[str, int]:
        return super().current()

    def _parse(self, text: str) -> dict[str, int]:
        return parse_hot(text, f"hot list {self.path}")

    def _unusable(self, error: Exception, problem: str, logged: bool) -> None:
        if isinstance(error, FileNotFoundError):  # the list is empty
            if self._value:
                log.info("switchyard routing: the hot list %s is gone: no hot file", self.path)
        elif not logged:
            log.warning("switchyard routing: cannot use the hot list %s (%s); no hot file until it parses",
                        self.path, problem)
        self._value, self._seen = {}, None

    def _changed(self, value: dict[str, int]) -> None:
        log.info("switchyard routing: the hot list %s changed: %d hot file(s)", self.path, len(value))


def routing_urls(value: str, source: str = ROUTING_URL_ENV) -> tuple[str, ...]:
    """`http://host:port[,http://host:port...]` (a bare `host:port` is http) -> the exporters' base URLs."""
    bases = []
    for item in (i.strip() for i in value.replace("\n", ",").split(",")):
        if not item:
            continue
        url = item if "://" in item else f"http://{item}"
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        except ValueError as error:
            raise RoutingError(f"{source}: {item!r} is not an http://host:port URL ({error})") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise RoutingError(f"{source}: {item!r} is not an http://host:port URL")
        bases.append(f"{parts.scheme.lower()}://{parts.netloc}{parts.path.rstrip('/')}")
    if not bases:
        raise RoutingError(f"{source}: {value!r} names no exporter (http://host:port, comma-separated)")
    return tuple(bases)


class NotPublished(OSError):
    """An exporter answered 404: its pool publishes no routing (or, for the hot list, lists no hot file)."""


def fetch_text(url: str, timeout: float = ROUTING_URL_TIMEOUT_SECONDS) -> str:
    """GET `url` directly (no proxy), as text; NotPublished for a 404, OSError for any other failure."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise NotPublished(f"{url}: 404 {error.reason}") from None
        raise OSError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, UnicodeDecodeError, ValueError) as error:
        raise OSError(f"{url}: {getattr(error, 'reason', error)}") from None


class PublishedRouting:
    """The pool's ring and hot list as its exporters serve them (SWITCHYARD_ROUTING_URL), fetched again
    at most every `recheck` seconds; a fetch failing on every exporter keeps the last good ones (the
    `fallback` ring until one answered), logged once per distinct problem."""

    def __init__(self, bases: tuple[str, ...], fallback: tuple[Cache, ...] = (),
                 recheck: float = ROUTING_URL_RECHECK_SECONDS, clock=time.monotonic, fetch=fetch_text) -> None:
        self.bases, self.recheck, self._clock, self._fetch = bases, recheck, clock, fetch
        self._ring, self._hot = fallback, {}
        self._first, self._checked, self._problem, self._hot_problem = 0, None, "", ""
        self.answered = False  # whether any exporter has answered yet
        self._lock = threading.Lock()
        self._current()

    @property
    def problem(self) -> str:
        return self._problem

    def ring(self) -> tuple[Cache, ...]:
        return self._current()[0]

    def hot(self) -> dict[str, int]:
        return self._current()[1]

    def _current(self) -> tuple[tuple[Cache, ...], dict[str, int]]:
        now = self._clock()
        if self._checked is None or now - self._checked >= self.recheck:
            with self._lock:
                if self._checked is None or now - self._checked >= self.recheck:
                    self._checked = now
                    self._refresh()
        return self._ring, self._hot

    def _refresh(self) -> None:
        problems = []
        order = self.bases[self._first:] + self.bases[:self._first]
        for base in order:
            try:
                ring = parse_ring(self._fetch(base + ROUTING_PATH + "/" + RING_KEY), f"{ROUTING_URL_ENV} {base}",
                                  allow_empty=True)
            except (OSError, RoutingError) as error:
                problems.append(str(error))
                continue
            self._first = self.bases.index(base)
            self._use(ring, self._hot_list(base))
            return
        problem = "; ".join(problems)
        if problem != self._problem:
            kept = ",".join(c.name for c in self._ring) or "none"
            log.warning("switchyard routing: no exporter of %s answered (%s); keeping the last good ring (%s)",
                        ROUTING_URL_ENV, problem, kept)
        self._problem = problem

    def _hot_list(self, base: str) -> dict[str, int]:
        """The hot list of the exporter whose ring was just read (one ConfigMap's two keys); none when it
        lists none, or cannot be read or parsed (a read never fails on it)."""
        try:
            hot = parse_hot(self._fetch(base + ROUTING_PATH + "/" + HOT_KEY), f"hot list {base}")
        except NotPublished:
            hot = {}
        except (OSError, RoutingError) as error:
            if str(error) != self._hot_problem:
                log.warning("switchyard routing: cannot use the hot list of %s (%s); no hot file until it parses",
                            base, error)
            self._hot_problem = str(error)
            return {}
        self._hot_problem = ""
        return hot

    def _use(self, ring: tuple[Cache, ...], hot: dict[str, int]) -> None:
        if self.answered and (ring, hot) != (self._ring, self._hot):
            log.info("switchyard routing: the published routing changed: %s; %d hot file(s)",
                     ",".join(f"{c.name}={c.weight:g}" for c in ring) or "no cache", len(hot))
        self._ring, self._hot, self._problem, self.answered = ring, hot, "", True


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
    ring_file: RingFile | None = field(default=None, compare=False)  # when set, its current ring wins over `ring`
    hot_file: HotFile | None = field(default=None, compare=False)  # the hot list: {path: replicas}
    published: PublishedRouting | None = field(default=None, compare=False)  # SWITCHYARD_ROUTING_URL's ring and hot list
    reader: str = ""  # who reads, for the hot-file rule (READER_ENV)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Router":
        """The worker's routing, from SWITCHYARD_* variables; RoutingError names what is malformed."""
        env = os.environ if environ is None else environ
        routing = (env.get(ROUTING_ENV) or "").strip() or None
        endpoint = (env.get(ENDPOINT_ENV) or "").strip() or None
        ring_text = (env.get(RING_ENV) or "").strip()
        ring_path = (env.get(RING_FILE_ENV) or "").strip()
        routing_url = (env.get(ROUTING_URL_ENV) or "").strip()
        rule = (env.get(RULE_ENV) or "").strip()
        origin_mode = (env.get(ORIGIN_MODE_ENV) or "").strip() or "fixed"
        if routing is None and endpoint is None and not ring_text and not ring_path and not routing_url:
            return cls()
        if routing is None:
            routing = "hashed" if ring_text or ring_path or routing_url else "local"
        if routing not in ("local", "hashed"):
            raise RoutingError(f"{ROUTING_ENV}: {routing!r} is not 'local' or 'hashed'")
        if origin_mode not in ("fixed", "forward"):
            raise RoutingError(f"{ORIGIN_MODE_ENV}: {origin_mode!r} is not 'fixed' or 'forward'")
        if endpoint is not None:
            scheme, _, address = _address(endpoint, ENDPOINT_ENV)
            endpoint = f"{scheme}://{address}"
        ring: tuple[Cache, ...] = ()
        ring_file = hot_file = published = None
        if routing == "hashed" and (ring_text or ring_path or routing_url):
            if rule and rule != HASH_RULE:
                raise RoutingError(f"{RULE_ENV}: {rule!r} is a rule this client does not know (it applies {HASH_RULE})")
            ring = parse_ring(ring_text) if ring_text else ()
            ring_file = RingFile(ring_path, ring) if ring_path else None
            if routing_url and ring_file is None:
                published = PublishedRouting(routing_urls(routing_url), ring)
                if not published.answered and not ring:
                    raise RoutingError(f"{ROUTING_URL_ENV}: no exporter answered ({published.problem})")
            hot_path = (env.get(HOT_FILE_ENV) or "").strip() or (os.path.join(os.path.dirname(ring_path), HOT_KEY)
                                                                  if ring_path else "")
            hot_file = HotFile(hot_path) if hot_path else None
        if endpoint is None and not ring and ring_file is None and published is None:
            needs = ENDPOINT_ENV if routing == "local" else \
                f"{RING_FILE_ENV}, {ROUTING_URL_ENV}, {RING_ENV} or {ENDPOINT_ENV}"
            raise RoutingError(f"{ROUTING_ENV} is {routing!r} but {needs} is not set")
        reader = (env.get(READER_ENV) or env.get("HOSTNAME") or "").strip() or socket.gethostname()
        return cls(routing, endpoint, ring, origin_mode, ring_file, hot_file, published, reader)

    @property
    def active(self) -> bool:
        return self.routing is not None

    def current_ring(self) -> tuple[Cache, ...]:
        """The ring of this moment: the ring file's when there is one, else the published one, else the
        environment's."""
        if self.ring_file is not None:
            return self.ring_file.current()
        return self.published.ring() if self.published is not None else self.ring

    def hot_list(self) -> dict[str, int]:
        """The hot list of this moment: its file's, else the published one; none without either."""
        if self.hot_file is not None:
            return self.hot_file.current()
        return self.published.hot() if self.published is not None else {}

    def caches(self, path: str) -> list[str]:
        """host[:port] of the caches to read `path` from, in order (the rule's, in hashed routing; for a
        file of the hot list, this reader's order of it).

        The rule hashes each cache's name (its node name), the list holds their addresses."""
        ring = self.current_ring() if self.routing == "hashed" else ()
        if any(c.weight > 0 for c in ring):
            weights = {c.name: c.weight for c in ring}
            addresses = {c.name: c.address for c in ring}
            rule = hashing()
            replicas = self.hot_list().get(path, 0)
            order = rule.hot_order(path, weights, self.reader, replicas) if replicas else rule.order(path, weights)
            return [addresses[name] for name in order]
        return [self.endpoint.split("://", 1)[1]] if self.endpoint else []

    def candidates(self, url: str) -> list[str]:
        """The URLs to read `url` from, best first; [url] itself when it is not routed."""
        path = file_path(url) if self.active else None
        addresses = self.caches(path) if path is not None else []
        if not addresses:
            return [url]
        parts = urlsplit(url)
        scheme = "roots" if parts.scheme.lower() in _TLS_SCHEMES else (self.endpoint or "root://").split("://")[0]
        user = parts.netloc.rpartition("@")[0]
        tail = path[1:] + (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")
        if self.origin_mode == "forward":
            tail = f"{parts.scheme}://{parts.netloc}//{tail}"
        return [f"{scheme}://{user + '@' if user else ''}{address}//{tail}" for address in addresses]

    def route(self, url: str) -> str:
        """The URL of the cache that should serve `url` (`url` itself when it is not routed)."""
        return self.candidates(url)[0]


# What Router.from_env reads: the process's Router is built again when one of them changes.
_ROUTING_VARIABLES = (ROUTING_ENV, ENDPOINT_ENV, RING_ENV, RING_FILE_ENV, ROUTING_URL_ENV, RULE_ENV, ORIGIN_MODE_ENV,
                      HOT_FILE_ENV, READER_ENV, "HOSTNAME")
_process_router: tuple[tuple[str | None, ...], Router] | None = None
_process_router_lock = threading.Lock()


def process_router() -> Router:
    """This process's Router, built from os.environ on first use and kept (its ring file, or the exporters'
    ring, is re-read on its own schedule), so route(url) in a loop does not fetch the published routing or
    stat the ring file anew per call; built again when a routing variable has changed. One at a time: the
    first build may wait on exporters, and concurrent first callers share it. A build that fails is not kept."""
    global _process_router
    seen = tuple(os.environ.get(name) for name in _ROUTING_VARIABLES)
    with _process_router_lock:
        if _process_router is None or _process_router[0] != seen:
            _process_router = (seen, Router.from_env())
        return _process_router[1]


def _router(environ: Mapping[str, str] | None) -> Router:
    return process_router() if environ is None else Router.from_env(environ)


def route(url: str, environ: Mapping[str, str] | None = None) -> str:
    """`url` rewritten for the worker whose environment is `environ` (default: this process's, whose Router is
    kept: process_router)."""
    return _router(environ).route(url)


def candidates(url: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The URLs to read `url` from, best first (Router.candidates), for `environ` as route() takes it."""
    return _router(environ).candidates(url)


__all__ = ["HASH_RULE", "HOT_KEY", "RING_KEY", "ROUTING_PATH", "ROUTING_URL_ENV", "Cache", "HotFile", "PublishedRouting", "RingFile",
           "Router", "RoutingError", "candidates", "file_path", "parse_hot", "parse_ring", "process_router", "ring_entry", "route",
           "routing_urls"]
