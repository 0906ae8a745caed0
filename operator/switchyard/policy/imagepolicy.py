"""The optional image allowlist: which container images switchyard may run.

An admin sets `SWITCHYARD_ALLOWED_IMAGES` (the chart's `images.allowed`) to a
comma-separated list of entries. An entry with a glob character (`*`, `?`,
`[`) is a pattern matched against the whole image reference; any other entry
is a prefix (end a registry or organisation prefix with `/`, a repository with
`:` or `@`, or it also admits look-alikes: `ghcr.io/site` admits
`ghcr.io/site-evil/x`). Unset or empty: every image is allowed.

Docker Hub's short names are matched in both spellings, so the entry
`opensciencegrid/xcache:` admits `docker.io/opensciencegrid/xcache:23` and
`docker.io/library/` admits `python:3.12`. A reference whose first component
is a registry (`docker.io/ghcr.io/x`) is never shortened, so it cannot pose as
an image of that registry.

Pure: the operator reads the policy once with its settings (settings.py), and
the desired-state functions ask `refusal(images, policy)` before any child write.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .. import conditions as cond
from ..api import reasons

ENV = "SWITCHYARD_ALLOWED_IMAGES"
REASON = reasons.IMAGE_NOT_ALLOWED
DOCKER_HUB = "docker.io"
_GLOB = frozenset("*?[")


def _is_registry(component: str) -> bool:
    return "." in component or ":" in component or component == "localhost"


def spellings(image: str) -> tuple[str, ...]:
    """The image as written, fully qualified, and in Docker Hub's short form (deduplicated, in that order)."""
    first, _, rest = image.partition("/")
    if rest and _is_registry(first):
        full = image
    else:
        full = f"{DOCKER_HUB}/{image}" if rest else f"{DOCKER_HUB}/library/{image}"
    short = full
    if full.startswith(DOCKER_HUB + "/"):
        path = full[len(DOCKER_HUB) + 1:]
        head, _, tail = path.partition("/")
        if not _is_registry(head):  # docker.io/ghcr.io/x keeps its registry
            short = tail if head == "library" and "/" not in tail else path
    return tuple(dict.fromkeys((image, full, short)))


@dataclass(frozen=True)
class ImagePolicy:
    """Allowed image prefixes and patterns; no entries means every image is allowed."""

    entries: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> "ImagePolicy":
        return cls(tuple(sorted({e.strip() for e in (text or "").split(",") if e.strip()})))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> "ImagePolicy":
        return cls.parse(environ.get(ENV))

    @property
    def enabled(self) -> bool:
        return bool(self.entries)

    def allows(self, image: str) -> bool:
        if not self.entries:
            return True
        names = spellings(image)
        for entry in self.entries:
            if _GLOB & set(entry):
                if any(fnmatch.fnmatchcase(name, entry) for name in names):
                    return True
            elif any(name.startswith(entry) for name in names):
                return True
        return False

    def disallowed_images(self, images: Iterable[str]) -> list[str]:
        """The images this policy refuses, sorted and without duplicates."""
        return sorted({image for image in images if image and not self.allows(image)})


def explain(disallowed: list[str], policy: ImagePolicy) -> str:
    allowed = ", ".join(policy.entries)
    return (f"image{'s' if len(disallowed) > 1 else ''} {', '.join(disallowed)} not allowed by the operator's "
            f"image allowlist ({ENV}: {allowed}); nothing was created or changed")


def refusal(images: Iterable[str], policy: ImagePolicy) -> dict[str, cond.State] | None:
    """Conditions for an object that asks for a disallowed image (Ready=False, ImageNotAllowed), else None."""
    blocked = policy.disallowed_images(images)
    if not blocked:
        return None
    return cond.failed(REASON, explain(blocked, policy))
