"""A real xrootd cache started from the config switchyard renders, in front of a real origin.

Origin bytes are measured at the origin itself (its own xrd.report link counter),
so the cache's claims are checked against an independent witness.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from xrootd_fixtures import cache_pool, require, start_cache, start_origin, wait_until, xrdcp

from switchyard.xrootd import render_scitokens_config

pytestmark = pytest.mark.integration

MIB = 1 << 20
# What an open and a stat cost on the wire, far below one 256 KiB cache block:
# a warm read may talk to the origin that much, never send file data through it.
PROTOCOL_OVERHEAD = 64 * 1024


@pytest.fixture
def origin(xrd_base, xrootd_account):
    origin = start_origin(xrd_base, xrootd_account)
    yield origin
    origin.daemon.stop()
    origin.meter.close()


@pytest.fixture
def cache_dirs(xrd_base, xrootd_account):
    data = xrootd_account.make_dir(xrd_base / "data0")
    meta = xrootd_account.make_dir(xrd_base / "meta")
    return [str(data)], str(meta)


@pytest.fixture
def started():
    """Caches a test starts, stopped afterwards even when it fails."""
    caches = []
    yield caches.append
    for cache in caches:
        cache.daemon.stop()


def test_read_through_the_cache_is_the_origin_file_and_a_second_read_costs_the_origin_nothing(
        xrd_base, xrootd_account, origin, cache_dirs, started):
    data = os.urandom(5 * MIB + 12345)  # not a whole number of blocks
    lfn = origin.put("run1/events.root", data)
    cache = start_cache(xrd_base, xrootd_account, cache_pool(origin.daemon.port, *cache_dirs))
    started(cache)
    before = origin.bytes_sent_now()

    cold = xrdcp(cache.url_for(lfn), xrd_base / "cold.root")
    assert cold.returncode == 0, cold.stderr
    assert (xrd_base / "cold.root").read_bytes() == data
    after_cold = origin.bytes_sent_now()
    assert after_cold - before >= len(data)

    warm = xrdcp(cache.url_for(lfn), xrd_base / "warm.root")
    assert warm.returncode == 0, warm.stderr
    assert (xrd_base / "warm.root").read_bytes() == data
    after_warm = origin.bytes_sent_now()
    assert after_warm - after_cold < PROTOCOL_OVERHEAD, "the warm read fetched file data from the origin"


def test_forwarding_mode_reads_the_origin_named_in_the_url(xrd_base, xrootd_account, origin, cache_dirs, started):
    data = os.urandom(2 * MIB)
    lfn = origin.put("forwarded.bin", data)
    pool = cache_pool(origin.daemon.port, *cache_dirs, origin={"mode": "forward", "host": None})
    cache = start_cache(xrd_base, xrootd_account, pool)
    started(cache)
    url = f"root://127.0.0.1:{cache.daemon.port}//root://127.0.0.1:{origin.daemon.port}/{lfn}"
    result = xrdcp(url, xrd_base / "forwarded.bin")
    assert result.returncode == 0, result.stderr + cache.daemon.log_tail()
    assert (xrd_base / "forwarded.bin").read_bytes() == data


def test_every_data_disk_receives_data(xrd_base, xrootd_account, origin, tmpfs_disks, started):
    disks = tmpfs_disks(2, 32)
    meta = xrootd_account.make_dir(xrd_base / "meta")
    cache = start_cache(xrd_base, xrootd_account, cache_pool(origin.daemon.port, [str(d) for d in disks], str(meta)))
    started(cache)
    for index in range(4):
        lfn = origin.put(f"spread{index}.bin", os.urandom(3 * MIB))
        result = xrdcp(cache.url_for(lfn), xrd_base / "out.bin")
        assert result.returncode == 0, result.stderr

    used = {disk.name: _used_bytes(disk) for disk in disks}
    assert all(bytes_ >= 3 * MIB for bytes_ in used.values()), f"cached bytes per disk: {used}"


def _used_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _usage(disks: list[Path]) -> float:
    total = sum(os.statvfs(d).f_blocks * os.statvfs(d).f_frsize for d in disks)
    return sum(_used_bytes(d) for d in disks) / total


def test_a_cache_filled_past_its_high_water_mark_purges_back_under_it(
        xrd_base, xrootd_account, origin, tmpfs_disks, started):
    # 6 files of 4 MiB on 2 x 24 MiB disks: half full, well past the high mark,
    # with room to spare (XrdOss refuses a new file on a disk it thinks is near full).
    disks = tmpfs_disks(2, 24)
    meta = xrootd_account.make_dir(xrd_base / "meta")
    low, high = 0.25, 0.4
    pool = cache_pool(origin.daemon.port, [str(d) for d in disks], str(meta),
                      pfc={"lowWatermark": low, "highWatermark": high, "purgeIntervalSeconds": 60})
    cache = start_cache(xrd_base, xrootd_account, pool)
    started(cache)
    files = {origin.put(f"fill{index}.bin", os.urandom(4 * MIB)): index for index in range(6)}
    for lfn in files:
        result = xrdcp(cache.url_for(lfn), xrd_base / "out.bin")
        assert result.returncode == 0, result.stderr
    # Blocks reach the disks through the write queue, after the client has them.
    wait_until(lambda: _usage(disks) > high, timeout=30, interval=0.2,
               what=f"the cache to fill past its high water mark (at {_usage(disks):.2f})")

    # XrdPfc checks every purgeinterval (60 s at the least) and purges down to the low mark.
    wait_until(lambda: _usage(disks) < high, timeout=180, interval=2, what="the purge")
    assert _usage(disks) <= low + 0.05
    first = next(iter(files))  # the least recently used file is purged first, and still readable
    again = xrdcp(cache.url_for(first), xrd_base / "again.bin")
    assert again.returncode == 0, again.stderr
    assert (xrd_base / "again.bin").read_bytes() == (origin.root / first.lstrip("/")).read_bytes()


def test_origin_down_gives_a_clear_error_and_the_cache_recovers(xrd_base, xrootd_account, origin, cache_dirs, started):
    data = os.urandom(MIB)
    lfn = origin.put("later.bin", data)
    pool = cache_pool(origin.daemon.port, *cache_dirs, origin={"connectWindowSeconds": 2, "connectRetries": 1})
    cache = start_cache(xrd_base, xrootd_account, pool)
    started(cache)

    origin.daemon.stop()
    down = xrdcp(cache.url_for(lfn), xrd_base / "down.bin", timeout=120)
    assert down.returncode != 0
    assert "Unable to open" in down.stderr and "connection refused" in down.stderr, down.stderr

    origin.daemon.start()  # same port, same files
    wait_until(lambda: xrdcp(cache.url_for(lfn), xrd_base / "up.bin").returncode == 0,
               timeout=60, interval=1, what="a read after the origin returned")
    assert (xrd_base / "up.bin").read_bytes() == data


def test_token_auth_config_starts_with_tls_and_refuses_a_reader_without_a_token(
        xrd_base, xrootd_account, origin, cache_dirs, started):
    require("openssl")
    tls = xrootd_account.make_dir(xrd_base / "tls")
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(tls / "tls.key"), "-out", str(tls / "tls.crt")],
        capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    shutil.copyfile(tls / "tls.crt", tls / "ca.crt")
    pool = cache_pool(origin.daemon.port, *cache_dirs, auth={
        "mode": "scitokens", "issuers": ["https://issuer.example.org"], "tlsSecret": "xcache-tls"})
    (tls / "scitokens.cfg").write_text(render_scitokens_config(pool))
    for name in ("tls.key", "tls.crt", "ca.crt", "scitokens.cfg"):
        xrootd_account.own(tls / name)
    cache = start_cache(xrd_base, xrootd_account, pool, tls_dir=str(tls),
                        scitokens_config_path=str(tls / "scitokens.cfg"))
    started(cache)
    assert cache.daemon.wait_for_log("XrdAccSciTokens: Initialized SciTokens-based authorization"), \
        cache.daemon.log_tail(4000)

    # A client that trusts the cache's certificate gets through TLS and is then
    # refused for having no token.
    trusted = xrd_base / "trusted-cas"
    trusted.mkdir()
    shutil.copyfile(tls / "ca.crt", trusted / "switchyard-test-ca.pem")
    rehashed = subprocess.run(["openssl", "rehash", str(trusted)], capture_output=True, text=True, check=False)
    assert rehashed.returncode == 0, rehashed.stderr
    lfn = origin.put("secret.bin", os.urandom(1024))
    client_env = {"X509_CERT_DIR": str(trusted), "BEARER_TOKEN": "", "BEARER_TOKEN_FILE": str(xrd_base / "none")}
    anonymous = xrdcp(cache.url_for(lfn), xrd_base / "secret.bin", timeout=60, env=client_env)
    assert anonymous.returncode != 0
    assert "Auth failed" in anonymous.stderr, anonymous.stderr
    assert not (xrd_base / "secret.bin").exists()
