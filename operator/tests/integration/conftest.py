"""Shared fixtures for integration tests with real components.

xrootd fixtures: `xrootd_account` (who daemons run as), `xrd_base` (a fresh
directory those daemons can use, removed afterwards), `tmpfs_disks` (a factory
of small real filesystems, unmounted afterwards). See xrootd_fixtures.py.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from xrootd_fixtures import Account, TmpfsUnavailable, mount_tmpfs, require, unmount, workspace


@pytest.fixture
def xrootd_account() -> Account:
    require("xrootd", "xrdcp")
    return Account.for_daemons()


@pytest.fixture
def xrd_base(xrootd_account: Account) -> Iterator[Path]:
    base = workspace(xrootd_account)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def tmpfs_disks(xrd_base: Path, xrootd_account: Account) -> Iterator[Callable[[int, int], list[Path]]]:
    """make(count, size_mib) → paths of `count` fresh tmpfs mounts of `size_mib` each."""
    mounted: list[Path] = []

    def make(count: int, size_mib: int) -> list[Path]:
        paths = []
        for _ in range(count):
            path = xrd_base / f"disk{len(mounted)}"
            try:
                mount_tmpfs(path, size_mib, xrootd_account)
            except TmpfsUnavailable as error:
                message = f"cannot mount tmpfs disks for the cache ({error}); run as root"
                pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
            mounted.append(path)
            paths.append(path)
        return paths

    yield make
    for path in reversed(mounted):
        unmount(path)
