"""Reads by origin URL, routed by switchyard.routing, against a real origin and a ring of real caches.

Three caches run from the config switchyard renders, in front of one origin,
on distinct loopback addresses (127.0.0.2-4: distinct names for the rule).
Who served what is read from the kernel's count of the bytes each cache's port
sent (routing_rig.KernelMeter) and from its namespace on disk (the files it holds). A
file read from any cache but the one the planner's rule names fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
import uproot
import uproot.source.xrootd
from fsspec_xrootd import XRootDFileSystem
from routing_rig import (
    NOT_SERVED, KubeletVolume, RingCache, assert_each_cache_holds_its_own_files, dask_scheduler, homes,
    publish_config, python_without_switchyard, run_init_container, running_ring, served, start_pod_worker, stop_all,
)
from xrootd_fixtures import xrdcp

from switchyard.builders.workerfleet import XROOTD_CLIENT_ENV
from switchyard.planner import hashing
from switchyard.routing import HASH_RULE, RING_RECHECK_SECONDS, Router, hooks, ring_entry

pytestmark = pytest.mark.integration

MIB = 1 << 20
# A reader's XRootD client: give up on a dead cache fast (the fleet's env says 10 s x 2).
FAST_FAILOVER = {"XRD_CONNECTIONWINDOW": "2", "XRD_CONNECTIONRETRY": "1", "XRD_REQUESTTIMEOUT": "60"}


def assert_only_home_served(by_cache: dict[str, int], home: str, size: int) -> None:
    # A cold read may send more than the file (the client re-asks for ranges), never less.
    assert by_cache[home] >= size, f"home cache {home} sent {by_cache[home]} bytes of a {size}-byte file: {by_cache}"
    assert all(v < NOT_SERVED for name, v in by_cache.items() if name != home), \
        f"a cache other than {home} served this file: {by_cache}"


def assert_xrdcp_served_by(caches: list[RingCache], url: str, home: RingCache, data: bytes, dest: Path) -> None:
    """xrdcp of `url` gives `data`, and `home` alone served it."""
    def copy() -> None:
        copied = xrdcp(url, dest)
        assert copied.returncode == 0, copied.stderr

    assert_only_home_served(served(caches, copy), home.name, len(data))
    assert dest.read_bytes() == data


@pytest.fixture
def ring(xrd_base, xrootd_account):
    """An origin with 8 files of 1-2 MiB and three caches; yields (origin, caches, files)."""
    with running_ring(xrd_base, xrootd_account, 3) as (origin, caches):
        files = {}
        for i in range(8):
            data = os.urandom(MIB + i * 97_531)
            files[origin.put(f"store/nano/Run2024/file{i:02d}.root", data)] = data
        yield origin, caches, files


def routing_env(caches: list[RingCache]) -> dict[str, str]:
    """What a hashed worker is told (builders/workerfleet.py cache_env), for these caches."""
    return {"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": HASH_RULE,
            "SWITCHYARD_CACHE_RING": ",".join(f"{c.url}=1" for c in caches), **FAST_FAILOVER}


def switchyard(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "switchyard.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120, check=False)


def test_switchyard_route_and_xrdcp_read_each_file_from_the_cache_the_rule_names(ring, xrd_base):
    origin, caches, files = ring
    env = routing_env(caches)
    expected = homes(files, caches)
    assert len(set(expected.values())) == 3, "every cache should have a share of these files"

    for lfn, data in files.items():
        routed = switchyard("route", f"root://127.0.0.1:{origin.daemon.port}/{lfn}", env=env)
        assert routed.returncode == 0, routed.stderr
        url = routed.stdout.strip()
        home = next(c for c in caches if c.name == expected[lfn])
        assert url == f"{home.url}/{lfn}"
        assert_xrdcp_served_by(caches, url, home, data, xrd_base / "copy.root")
    assert_each_cache_holds_its_own_files(caches, expected)


@pytest.fixture
def fsspec_hooked():
    """This process reads like a worker whose hooks are installed; the stock classes come back after."""
    from XRootD import client

    client.EnvPutInt("ConnectionWindow", 2)
    client.EnvPutInt("ConnectionRetry", 1)
    yield lambda env: hooks.install(Router.from_env(env))
    fsspec.register_implementation("root", XRootDFileSystem, clobber=True)
    for name in ("XRootDSource", "MultithreadedXRootDSource"):
        cls = getattr(uproot.source.xrootd, name)
        cls.__init__ = getattr(cls.__init__, "switchyard_original", cls.__init__)


def read_all(caches, files, urls, expected) -> None:

    for lfn, data in files.items():
        got = {}

        def read() -> None:
            with fsspec.open(urls[lfn], "rb") as f:
                got["data"] = f.read()

        assert_only_home_served(served(caches, read), expected[lfn], len(data))
        assert got["data"] == data


def test_fsspec_by_origin_url_is_served_by_the_rule_and_losing_a_cache_moves_only_its_files(ring, fsspec_hooked):
    origin, caches, files = ring
    urls = {lfn: f"root://127.0.0.1:{origin.daemon.port}/{lfn}" for lfn in files}
    env = routing_env(caches)
    expected = homes(files, caches)
    assert "fsspec" in fsspec_hooked(env)
    origin_before = origin.bytes_sent_now()
    read_all(caches, files, urls, expected)
    # the origin sent each file once, to the cache that fetched it, never to the reader too
    assert origin.bytes_sent_now() - origin_before < 1.5 * sum(map(len, files.values()))

    # One cache dies while the workers still have it in their ring: its files fail over to
    # their next cache, which is where the rule puts them once the ring loses it, and no
    # other file moves.
    lost = caches[0]
    lost.cache.daemon.stop()
    survivors = caches[1:]
    after = homes(files, survivors)
    moved = {lfn for lfn in files if after[lfn] != expected[lfn]}
    assert moved == {lfn for lfn, h in expected.items() if h == lost.name} and moved
    read_all(survivors, files, urls, after)  # the old ring: failover

    fsspec_hooked(routing_env(survivors))  # the re-published ring
    read_all(survivors, files, urls, after)
    assert_each_cache_holds_its_own_files(survivors, after)


RING_FILE_READER = """
import sys
import fsspec
from switchyard.routing import hooks
print(",".join(hooks.install()), flush=True)
for line in sys.stdin:
    with fsspec.open(line.strip(), "rb") as f:
        print(len(f.read()), flush=True)
