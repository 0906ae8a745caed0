"""`python3 -m switchyard.routing.check`: can this image route its root:// reads? One line, always exit 0.

A fleet's `routing-check` init container runs this in the WORKER's image, after
`routing-copy` put switchyard.routing on its PYTHONPATH (routing/bundle.py).
It imports what the hooks need (switchyard.routing.hooks) to reach the reads:

- the operator's routing client itself, and its rule file (it must run on the
  image's Python);
- the XRootD Python bindings (`XRootD.client`): without them nothing in the
  image reads root:// at all;
- fsspec-xrootd (`fsspec_xrootd`): the `root` filesystem the hooks replace,
  which uproot's default source, coffea and `fsspec.open` read through;
- uproot, reported when installed (its own XRootD sources are hooked too), not
  needed, and not imported: numpy and awkward would cost a small worker's check
  more memory than the rest.

The verdict goes to stdout and to /dev/termination-log, where the operator
reads it from the pod's status (desired/workerfleet.py `routing_verdict`):

    RoutingReady: Python 3.12.7 reads root:// through the caches with <what it found>
    RoutingUnavailable: Python 3.12.7 lacks <what>, <what> (<the import errors>); reads go to the origin

It exits 0 either way: a worker that cannot route still starts and reads from
the origin, as it would without switchyard, and the fleet's status says so.
Standard library only until it imports what it checks.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import sys
from collections.abc import Sequence
from typing import NamedTuple

READY = "RoutingReady"
UNAVAILABLE = "RoutingUnavailable"
TERMINATION_LOG = "/dev/termination-log"
MESSAGE_LIMIT = 4096  # the kubelet keeps at most this much of a termination message
# (module, what it is called in a verdict): each is needed to route.
NEEDED = (("XRootD.client", "the XRootD Python bindings (XRootD.client)"), ("fsspec_xrootd", "fsspec-xrootd"))
OPTIONAL = (("uproot", "uproot"),)


class Verdict(NamedTuple):
    routes: bool
    detail: str  # what the check found or lacks, after the marker


def _imports(module: str) -> str:
    """'' when `module` imports, else why not (one line)."""
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - a broken binding raises OSError, an old one AttributeError...
        return f"{type(error).__name__}: {error}".splitlines()[0]
    return ""


def _client() -> str:
    """'' when the operator's routing client and its rule load on this Python, else why not."""
    try:
        from . import hooks  # noqa: F401
        from .rule import hashing

        hashing().order("/probe", {"a": 1.0})
    except Exception as error:  # noqa: BLE001
        return f"{type(error).__name__}: {error}".splitlines()[0]
    return ""


def _present(module: str) -> bool:
    """Whether `module` is installed, without importing it (uproot would bring numpy and awkward: memory a
    small worker's check may not have)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def verdict() -> str:
    """This process's verdict line."""
    python = f"Python {platform.python_version()}"
    lacks, errors, found = [], [], []
    if error := _client():
        lacks.append("a switchyard.routing that runs on it")
        errors.append(error)
    for module, what in NEEDED:
        if error := _imports(module):
            lacks.append(what)
            errors.append(error)
        else:
            found.append(what)
    found += [what for module, what in OPTIONAL if _present(module)]
    if lacks:
        return f"{UNAVAILABLE}: {python} lacks {', '.join(lacks)} ({'; '.join(errors)}); reads go to the origin"
    return f"{READY}: {python} reads root:// through the caches with {', '.join(found)}"


def parse(message: str) -> Verdict | None:
    """The verdict a termination message of `verdict` holds (None: another message)."""
    marker, sep, detail = (message or "").strip().partition(": ")
    if not sep or marker not in (READY, UNAVAILABLE):
        return None
    return Verdict(marker == READY, detail.strip())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    termination_log = args[args.index("--termination-log") + 1] if "--termination-log" in args[:-1] else TERMINATION_LOG
    line = verdict()
    print(line, flush=True)
    try:
        with open(termination_log, "w", encoding="utf-8") as f:
            f.write(line[:MESSAGE_LIMIT])
    except OSError:
        pass  # outside a pod: stdout is enough
    return 0


if __name__ == "__main__":
    sys.exit(main())
