"""A cache lost while a reader has one of its files open: the reader finishes the file from the next cache.

Real caches in front of a real origin (routing_rig); the reader is a separate process whose fsspec is
hooked as a worker's, holding files open on their home cache while the test stops that cache.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from routing_rig import homes, running_ring

from switchyard.routing import HASH_RULE

pytestmark = pytest.mark.integration

MIB = 1 << 20
READER = r"""
import hashlib, sys
import fsspec
from switchyard.routing import hooks
hooks.install()
partly, whole = sys.argv[1:3]
with fsspec.open(partly, "rb") as a, fsspec.open(whole, "rb") as b:
    first = a.read(1 << 20)              # with fsspec.s read-ahead, a.s first 6 MiB, from its home
    b_data = b.read()                    # b whole, from its home
    print("opened", flush=True)
    sys.stdin.readline()                 # the test stops the home cache here
    a_data = first + a.read()            # the rest of a: its home is gone
print(hashlib.sha256(a_data).hexdigest(), hashlib.sha256(b_data).hexdigest(), flush=True)
"""


def test_a_file_open_on_a_cache_that_dies_is_read_to_its_end_from_the_next_cache(xrd_base, xrootd_account):
    with running_ring(xrd_base, xrootd_account, 2) as (origin, caches):
        files = {}
        for i in range(8):
            content = os.urandom(16 * MIB + i)
            files[origin.put(f"store/midread/file{i:02d}.root", content)] = content
        lost = caches[0]
        its_files = sorted(lfn for lfn, home in homes(files, caches).items() if home == lost.name)
        assert len(its_files) >= 2, "the lost cache should be home to two of these files"
        urls = [f"root://127.0.0.1:{origin.daemon.port}/{lfn}" for lfn in its_files[:2]]
        env = {**os.environ, "SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": HASH_RULE,
               "SWITCHYARD_CACHE_RING": ",".join(f"{c.url}=1" for c in caches),
               "XRD_CONNECTIONWINDOW": "2", "XRD_CONNECTIONRETRY": "1", "XRD_REQUESTTIMEOUT": "60"}
        reader = subprocess.Popen([sys.executable, "-c", READER, *urls], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert reader.stdout.readline().strip() == "opened", reader.stderr.read()[-3000:]
            lost.cache.daemon.stop()
            out, err = reader.communicate("go\n", timeout=120)
        finally:
            reader.kill()
        assert reader.returncode == 0, err[-3000:]
        expected = [hashlib.sha256(files[lfn]).hexdigest() for lfn in its_files[:2]]
        assert out.split() == expected
        # It went on from the next cache mid-file (the first 6 MiB, fsspec's read-ahead, came from its home).
        assert f"{lost.url}/{its_files[0]} failed" in err and "trying the next cache" in err, err[-3000:]