"""


class Reader:
    """One long-lived process reading through the hooks, as a worker does: a URL in, its length out."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", RING_FILE_READER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
        assert self.process.stdout.readline().strip() == "fsspec,uproot"

    def read(self, url: str) -> int:
        self.process.stdin.write(url + "\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())


def test_a_running_reader_follows_the_rewritten_ring_file_without_a_restart(ring, xrd_base):
    """The kubelet swaps the routing ConfigMap's files; the reader's next reads go to the new homes,
    named by node (hashed) and reached by address (the entries a fleet's ConfigMap holds)."""
    origin, caches, files = ring
    node_of = {c.name: f"node-{i}" for i, c in enumerate(caches)}  # what the rule hashes: a node name
    cache_of = {node: name for name, node in node_of.items()}
    volume = KubeletVolume(xrd_base / "routing")

    def publish(live: list[RingCache]) -> dict[str, str]:
        volume.publish({"ring": "".join(ring_entry(node_of[c.name], c.address, 1) + "\n" for c in live)})
        return {lfn: cache_of[hashing.home(lfn, [node_of[c.name] for c in live])] for lfn in files}

    def read_each(expected: dict[str, str]) -> None:
        for lfn, data in files.items():
            got = {}
            by_cache = served(caches, lambda: got.update(n=reader.read(f"root://127.0.0.1:{origin.daemon.port}/{lfn}")))
            assert got["n"] == len(data)
            assert_only_home_served(by_cache, expected[lfn], len(data))

    expected = publish(caches)
    assert len(set(expected.values())) == 3, "every cache should have a share of these files"
    reader = Reader({"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": HASH_RULE,
                     "SWITCHYARD_CACHE_RING_FILE": str(volume.root / "ring"), **FAST_FAILOVER})
    try:
        read_each(expected)
        # The ring drops a cache that still runs (so failover cannot be what moves its files):
        # once the reader's recheck interval has passed, its files come from their next cache.
        dropped = caches[0]
        after = publish(caches[1:])
        moved = {lfn for lfn in files if after[lfn] != expected[lfn]}
        assert moved == {lfn for lfn, h in expected.items() if h == dropped.name} and moved
        time.sleep(RING_RECHECK_SECONDS + 0.5)
        read_each(after)
        # It comes back: its files go home to it, still in its cache; the reader never restarted.
        assert publish(caches) == expected
        time.sleep(RING_RECHECK_SECONDS + 0.5)
        read_each(expected)
        assert reader.process.poll() is None
    finally:
        reader.process.kill()
        reader.process.wait(timeout=30)


def test_a_running_reader_reads_from_a_cache_again_once_it_is_back(ring):
    """A cache stops while a worker still has it in its ring, then starts again: the worker's
    reads of its files fail over meanwhile, and go home to it again once the fleet's XRootD
    stream error window has passed (XrdCl's default, 30 minutes, kept them away)."""
    origin, caches, files = ring
    fleet_env = dict(XROOTD_CLIENT_ENV)
    window = float(fleet_env["XRD_STREAMERRORWINDOW"])
    expected = homes(files, caches)
    lost = caches[0]
    its_files = [lfn for lfn, home in expected.items() if home == lost.name]
    assert its_files, "the stopped cache should be home to some of these files"
    url = f"root://127.0.0.1:{origin.daemon.port}/{its_files[0]}"
    reader = Reader({**fleet_env, **routing_env(caches)})
    try:
        assert_only_home_served(served(caches, lambda: reader.read(url)), lost.name, len(files[its_files[0]]))
        lost.cache.daemon.stop()
        failed_at = time.monotonic()
        by_cache = served(caches[1:], lambda: reader.read(url))
        assert sum(by_cache.values()) >= len(files[its_files[0]]), f"no other cache served the file: {by_cache}"
        lost.cache.daemon.start()
        time.sleep(max(0.0, failed_at + window + 1 - time.monotonic()))
        for lfn in its_files:
            got = {}
            by_cache = served(caches, lambda: got.update(n=reader.read(f"root://127.0.0.1:{origin.daemon.port}/{lfn}")))
            assert got["n"] == len(files[lfn])
            assert_only_home_served(by_cache, lost.name, len(files[lfn]))
        assert reader.process.poll() is None
    finally:
        reader.process.kill()
        reader.process.wait(timeout=30)


UPROOT_READER = """
import json, sys
import uproot
from switchyard.routing import hooks
hooks.install()
# fsspec: uproot's default source; xrootd: its own XRootD source, which bypasses fsspec
options = {"handler": uproot.source.xrootd.XRootDSource} if sys.argv[2] == "xrootd" else {}
with uproot.open(sys.argv[1], **options) as f:
    events = f["Events"]
    print(json.dumps({"n": events.num_entries, "sum": float(events["Muon_pt"].array(library="np").sum())}))
"""


@pytest.mark.parametrize("source", ["fsspec", "xrootd"])
def test_uproot_opens_a_root_file_by_its_origin_url_through_its_home_cache(ring, source):
    origin, caches, _ = ring
    pt = np.random.default_rng(7).exponential(30.0, 200_000).astype(np.float32)
    local = origin.root / "nano.root"
    with uproot.recreate(local) as out:
        out["Events"] = {"Muon_pt": pt, "run": np.full(pt.size, 2024, dtype=np.int32)}
    origin.daemon.account.own(local)
    lfn = "/nano.root"
    home = next(c for c in caches if c.name == hashing.home(lfn, [c.name for c in caches]))
    done = {}

    def read() -> None:
        done["result"] = subprocess.run(
            [sys.executable, "-c", UPROOT_READER, f"root://127.0.0.1:{origin.daemon.port}/{lfn}", source],
            capture_output=True, text=True, env={**os.environ, **routing_env(caches)}, timeout=300, check=False)

    by_cache = served(caches, read)
    result = done["result"]
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got == {"n": pt.size, "sum": float(pt.sum())}
    # uproot reads the baskets of one branch and the file's directory, not every byte
    assert by_cache[home.name] > 0.5 * local.stat().st_size, by_cache
    assert all(v < NOT_SERVED for name, v in by_cache.items() if name != home.name), by_cache
    assert home.holds(lfn) and not any(c.holds(lfn) for c in caches if c is not home)


def test_local_routing_reads_every_file_from_the_switch_endpoint(ring, fsspec_hooked):
    origin, caches, files = ring
    switch_cache = caches[1]
    fsspec_hooked({"SWITCHYARD_ROUTING": "local", "SWITCHYARD_CACHE_ENDPOINT": switch_cache.url})
    urls = {lfn: f"root://127.0.0.1:{origin.daemon.port}/{lfn}" for lfn in files}
    read_all(caches, files, urls, {lfn: switch_cache.name for lfn in files})
    assert_each_cache_holds_its_own_files(caches, {lfn: switch_cache.name for lfn in files})


def nano_file(origin, caches: list[RingCache], name: str, seed: int) -> tuple[np.ndarray, Path, str, str]:
    """A NanoAOD-like file on the origin: (its Muon_pt, its path there, its LFN, the ring's home cache for it)."""
    pt = np.random.default_rng(seed).exponential(25.0, 300_000).astype(np.float32)
    local = origin.root / name
    with uproot.recreate(local) as out:
        out["Events"] = {"Muon_pt": pt}
    origin.daemon.account.own(local)
    lfn = f"/{name}"
    return pt, local, lfn, hashing.home(lfn, [c.name for c in caches])


def one_worker_fleet(caches: list[RingCache], routing: str = "hashed", **spec: object) -> tuple[dict, dict]:
    """A one-worker Dask fleet on sw1 reading through the ring of `caches` (`routing` hashed) or its switch's
    cache Service (local): its Deployment and its routing ConfigMap."""
    from switchyard.api import WorkerFleetSpec
    from switchyard.api.plans import FleetPlan
    from switchyard.builders.workerfleet import build_fleet, build_routing_config

    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "replicas": 1, "cores": 1, "memoryGiB": 1,
                                           "dask": {"schedulerAddress": "tcp://scheduler.example:8786"}, **spec})
    plan = FleetPlan(facility="af", workers={"sw1": 1}, hashed={"sw1": 1} if routing == "hashed" else {},
                     pool="af-xc", cache_switches=["sw1"], routing={"sw1": routing},
                     cache_ring={c.name: 1.0 for c in caches})
    (deployment,) = build_fleet("f", "ns", spec, plan, helper_image="h:1")
    return deployment, build_routing_config("f", plan, {c.name: c.name for c in caches})


