"""`switchyard prepare-cache`: the mount check on real mountinfo lines, and what it creates (or not)."""

from __future__ import annotations

import os
import pathlib

import pytest

from switchyard import cacheprepare
from switchyard.cacheprepare import (MARKER, NOT_MOUNTED_EXIT, not_mounted, parse_mountinfo, parse_report, prepare,
                                     report)
from switchyard.cli import main as cli_main

# Taken from /proc/self/mountinfo on this machine (ext4 root) in a mount namespace where
#   mount --bind /tmp/mi/a /tmp/mi/a            a root-fs directory bound onto itself
#   mount -t tmpfs tmpfs /tmp/mi/b              a filesystem of its own
#   mount -t tmpfs tmpfs /tmp/mi/t; mkdir /tmp/mi/t/sub; mount --bind /tmp/mi/t/sub /tmp/mi/c
#                                               a directory of another filesystem, bound there
MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
22 27 0:21 / /proc rw,relatime - proc proc rw
63 43 254:0 /tmp/mi/a /tmp/mi/a rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
64 43 0:39 / /tmp/mi/b rw,relatime - tmpfs tmpfs rw
65 43 0:40 / /tmp/mi/t rw,relatime - tmpfs tmpfs rw
66 43 0:40 /sub /tmp/mi/c rw,relatime - tmpfs tmpfs rw
"""
# In a container: a hostPath volume of a plain directory on the node's root disk, and one of an
# NVMe mounted at the node path (optional fields between the mount options and the dash).
CONTAINER = """\
1201 1100 0:52 / / rw,relatime master:310 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
1210 1201 254:0 /srv/cache/nvme0 /srv/cache/nvme0 rw,relatime shared:1 - ext4 /dev/vda rw
1211 1201 259:1 / /srv/cache/meta rw,relatime shared:7 master:2 - xfs /dev/nvme0n1 rw
1212 1201 254:0 /srv/a\\040b /srv/a\\040b rw,relatime - ext4 /dev/vda rw
"""


def test_mountinfo_lines_parse_into_root_and_mount_point():
    mounts = parse_mountinfo(MOUNTINFO)
    assert [(m.root, m.mount_point, m.fs_type) for m in mounts][2:] == [
        ("/tmp/mi/a", "/tmp/mi/a", "ext4"), ("/", "/tmp/mi/b", "tmpfs"), ("/", "/tmp/mi/t", "tmpfs"),
        ("/sub", "/tmp/mi/c", "tmpfs")]
    container = parse_mountinfo(CONTAINER + "not a mountinfo line\n")
    assert [m.mount_point for m in container] == ["/", "/srv/cache/nvme0", "/srv/cache/meta", "/srv/a b"]
    assert container[2].source == "/dev/nvme0n1"


def test_only_a_root_filesystem_directory_or_no_mount_is_not_mounted():
    mounts = parse_mountinfo(MOUNTINFO)
    # A bind of a root-fs directory onto itself is no disk; a tmpfs and a directory of another fs are.
    assert not_mounted(["/tmp/mi/a", "/tmp/mi/b", "/tmp/mi/c", "/tmp/mi/t"], mounts) == ["/tmp/mi/a"]
    # A path with no mount of its own (only below /) is on the container's root: not mounted either.
    assert not_mounted(["/tmp/mi", "/tmp/mi/b/x"], mounts) == ["/tmp/mi", "/tmp/mi/b/x"]
    container = parse_mountinfo(CONTAINER)
    assert not_mounted(["/srv/cache/meta", "/srv/cache/nvme0", "/srv/a b"], container) == \
        ["/srv/cache/nvme0", "/srv/a b"]


def test_the_last_mount_at_a_path_decides():
    # A disk mounted later over the root-fs bind hides it.
    stacked = MOUNTINFO + "70 63 0:41 / /tmp/mi/a rw - tmpfs tmpfs rw\n"
    assert not_mounted(["/tmp/mi/a"], parse_mountinfo(stacked)) == []


def test_the_report_names_each_path_and_reads_back():
    text = report(["/srv/cache/nvme0", "/mnt/xcache-meta"])
    assert text.count(MARKER) == 2 and "storage.allowRootDisk" in text
    assert parse_report(text) == ["/srv/cache/nvme0", "/mnt/xcache-meta"]
    assert parse_report("PrepareFailed: [Errno 13] Permission denied: '/x'") == []
    assert parse_report("") == []


def _files(root: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _fake_mounts(tmp_path: pathlib.Path, mounted: list[pathlib.Path], root_fs: list[pathlib.Path]) -> pathlib.Path:
    lines = ["1 0 254:0 / / rw - ext4 /dev/vda rw"]
    lines += [f"{10 + i} 1 0:{40 + i} / {p} rw - tmpfs tmpfs rw" for i, p in enumerate(mounted)]
    lines += [f"{30 + i} 1 254:0 {p} {p} rw - ext4 /dev/vda rw" for i, p in enumerate(root_fs)]
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_unmounted_disk_stops_it_before_anything_is_written(tmp_path):
    meta, data = tmp_path / "meta", tmp_path / "nvme0"
    meta.mkdir(), data.mkdir()
    mountinfo = _fake_mounts(tmp_path, mounted=[meta], root_fs=[data])
    log = tmp_path / "termination-log"
    before = _files(tmp_path)
    code = prepare(os.getuid(), os.getgid(), [str(meta / "namespace"), str(meta / "meta"), str(data)],
                   [str(meta), str(data)], allow_root_disk=False, mountinfo=str(mountinfo), termination_log=str(log))
    assert code == NOT_MOUNTED_EXIT
    assert parse_report(log.read_text()) == [str(data)]
    assert _files(tmp_path) == sorted([*before, "termination-log"])  # not even the mounted disk's directories


def test_mounted_disks_get_their_directories(tmp_path):
    meta, data = tmp_path / "meta", tmp_path / "nvme0"
    meta.mkdir(), data.mkdir()
    mountinfo = _fake_mounts(tmp_path, mounted=[meta, data], root_fs=[])
    log = tmp_path / "termination-log"
    uid, gid = os.getuid(), os.getgid()
    code = prepare(uid, gid, [str(meta / "namespace"), str(meta / "meta"), str(data)], [str(meta), str(data)],
                   allow_root_disk=False, mountinfo=str(mountinfo), termination_log=str(log))
    assert code == 0 and not log.exists()
    for path in (meta / "namespace", meta / "meta", data):
        info = path.stat()
        assert path.is_dir() and (info.st_uid, info.st_gid) == (uid, gid)
    assert (meta / "meta").stat().st_mode & 0o777 == 0o755 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_allow_root_disk_skips_the_check(tmp_path):
    data = tmp_path / "nvme0"
    data.mkdir()
    code = prepare(os.getuid(), os.getgid(), [str(data / "sub")], [str(data)], allow_root_disk=True,
                   mountinfo=str(tmp_path / "absent"), termination_log=str(tmp_path / "log"))
    assert code == 0 and (data / "sub").is_dir()


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_directories_are_handed_to_the_xrootd_uid(tmp_path):
    data = tmp_path / "nvme0"
    mountinfo = _fake_mounts(tmp_path, mounted=[data], root_fs=[])
    data.mkdir()
    assert prepare(10940, 10941, [str(data), str(data / "x" / "y")], [str(data)], False, str(mountinfo),
                   str(tmp_path / "log")) == 0
    assert [(p.stat().st_uid, p.stat().st_gid) for p in (data, data / "x" / "y")] == [(10940, 10941)] * 2
    assert (data / "x").stat().st_uid == 0  # a parent made on the way stays root's


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_a_new_xrootd_uid_gets_the_cached_files_too(tmp_path):
    data, outside = tmp_path / "nvme0", tmp_path / "outside"
    (data / "public" / "ab").mkdir(parents=True)
    (data / "public" / "ab" / "file").write_bytes(b"cached")
    outside.mkdir()
    (data / "link").symlink_to(outside)
    for path in (data, data / "public", data / "public" / "ab", data / "public" / "ab" / "file"):
        os.chown(path, 102, 105)  # the old image's dynamic xrootd user
    mountinfo = _fake_mounts(tmp_path, mounted=[data], root_fs=[])
    assert prepare(1094, 1094, [str(data)], [str(data)], False, str(mountinfo), str(tmp_path / "log")) == 0
    owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in [data, *data.rglob("*")]}
    assert owners == {(1094, 1094)}
    assert outside.stat().st_uid == 0  # the symlink itself changed hands, never what it points to


def test_a_symlink_is_never_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "namespace").symlink_to(target)
    log = tmp_path / "log"
    code = prepare(os.getuid(), os.getgid(), [str(tmp_path / "meta" / "namespace")], [], True,
                   termination_log=str(log))
    assert code == cacheprepare.FAILED_EXIT and "symlink" in log.read_text()


def test_the_cli_runs_it(tmp_path, monkeypatch):
    data = tmp_path / "nvme0"
    data.mkdir()
    monkeypatch.setattr(cacheprepare, "MOUNTINFO", str(_fake_mounts(tmp_path, mounted=[], root_fs=[data])))
    monkeypatch.setattr(cacheprepare, "TERMINATION_LOG", str(tmp_path / "log"))
    args = ["prepare-cache", "--uid", str(os.getuid()), "--gid", str(os.getgid()), "--disk", str(data),
            "--dir", str(data / "made")]
    assert cli_main(args) == NOT_MOUNTED_EXIT and not (data / "made").exists()
    assert cli_main([*args, "--allow-root-disk"]) == 0 and (data / "made").is_dir()
