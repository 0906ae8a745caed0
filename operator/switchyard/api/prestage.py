"""CachePrestage: warm a pool's caches with a dataset before an analysis, at a share of the WAN.

A kind of its own, not a field of the pool: a prestage has its own lifecycle (one per dataset or campaign,
made before an analysis and deleted after), its own progress and its own end, and several can queue
against one pool; on the pool, a list of URLs would clutter a long-lived spec, and every edit of it would
re-render the pool's caches.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from .base import CommonStatus, ImageRef, Model, ObjectRef, cel, rules

MAX_INLINE_URLS = 1000  # a CR must stay small (etcd's 1.5 MiB object limit, kubectl's view): more go in urlsFrom
# An XRootD URL, one token: no white space, so each line of a list is one URL and no URL can split into two.
XrootdUrl = Annotated[str, StringConstraints(min_length=9, max_length=2048,
                                             pattern=r"^(root|roots|xroot|xroots)://[^\s/]+/\S+$")]
ConfigMapName = Annotated[str, StringConstraints(min_length=1, max_length=253,
                                                 pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
ConfigMapKey = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]


class UrlsFrom(Model):
    """A ConfigMap key holding the dataset's URLs, one per line ('#' starts a comment line)."""

    config_map: ConfigMapName = Field(description="The ConfigMap, in the prestage's namespace.")
    key: ConfigMapKey = Field(description="Its key holding the list.")


class CachePrestageSpec(Model):
    """Desired state of a CachePrestage."""

    model_config = rules(
        cel("has(self.urls) != has(self.urlsFrom)", "exactly one of urls and urlsFrom must be set", ".urls"),
    )

    pool_ref: ObjectRef = Field(description="The XCachePool to warm, in the same namespace.")
    urls: list[XrootdUrl] | None = Field(
        default=None, min_length=1, max_length=MAX_INLINE_URLS,
        description=f"The files, as origin URLs (root://origin//path); at most {MAX_INLINE_URLS}, more go in "
                    "urlsFrom. Exclusive with urlsFrom.",
    )
    urls_from: UrlsFrom | None = Field(
        default=None, description="A ConfigMap key listing the files, one URL per line, for large datasets. "
                                  "Exclusive with urls.",
    )
    wan_share: float = Field(
        gt=0, le=1, description="The share of the facility's spec.network.wanGbps the prestage may read at, in "
                                "total (0 < wanShare <= 1): what it leaves is the analyses'.",
    )
    parallel: int = Field(default=4, ge=1, le=64, description="Files read at once (the pace is shared).")
    image: ImageRef | None = Field(
        default=None, description="Image of the prestage Job: it needs xrdcp, xrdfs and switchyard "
                                  "(switchyard's XCache image, images/xcache). Default: the pool's image.",
    )


class FileCounts(Model):
    """Files of the prestage, by state."""

    total: int = Field(default=0, description="Files listed (each URL once).")
    done: int = Field(default=0, description="Files read through their cache: cached now.")
    failed: int = Field(default=0, description="Files that could not be read from any cache of the ring.")
    remaining: int = Field(default=0, description="Files not read yet.")


class ByteCounts(Model):
    """Bytes of the prestage."""

    done: int = Field(default=0, description="Bytes of the files done.")
    remaining: int = Field(default=0, description="Bytes of the files not done whose size the runner has asked.")


class CachePrestageStatus(CommonStatus):
    """Observed state of a CachePrestage."""

    job: str = Field(default="", description="The Job that reads the files.")
    gbps: float = Field(default=0, description="The pace: wanShare x the facility's wanGbps.")
    ring_from: str = Field(default="", description="The WorkerFleet whose routing ConfigMap (the pool's ring as "
                                                   "its readers read it) the Job reads.")
    files: FileCounts = Field(default=FileCounts(), description="Files by state.")
    bytes: ByteCounts = Field(default=ByteCounts(), description="Bytes done and remaining.")
    failed_urls: list[str] = Field(default=[], max_length=5, description="A few of the failed files, with why.")