def task_on_pod_worker(deployment: dict, caches: list[RingCache], url: str, logs: Path, home: Path,
                       volumes: dict[str, Path], bin_dir: Path | None = None,
                       addresses: dict[str, str] | None = None) -> tuple[dict, dict[str, int]]:
    """A plain uproot task on `url` on a Dask worker started from the Deployment's pod: its result, and the
    bytes each cache sent meanwhile (by its own counters)."""
    from distributed import Client
    from xrootd_fixtures import wait_until

    def analysis_task(url: str) -> dict:
        """What an analyst submits (local: shipped by value): uproot on the origin URL, nothing about caches."""
        import uproot

        import switchyard
        from switchyard.routing.hooks import installed

        with uproot.open(url) as f:
            pt = f["Events"]["Muon_pt"].array(library="np")
        return {"n": int(pt.size), "sum": float(pt.sum()), "hooked": sorted(installed()),
                "switchyard": switchyard.__file__}

    with dask_scheduler(logs) as scheduler:
        worker = start_pod_worker(deployment, scheduler, addresses or {}, logs, home, extra_env=FAST_FAILOVER,
                                  volumes=volumes, bin_dir=bin_dir)
        try:
            with Client(scheduler, timeout=60) as client:
                try:
                    wait_until(lambda: len(client.scheduler_info()["workers"]) == 1, timeout=60, what="the worker to join")
                except AssertionError as error:
                    raise AssertionError(f"{error}: {logs.read_text()[-3000:]}") from None
                done = {}

                def read() -> None:
                    done["result"] = client.submit(analysis_task, url, pure=False).result(timeout=120)

                by_cache = served(caches, read)
        finally:
            stop_all([worker])
    return done["result"], by_cache


