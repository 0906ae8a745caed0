"""`switchyard prepare-cache`: the cache pod's `prepare` init container.

It runs before xrootd, from the operator image, as root with one capability
(CAP_CHOWN), and does two things:

1. **Disks that are really there.** Each `--disk` (the pool's meta and data
   paths) must be a filesystem of its own, not a directory on the node's root
   disk: an NVMe that failed, was never mounted or has a typo'd mount would
   otherwise let the cache fill the node's `/` and take the node down. In the
   container, the hostPath volume at that path is a bind mount; its line in
   /proc/self/mountinfo carries in field 4 ("root") the path of the mounted
   directory *within its filesystem*. A disk mounted at the node path (or a
   directory of one, bind-mounted there) has a root of its own ("/",
   "/xcache", ...); a plain directory on the node's root filesystem has the
   node path itself as its root. Every path of that kind is named in
   /dev/termination-log (`DiskNotMounted <path>: ...`, which the operator
   reads from the pod status) and the container exits 3, having created and
   changed nothing. `--allow-root-disk` (the pool's `storage.allowRootDisk`)
   skips the check for a site that caches on its root disk on purpose.

   What the check cannot tell: a path on a separate system partition (say
   `/var`) counts as mounted, and so does a node path that is a symlink into
   another directory; the admin's host-path allowlist
   (SWITCHYARD_ALLOWED_HOST_PATHS) is the guard for where pools may point.

2. **Directories for the xrootd user.** Each `--dir` is created (mode 0755,
   missing parents too) and handed to `--uid`:`--gid`, the user the pod runs
   xrootd as; one that belonged to another user is handed over with its
   contents (the xrootd uid changed: the cache keeps its files). Symlinks are
   never followed. Directories are made as root inside root-owned mount
   points, so CAP_CHOWN is the only privilege it needs (no DAC_OVERRIDE, no
   FOWNER).

No shell, no subprocess: a few system calls, from arguments the operator built.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MARKER = "DiskNotMounted"
NOT_MOUNTED_EXIT = 3
FAILED_EXIT = 1
TERMINATION_LOG = "/dev/termination-log"
MOUNTINFO = "/proc/self/mountinfo"
MESSAGE_LIMIT = 4096  # the kubelet keeps at most this much of a termination message


@dataclass(frozen=True)
class Mount:
    """One line of /proc/<pid>/mountinfo (proc(5)): the fields this module uses."""

    mount_id: int
    root: str         # field 4: the directory of the filesystem mounted here
    mount_point: str  # field 5: where, in this mount namespace
    fs_type: str
    source: str


def _unescape(field: str) -> str:
    # The kernel writes space, tab, newline and backslash in paths as octal escapes (\040 ...).
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and len(field[i + 1:i + 4]) == 3 and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo text, in its order (later lines are mounted over earlier ones)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue  # not a mountinfo line
        dash = fields.index("-", 6)
        mounts.append(Mount(int(fields[0]), _unescape(fields[3]), _unescape(fields[4]),
                            fields[dash + 1], _unescape(fields[dash + 2]) if len(fields) > dash + 2 else ""))
    return mounts


def mount_at(path: str, mounts: Sequence[Mount]) -> Mount | None:
    """The mount visible at `path` exactly: the last one mounted there; None when `path` is no mount point."""
    found = None
    for mount in mounts:
        if mount.mount_point == path:
            found = mount
    return found


def not_mounted(paths: Iterable[str], mounts: Sequence[Mount]) -> list[str]:
    """The paths that are not a filesystem of their own here: no mount at the path, or a bind of the
    same path of the root filesystem (its root is the node path itself)."""
    out = []
    for path in paths:
        mount = mount_at(path, mounts)
        if mount is None or mount.root == path:
            out.append(path)
    return out


def report(paths: Iterable[str]) -> str:
    """The termination message naming each path that is not mounted (one line each)."""
    lines = [f"{MARKER} {path}: a directory on the node's root filesystem, not a disk mounted there; "
             "nothing was created or changed (mount the disk, or set storage.allowRootDisk)" for path in paths]
    return "\n".join(lines)[:MESSAGE_LIMIT]


def parse_report(message: str) -> list[str]:
    """The paths a termination message of `report` names (none for any other message)."""
    out = []
    for line in (message or "").splitlines():
        if line.startswith(MARKER + " ") and ":" in line:
            out.append(line[len(MARKER) + 1:].split(":", 1)[0])
    return out


def make_owned(path: str, uid: int, gid: int) -> None:
    """`path` as a directory (0755, missing parents too) owned by uid:gid; never through a symlink.

    A directory that belonged to another user (the pool's xrootdUser changed, or the image's xrootd
    uid did) is handed over with everything in it, so the cache keeps its files and can purge them.
    """
    os.makedirs(path, mode=0o755, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{path} is not a directory (a symlink or a file): refusing to change it")
    if (info.st_uid, info.st_gid) == (uid, gid):
        return
    for top, dirs, files in os.walk(path, onerror=_raise):  # never descends through a symlink
        for name in [*dirs, *files]:
            os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)
    os.chown(path, uid, gid, follow_symlinks=False)


def _raise(error: OSError) -> None:
    raise error


def prepare(uid: int, gid: int, dirs: Sequence[str], disks: Sequence[str], allow_root_disk: bool,
            mountinfo: str | None = None, termination_log: str | None = None) -> int:
    """Check the disks, then make the directories; the exit code of the container."""
    mountinfo, termination_log = mountinfo or MOUNTINFO, termination_log or TERMINATION_LOG
    if not allow_root_disk:
        with open(mountinfo, encoding="utf-8") as f:
            missing = not_mounted(disks, parse_mountinfo(f.read()))
        if missing:
            return _fail(report(missing), NOT_MOUNTED_EXIT, termination_log)
    try:
        for path in dirs:
            make_owned(path, uid, gid)
    except OSError as exc:
        return _fail(f"PrepareFailed: {exc}", FAILED_EXIT, termination_log)
    print(f"prepare-cache: {len(disks)} disk(s) checked"
          f"{' (root disk allowed)' if allow_root_disk else ''}; {', '.join(dirs)} owned by {uid}:{gid}", flush=True)
    return 0


def _fail(message: str, code: int, termination_log: str) -> int:
    print(message, file=sys.stderr, flush=True)
    try:
        with open(termination_log, "w", encoding="utf-8") as f:
            f.write(message)
    except OSError:
        pass  # outside a pod: stderr is enough
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="switchyard prepare-cache",
                                     description="check a cache's disks are mounted; make its directories for xrootd")
    parser.add_argument("--uid", type=int, required=True, help="owner of the directories (xrootd's uid)")
    parser.add_argument("--gid", type=int, required=True, help="their group (xrootd's gid)")
    parser.add_argument("--disk", action="append", default=[], help="a path that must be a mounted filesystem")
    parser.add_argument("--dir", action="append", default=[], help="a directory to create and hand to uid:gid")
    parser.add_argument("--allow-root-disk", action="store_true", help="skip the mount check")
    args = parser.parse_args(argv)
    return prepare(args.uid, args.gid, args.dir, args.disk, args.allow_root_disk)


if __name__ == "__main__":
    sys.exit(main())
