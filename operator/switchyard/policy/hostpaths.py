"""The host-path allowlist: where on a node a cache pool may put its disks.

A pool's data and metadata paths become `hostPath` volumes of a privileged
namespace's pods and lines of the xrootd config, so whoever may write an
`XCachePool` or `AnalysisFacility` could otherwise mount `/etc` or
`/var/lib/kubelet/pods`. Which node directories hold cache disks is the site
admin's decision: `SWITCHYARD_ALLOWED_HOST_PATHS` (the chart's
`cache.allowedHostPaths`) lists directory prefixes, comma-separated; unset, it
is `/mnt/,/data/,/srv/`. A path is allowed when it lies strictly below one of
them. The schema already refuses paths that are not normalised ('..', '.',
'//', a trailing '/'); the check here normalises again, so it holds for
objects stored before that rule too.

Pure: the operator reads the policy once with its settings (settings.py), and
the desired-state functions ask `refusal(paths, policy)` before any child write.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .. import conditions as cond
from ..api import reasons

ENV = "SWITCHYARD_ALLOWED_HOST_PATHS"
DEFAULT_PREFIXES = ("/mnt/", "/data/", "/srv/")
REASON = reasons.HOST_PATH_NOT_ALLOWED


def _as_prefix(entry: str) -> str | None:
    """An allowlist entry as a normalised directory prefix ending in '/', or None if it is not absolute."""
    entry = entry.strip()
    if not entry.startswith("/"):
        return None
    normal = posixpath.normpath(entry)
    return None if normal == "/" else normal + "/"


def is_normalised(path: str) -> bool:
    """Absolute, and written the one way the kernel would resolve it (symlinks aside)."""
    return path.startswith("/") and not path.startswith("//") and posixpath.normpath(path) == path


@dataclass(frozen=True)
class HostPathPolicy:
    """Directory prefixes below which cache disks may live."""

    prefixes: tuple[str, ...] = DEFAULT_PREFIXES

    @classmethod
    def parse(cls, text: str | None) -> "HostPathPolicy":
        """Entries separated by commas; unset means the defaults. The root '/' is never a prefix."""
        if text is None:
            return cls()
        found = {p for p in (_as_prefix(e) for e in text.split(",")) if p}
        return cls(tuple(sorted(found)))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> "HostPathPolicy":
        return cls.parse(environ.get(ENV))

    def allows(self, path: str) -> bool:
        return is_normalised(path) and any(path.startswith(prefix) for prefix in self.prefixes)

    def disallowed(self, paths: Iterable[str]) -> list[str]:
        return sorted({p for p in paths if not self.allows(p)})


def refusal(paths: Iterable[str], policy: HostPathPolicy) -> dict[str, cond.State] | None:
    """Conditions for disks outside the allowlist (Ready=False, HostPathNotAllowed), else None."""
    blocked = policy.disallowed(paths)
    if not blocked:
        return None
    allowed = ", ".join(policy.prefixes) or "none"
    return cond.failed(REASON, f"host path{'s' if len(blocked) > 1 else ''} {', '.join(blocked)} not below a "
                               f"directory the site admin allows for cache disks ({ENV}: {allowed}); nothing "
                               "was created or changed")


def pool_paths(storage) -> list[str]:
    """Every node path a pool's storage section mounts."""
    return [storage.meta_path, *storage.data_paths]