def assert_served_by_home(by_cache: dict[str, int], home: str, size: int) -> None:
    assert by_cache[home] > 0.5 * size, by_cache
    assert all(v < NOT_SERVED for name, v in by_cache.items() if name != home), by_cache


def test_a_generated_dask_worker_reads_by_origin_url_through_the_cache_the_rule_names(ring, xrd_base):
    """The worker runs the command and environment a fleet's pod gets; the task is plain uproot."""
    origin, caches, _ = ring
    pt, local, lfn, home = nano_file(origin, caches, "nano_dask.root", 11)
    deployment, config = one_worker_fleet(caches)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    argv = container["command"] + container["args"]
    assert argv[:3] == ["dask", "worker", "tcp://scheduler.example:8786"] and "--preload" in argv
    # the ring: the fleet's ConfigMap, as the kubelet mounts it (each node's InternalIP: its cache's loopback)
    volume = KubeletVolume(xrd_base / "routing")
    publish_config(volume, config, {f"{c.name}:1094": c.address for c in caches})

    logs = xrd_base / "dask.log"
    result, by_cache = task_on_pod_worker(deployment, caches, f"root://127.0.0.1:{origin.daemon.port}/{lfn}", logs,
                                          xrd_base, {"routing": volume.root})
    result.pop("switchyard")
    assert result == {"n": pt.size, "sum": float(pt.sum()), "hooked": ["fsspec", "uproot"]}, logs.read_text()[-3000:]
    assert_served_by_home(by_cache, home, local.stat().st_size)


@pytest.mark.parametrize("routing", ["hashed", "local"])
def test_a_worker_image_without_switchyard_routes_with_the_client_its_pod_copies_in(ring, xrd_base, tmp_path, routing):
    """A worker whose Python has distributed, uproot, fsspec-xrootd and the XRootD bindings but no switchyard,
    started as its pod starts it: the routing-copy init container (the operator's `switchyard copy-routing`)
    fills the emptyDir, the routing-check init container (the worker's Python) says it can route, and the
    worker (switchyard only through the copy on PYTHONPATH) has a plain uproot task's origin URL served
    by the cache the rule names (hashed) or by its switch's cache (local), by the caches' own byte counts."""
    from switchyard.routing import check

    origin, caches, _ = ring
    pt, local, lfn, home = nano_file(origin, caches, f"nano_any_image_{routing}.root", 13)
    addresses = {}
    if routing == "local":  # the switch's cache Service is the cache the rule would not pick
        home = next(c.name for c in caches if c.name != home)
        addresses = {"af-xc-sw1.ns.svc:1094": next(c.address for c in caches if c.name == home)}
    image_bin = python_without_switchyard(tmp_path / "image")
    bare = subprocess.run([str(image_bin / "python3"), "-c", "import distributed, uproot, fsspec_xrootd, XRootD.client\n"
                           "import switchyard"], capture_output=True, text=True, timeout=120)
    assert "No module named 'switchyard'" in bare.stderr, bare.stderr  # the image has all but switchyard

    deployment, config = one_worker_fleet(caches, routing, image="ghcr.io/site/analysis:1", rampUp={"jitterSeconds": 0})
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SWITCHYARD_ROUTING"] == routing
    routing = KubeletVolume(xrd_base / "routing")
    publish_config(routing, config, {f"{c.name}:1094": c.address for c in caches})
    client_dir = tmp_path / "routing-client"  # the pod's emptyDir
    client_dir.mkdir()
    volumes = {"routing": routing.root, "routing-client": client_dir}
    copied = run_init_container(deployment, "routing-copy", volumes, Path(sys.executable).parent)
    assert copied.returncode == 0 and (client_dir / "switchyard" / "routing" / "hooks.py").is_file(), copied.stderr
    log = tmp_path / "termination-log"
    checked = run_init_container(deployment, "routing-check", volumes, image_bin, ("--termination-log", str(log)))
    verdict = check.parse(log.read_text())
    assert checked.returncode == 0 and verdict is not None and verdict.routes, (checked.stdout, checked.stderr)
    assert "fsspec-xrootd" in verdict.detail and "uproot" in verdict.detail

    logs = tmp_path / "dask.log"
    result, by_cache = task_on_pod_worker(deployment, caches, f"root://127.0.0.1:{origin.daemon.port}/{lfn}", logs,
                                          xrd_base, volumes, bin_dir=image_bin, addresses=addresses)
    assert Path(result.pop("switchyard")).is_relative_to(client_dir)  # the copy, not this Python's switchyard
    assert result == {"n": pt.size, "sum": float(pt.sum()), "hooked": ["fsspec", "uproot"]}, logs.read_text()[-3000:]
    assert_served_by_home(by_cache, home, local.stat().st_size)


def test_the_check_says_an_image_without_fsspec_xrootd_cannot_route(tmp_path):
    """The routing-check init container in a Python with uproot and the XRootD bindings but no fsspec-xrootd
    (and no switchyard: only the copy), run as the pod runs it."""
    from switchyard.api import WorkerFleetSpec
    from switchyard.api.plans import FleetPlan
    from switchyard.builders.workerfleet import build_fleet
    from switchyard.desired.workerfleet import routing_verdict
    from switchyard.routing import check

    image_bin = python_without_switchyard(tmp_path / "image", without=("fsspec_xrootd",))
    spec = WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "image": "ghcr.io/site/no-fsspec:1",
                                           "dask": {"schedulerAddress": "tcp://s.example:8786"}})
    plan = FleetPlan(facility="af", workers={"sw1": 1}, pool="af-xc", cache_switches=["sw1"], routing={"sw1": "local"})
    (deployment,) = build_fleet("f", "ns", spec, plan, helper_image="h:1")
    client_dir = tmp_path / "routing-client"
    client_dir.mkdir()
    volumes = {"routing-client": client_dir}
    assert run_init_container(deployment, "routing-copy", volumes, Path(sys.executable).parent).returncode == 0
    log = tmp_path / "termination-log"
    checked = run_init_container(deployment, "routing-check", volumes, image_bin, ("--termination-log", str(log)))
    message = log.read_text()
    assert checked.returncode == 0, checked.stderr  # the worker still starts
    verdict = check.parse(message)
    assert verdict is not None and not verdict.routes, message
    assert "lacks fsspec-xrootd (ModuleNotFoundError: No module named 'fsspec_xrootd')" in verdict.detail
    assert "XRootD" not in verdict.detail.split("(")[0]  # the bindings are there
    # as the operator reads it from the pod's status
    pod = {"metadata": {"name": "f-sw1-0"}, "spec": deployment["spec"]["template"]["spec"],
           "status": {"initContainerStatuses": [{"name": "routing-check",
                                                 "state": {"terminated": {"exitCode": 0, "message": message}}}]}}
    assert routing_verdict([pod], "ghcr.io/site/no-fsspec:1") == {"image": "ghcr.io/site/no-fsspec:1", "routes": False,
                                                                  "message": verdict.detail}


def test_a_ring_of_forwarding_proxies_is_given_the_origin_in_the_url(xrd_base, xrootd_account, fsspec_hooked):
    with running_ring(xrd_base, xrootd_account, 2, origin={"mode": "forward", "host": None}) as (origin, caches):
        files = {}
        for i in range(4):
            data = os.urandom(MIB + i * 65_537)
            files[origin.put(f"store/fwd/file{i}.root", data)] = data
        env = {**routing_env(caches), "SWITCHYARD_CACHE_ORIGIN_MODE": "forward"}
        expected = homes(files, caches)
        urls = {lfn: f"root://127.0.0.1:{origin.daemon.port}/{lfn}" for lfn in files}
        for lfn in list(files)[:2]:  # the CLI and xrdcp
            routed = switchyard("route", urls[lfn], env=env)
            assert routed.returncode == 0, routed.stderr
            home = next(c for c in caches if c.name == expected[lfn])
            assert routed.stdout.strip() == f"{home.url}//{urls[lfn]}"

            def copy() -> None:
                copied = xrdcp(routed.stdout.strip(), xrd_base / "fwd.root")
                assert copied.returncode == 0, copied.stderr

            assert_only_home_served(served(caches, copy), home.name, len(files[lfn]))
            assert (xrd_base / "fwd.root").read_bytes() == files[lfn]
        assert "fsspec" in fsspec_hooked(env)  # and fsspec, warm and cold
        read_all(caches, files, urls, expected)


def test_readers_spread_a_hot_file_over_its_first_caches_while_other_files_keep_one_home(ring, xrd_base):
    """The pool's status lists a hot file with 2 replicas; the fleet's routing ConfigMap (as the builder writes
    it and the kubelet mounts it) carries it beside the ring. Worker processes, each named by its pod's
    HOSTNAME as in a pod, read it from the first or the second cache of its rendezvous order, each from
    the one the rule picks for it, never from the third; a file not on the list comes from its home alone."""
    from switchyard.api.plans import FleetPlan
    from switchyard.builders.workerfleet import build_routing_config

    origin, caches, files = ring
    hot, cold = sorted(files)[:2]
    names = [c.name for c in caches]
    order = hashing.order(hot, names)
    plan = FleetPlan(facility="af", workers={"sw1": 1}, hashed={"sw1": 1}, pool="af-xc", cache_switches=["sw1"],
                     routing={"sw1": "hashed"}, cache_ring={name: 1.0 for name in names})
    config = build_routing_config("f", plan, {name: name for name in names}, [{"path": hot, "replicas": 2}])
    assert config["data"]["hot"].splitlines()[1:] == [f"2 {hot}"]
    volume = KubeletVolume(xrd_base / "routing")
    publish_config(volume, config, {f"{c.name}:1094": c.address for c in caches})
    # two pods for each of the hot file's two homes (the rule's picks, found before reading)
    pods = [f"f-sw1-6c9d4b7f5-{i:05d}" for i in range(200)]
    by_pick = {home: [p for p in pods if hashing.hot_order(hot, names, p, 2)[0] == home][:2] for home in order[:2]}
    readers = {}
    try:
        for home, pod_names in by_pick.items():
            for pod in pod_names:
                readers[pod] = Reader({"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": HASH_RULE,
                                       "SWITCHYARD_CACHE_RING_FILE": str(volume.root / "ring"), "HOSTNAME": pod,
                                       **FAST_FAILOVER})
        total = dict.fromkeys(names, 0)
        for home, pod_names in by_pick.items():
            for pod in pod_names:
                for lfn, expected in ((hot, home), (cold, hashing.home(cold, names))):
                    got = {}
                    url = f"root://127.0.0.1:{origin.daemon.port}/{lfn}"
                    by_cache = served(caches, lambda: got.update(n=readers[pod].read(url)))
                    assert got["n"] == len(files[lfn])
                    assert_only_home_served(by_cache, expected, len(files[lfn]))
                    if lfn == hot:
                        total = {name: total[name] + n for name, n in by_cache.items()}
        # more than one cache served the hot file, each of its first two at least a copy of it; the third none
        assert all(total[name] >= 2 * len(files[hot]) for name in order[:2]), total
        assert total[order[2]] < NOT_SERVED, total
        assert {c.name for c in caches if c.holds(hot)} == set(order[:2])
        assert {c.name for c in caches if c.holds(cold)} == {hashing.home(cold, names)}
        assert all(r.process.poll() is None for r in readers.values())
    finally:
        for reader in readers.values():
            reader.process.kill()
            reader.process.wait(timeout=30)


def test_a_reader_outside_the_cluster_reads_each_file_from_the_cache_a_worker_inside_reads_it_from(
        xrd_base, xrootd_account):
    """Readers outside Kubernetes (an HTCondor job) are given the cache hosts' exporters, not a ConfigMap.

    Each cache runs its exporter sidecar from the StatefulSet's arguments, its `clients` volume holding the
    pool's client-map ConfigMap as the pool publishes it while outside readers read through it (the ring and
    the hot list beside the client map). A worker inside reads its fleet's routing ConfigMap from its mounted
    file; `switchyard route` outside is given SWITCHYARD_ROUTING_URL (a dead exporter first: the next one
    answers). Both name the same cache for every file, and xrdcp of the outside reader's URL is served by that
    cache alone."""
    from switchyard.api.plans import FleetPlan
    from switchyard.builders.workerfleet import build_routing_config, routing_data
    from switchyard.builders.xcachepool import build_client_map
    from routing_rig import exporter_sidecars
    from xrootd_fixtures import free_port

    names = [f"127.0.0.{i + 2}" for i in range(3)]
    weights = dict(zip(names, (1.0, 2.0, 1.5)))
    addresses = {name: name for name in names}
    clients = KubeletVolume(xrd_base / "clients")
    sidecars = exporter_sidecars(xrd_base, "af-xc", dict.fromkeys(names, "sw1"), volumes={"clients": clients.root})
    with running_ring(xrd_base, xrootd_account, 3, meter=sidecars) as (origin, caches):
        on_loopback = {f"{c.name}:1094": c.address for c in caches}
        files = {}
        for i in range(8):
            data = os.urandom(MIB + i * 7_919)
            files[origin.put(f"store/condor/file{i:02d}.root", data)] = data
        publish_config(clients, build_client_map("af-xc", {"rack-1": ["10.8.0.0/22"]},
                                                 routing=routing_data("af-xc", weights, 1094, addresses)), on_loopback)
        plan = FleetPlan(facility="af", workers={"sw1": 1}, hashed={"sw1": 1}, pool="af-xc", cache_switches=["sw1"],
                         routing={"sw1": "hashed"}, cache_ring=weights)
        inside = KubeletVolume(xrd_base / "fleet-routing")
        publish_config(inside, build_routing_config("f", plan, addresses), on_loopback)
        worker = {"SWITCHYARD_ROUTING": "hashed", "SWITCHYARD_HASH_RULE": HASH_RULE,
                  "SWITCHYARD_CACHE_RING_FILE": str(inside.root / "ring")}
        exporters = [f"http://127.0.0.1:{free_port()}"] + \
            [f"http://127.0.0.1:{c.meter.exporter.metrics_port}" for c in caches]
        outside = {"SWITCHYARD_ROUTING_URL": ",".join(exporters), "http_proxy": "http://127.0.0.1:9", **FAST_FAILOVER}
        expected = {lfn: hashing.home(lfn, weights) for lfn in files}
        assert len(set(expected.values())) == 3, "every cache should have a share of these files"
        for lfn, data in files.items():
            url = f"root://127.0.0.1:{origin.daemon.port}/{lfn}"
            routed = {who: switchyard("route", "--all", url, env=env) for who, env in (("inside", worker),
                                                                                       ("outside", outside))}
            assert all(r.returncode == 0 for r in routed.values()), {w: r.stderr for w, r in routed.items()}
            assert routed["outside"].stdout == routed["inside"].stdout
            home = next(c for c in caches if c.name == expected[lfn])
            first = routed["outside"].stdout.split()[0]
            assert first == f"{home.url}/{lfn}"
            assert_xrdcp_served_by(caches, first, home, data, xrd_base / "copy.root")
