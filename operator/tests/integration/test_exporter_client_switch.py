"""Bytes read from a real cache, by the reader's switch: a reader on loopback and one in a network namespace.

The exporter's client map puts 127.0.0.0/8 behind switch 'local' and the
namespace's address behind 'remote'; each reader reads a file of its own size,
so bytes counted under the wrong switch (or under 'unknown') fail the test.
The uplink loads they make are then judged against a plan (drift.assess): one
that predicted twice the namespace reader's bytes out of 'local' drifts, named
in the condition, and clears against the right prediction.

Issue #31's live check: a reader outside Kubernetes that nobody declared
(its address in no range of the client map) trips PredictionDrift on the
cache switch's uplink out against the real planner's plan; declared in
spec.outsideReaders (its range in the map under its rack, the plan counting
it), nothing drifts.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client.parser import text_string_to_metric_families
from netns import veth_namespace, xrdcp_from
from xrootd_fixtures import cache_pool, free_port, start_cache, start_exporter, start_origin, wait_until, xrdcp

from switchyard import conditions as cond
from switchyard.builders.facility import pool_object_name
from switchyard.desired.facility import desired_facility
from switchyard.handlers.drift import expected_hosts
from switchyard.observe.drift import (
    IN, OUT, REASON, SERVE, Assessment, DriftRules, SwitchDrift, SwitchVerdict, assess, observations, observed_gbps,
    observed_uplinks, parse_flows, parse_readings, predictions, record, record_flows, seed, with_drift,
)
from switchyard.observe.exporterspec import exporter_args
from switchyard.policy.settings import Settings
from switchyard.topology import load_topology

pytestmark = pytest.mark.integration

MIB = 1 << 20
NS_SUBNET = "10.213.{}.{}"  # a /30 per test process, on a veth pair this test creates and removes


@pytest.fixture
def reader_namespace() -> Iterator[tuple[str, str, str]]:
    """(namespace, host-side address, namespace address) joined by a veth pair; removed afterwards."""
    with veth_namespace("h3", NS_SUBNET) as joined:
        yield joined


def _served(text: str) -> dict[str, float]:
    return {s.labels["client_switch"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "switchyard_xcache_served_bytes_total"}


def test_bytes_are_counted_under_the_readers_switch(xrd_base, xrootd_account, reader_namespace):
    namespace, host_addr, ns_addr = reader_namespace
    origin = start_origin(xrd_base, xrootd_account)
    data_dir = xrootd_account.make_dir(xrd_base / "data0")
    meta = xrootd_account.make_dir(xrd_base / "meta")
    pool = cache_pool(origin.daemon.port, [str(data_dir)], str(meta))
    client_map = xrd_base / "clients.json"
    client_map.write_text(json.dumps({"switches": {"local": ["127.0.0.0/8"], "remote": [f"{ns_addr}/32"]}}))
    udp_port = free_port(socket.SOCK_DGRAM)
    args = exporter_args(pool, pool_name="fast", switch="local", exporter_port=udp_port)
    args[args.index("--client-map") + 1] = str(client_map)
    exporter = start_exporter([*args, "--host", "cache-host-1"], xrd_base)
    cache = start_cache(xrd_base, xrootd_account, pool, exporter_port=udp_port)
    try:
        local_size, remote_size = 1 * MIB + 3, 4 * MIB + 7
        local_lfn = origin.put("local.bin", os.urandom(local_size))
        remote_lfn = origin.put("remote.bin", os.urandom(remote_size))
        # The remote file is cached first (a cold read through XRootD 5.5 counts re-sent pages, up to
        # ~40% more here), so the namespace reader's bytes are exact; the local file is read cold.
        assert xrdcp(cache.url_for(remote_lfn), xrd_base / "warmup.out").returncode == 0
        wait_until(lambda: (parse_flows(exporter.scrape()) or [None])[0] is not None
                   and parse_flows(exporter.scrape())[0].origin_bytes >= remote_size
                   and _served(exporter.scrape()).get("local", 0) >= remote_size,
                   timeout=30, interval=0.2, what="the warm-up read in the exporter")
        # The operator's view: one read of the exporter before the readers, one after (drift.py, pure).
        before = _served(exporter.scrape())
        history = record_flows({}, parse_flows(exporter.scrape()), time.monotonic(), keep_seconds=600)
        result = xrdcp(cache.url_for(local_lfn), xrd_base / "local.out")
        assert result.returncode == 0, result.stderr
        remote = xrdcp_from(namespace, f"root://{host_addr}:{pool.port}/{remote_lfn}")
        assert remote.returncode == 0, remote.stderr

        def read(switch: str) -> float:
            return _served(exporter.scrape()).get(switch, 0) - before.get(switch, 0)

        wait_until(lambda: read("local") >= local_size and read("remote") >= remote_size
                   and parse_flows(exporter.scrape())[0].origin_bytes >= local_size + remote_size,
                   timeout=30, interval=0.5, what="both readers' bytes and the origin fetch in the exporter")
        # Attribution swapped would put ~4 MiB under 'local' and ~1 MiB under 'remote'.
        assert local_size <= read("local") < local_size + 2 * MIB
        assert remote_size <= read("remote") < remote_size + 256 * 1024
        assert read("unknown") == 0

        [flows] = parse_flows(exporter.scrape())
        history = record_flows(history, [flows], now := time.monotonic(), keep_seconds=600)
        first, last = history[("fast", "cache-host-1")][0], history[("fast", "cache-host-1")][-1]
        span = last.at - first.at   # by the exporter's clock, as the operator's check times a window
        uplinks = observed_uplinks(history, {"local": [("fast", "cache-host-1")], "remote": []}, now,
                                   DriftRules(window_seconds=span, stale_seconds=600))
        gbps = lambda count: count * 8 / span / 1e9  # noqa: E731
        origin_fill = flows.origin_bytes - dict(first.flows)[("", "local")]
        assert origin_fill == local_size
        # Out of 'local' and into 'remote': what the namespace reader read; into 'local': the origin fill.
        assert uplinks[("local", "out")] == pytest.approx(gbps(read("remote")), rel=1e-9)
        assert uplinks[("remote", "in")] == pytest.approx(gbps(read("remote")), rel=1e-9)
        assert uplinks[("local", "in")] == pytest.approx(gbps(origin_fill), rel=1e-9)
        assert uplinks[("remote", "out")] == 0
        judge_against_a_plan(uplinks, now)
    finally:
        cache.daemon.stop()
        exporter.stop()
        origin.daemon.stop()
        origin.meter.close()


def judge_against_a_plan(uplinks: dict, now: float) -> None:
    """A plan predicting twice the measured load out of 'local' drifts there alone; the right one clears it."""
    rules = DriftRules(floor_gbps=1e-6, sustain_seconds=0, clear_seconds=0)
    out, inbound = uplinks[("local", "out")], uplinks[("remote", "in")]
    wrong = {("local", "out"): 2 * out, ("remote", "in"): inbound, ("remote", "out"): 0.0}
    drifted = assess(wrong, uplinks, {}, now, rules)
    assert [v.subject for v in drifted.drifting] == [("local", "out")], drifted.verdicts
    states = with_drift(cond.ready(), drifted)
    degraded = states["Degraded"]
    assert (degraded.status, degraded.reason) == (True, REASON)
    assert f"uplink local out carried {out:.2f} Gbps, predicted {2 * out:.2f} (ratio 0.50)" in degraded.message
    assert "remote" not in degraded.message
    conditions = cond.merge([], 1, "t", **states)
    assert seed(conditions) == {("local", "out"): SwitchDrift(True)}
    right = {**wrong, ("local", "out"): out}
    cleared = assess(right, uplinks, seed(conditions), now, rules)
    assert not cleared.drifting and cleared.cleared == (("local", "out"),)


# ---------------------------------------------------------------- #31: outside readers in the live drift check
FACILITY, POOL = "af", "xcache"
CACHE_SWITCH, RACK = "k8s", "condor"   # the client map puts 127.0.0.0/8 on the cache's switch
NODES = load_topology({"switchLabel": "switchyard.dev/switch", "nvmeLabel": "switchyard.dev/nvme", "wanGbps": 10,
                       "switches": [{"name": CACHE_SWITCH, "uplinkGbps": 10, "nodes": [
                                         {"name": "cache", "count": 1, "nicGbps": 10, "cpu": 16, "memoryGiB": 64,
                                          "nvmeDisks": 1}]},
                                    {"name": RACK, "uplinkGbps": 10}]}).node_infos()
# About 0.2 Gbps (xrdcp --xrate, MiB/s): far under what loopback and the veth pair move on a busy 2-core
# machine, so the reader is paced, not starved, and its rate steady from one window to the next.
PACE_MIB = 24
READ_FILE_MIB = 48          # two seconds a read: xrdcp's start-up is a small part of each
# The handler's rules, shortened to a test's seconds; the floor far under the reader's rate.
LIVE_RULES = DriftRules(threshold=0.25, sustain_seconds=4, clear_threshold=0.15, clear_seconds=2, floor_gbps=0.02,
                        idle_fraction=0.1, window_seconds=10, stale_seconds=10)


def facility_plan(outside: list[dict] | None):
    """The real planner's outcome for a facility with one cache host on CACHE_SWITCH and RACK without nodes."""
    spec = {"targetGbps": 1,
            "network": {"wanGbps": 10, "switches": [{"name": CACHE_SWITCH, "uplinkGbps": 10},
                                                    {"name": RACK, "uplinkGbps": 10}]},
            "cachePools": [{"name": POOL, "serveGbps": 5, "missRatio": 0, "pfc": {"ramGiB": 1},
                            "resources": {"cpu": "2", "memory": "4Gi"},
                            "origin": {"mode": "fixed", "host": "127.0.0.1", "port": 1094}}],
            **({"outsideReaders": outside} if outside else {})}
    return desired_facility(FACILITY, spec, None, NODES, [], [], Settings())


@contextmanager
def steady_reader(namespace: str, url: str) -> Iterator[subprocess.Popen]:
    """The real client in `namespace` reading `url` again and again at PACE_MIB, until the block ends."""
    loop = f"while :; do xrdcp --force --nopbar --xrate {PACE_MIB}m {url} /dev/null || sleep 0.2; done"
    reader = subprocess.Popen(["ip", "netns", "exec", namespace, "sh", "-c", loop], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield reader
    finally:
        os.killpg(reader.pid, signal.SIGTERM)
        reader.wait(timeout=10)


class LiveCheck:
    """handlers/drift.check's reads without the API: the exporter's text through the functions it uses."""

    def __init__(self, exporter, plan_outcome, rules: DriftRules) -> None:
        self.exporter, self.rules = exporter, rules
        self.expected = expected_hosts(plan_outcome.plan, {POOL: pool_object_name(FACILITY, POOL)})
        self.predicted = predictions(plan_outcome.status["plan"])
        self.history: dict = {}
        self.flows: dict = {}
        self.memory: dict = {}

    def read(self) -> Assessment:
        now, text = time.monotonic(), self.exporter.scrape()
        keep = self.rules.window_seconds + self.rules.stale_seconds
        self.history = record(self.history, parse_readings(text), now, keep_seconds=keep)
        self.flows = record_flows(self.flows, parse_flows(text), now, keep_seconds=keep)
        observed = observations(observed_gbps(self.history, self.expected, now, self.rules),
                                observed_uplinks(self.flows, self.expected, now, self.rules))
        result = assess(self.predicted, observed, self.memory, now, self.rules)
        self.memory = result.memory
        return result


def verdict(result: Assessment, subject) -> SwitchVerdict:
    return next(v for v in result.verdicts if v.subject == subject)


def test_an_undeclared_outside_reader_drifts_the_cache_uplink_and_a_declared_one_does_not(
        xrd_base, xrootd_account, reader_namespace):
    namespace, host_addr, ns_addr = reader_namespace
    reader_cidr = str(ipaddress.ip_network(f"{ns_addr}/30", strict=False))
    undeclared = facility_plan(None)
    [cache_host] = undeclared.plan.placement.caches[POOL][CACHE_SWITCH]
    origin = start_origin(xrd_base, xrootd_account)
    pool = cache_pool(origin.daemon.port, [str(xrootd_account.make_dir(xrd_base / "data0"))],
                      str(xrootd_account.make_dir(xrd_base / "meta")))
    client_map = xrd_base / "clients.json"
    client_map.write_text(json.dumps({"switches": {CACHE_SWITCH: ["127.0.0.0/8"]}}))
    udp_port = free_port(socket.SOCK_DGRAM)
    args = exporter_args(pool, pool_name=pool_object_name(FACILITY, POOL), switch=CACHE_SWITCH, exporter_port=udp_port)
    args[args.index("--client-map") + 1] = str(client_map)
    exporter = start_exporter([*args, "--host", cache_host], xrd_base)
    cache = start_cache(xrd_base, xrootd_account, pool, exporter_port=udp_port)
    try:
        size = READ_FILE_MIB * MIB
        lfn = origin.put("steady.bin", os.urandom(size))
        # Cached before the readers (a loopback read): the cache's uplink in stays idle, as missRatio 0 plans.
        assert xrdcp(cache.url_for(lfn), xrd_base / "warmup.out").returncode == 0
        wait_until(lambda: sum(f.origin_bytes for f in parse_flows(exporter.scrape())) >= size,
                   timeout=30, interval=0.2, what="the warm-up fill in the exporter")
        url = f"root://{host_addr}:{pool.port}/{lfn}"

        # Undeclared: the map does not place the reader, the plan does not know it (it predicts 0 everywhere).
        with steady_reader(namespace, url):
            wait_until(lambda: _served(exporter.scrape()).get("unknown", 0) >= size, timeout=30, interval=0.5,
                       what="the undeclared reader's first file, counted 'unknown'")
            check = LiveCheck(exporter, undeclared, LIVE_RULES)
            # Read for a full window at least: the reader's rate below is measured over one.
            drifted = _until(check, lambda r: (CACHE_SWITCH, OUT) in {v.subject for v in r.drifting},
                             LIVE_RULES.window_seconds, timeout=45)
        out, served = verdict(drifted, (CACHE_SWITCH, OUT)), verdict(drifted, (CACHE_SWITCH, SERVE))
        rate = served.observed   # the reader's rate, as the cache's own link-out counter measured it
        print(f"undeclared: {out.describe()}; {served.describe()}")
        assert rate is not None and rate > 5 * LIVE_RULES.floor_gbps, drifted.verdicts
        # Every byte the reader read left the cache's switch: out carries what the cache served.
        assert out.observed == pytest.approx(rate, rel=0.25), drifted.verdicts
        assert verdict(drifted, (RACK, IN)).observed == 0 and not verdict(drifted, (RACK, IN)).drifting
        degraded = with_drift(cond.ready(), drifted)["Degraded"]
        assert (degraded.status, degraded.reason) == (True, REASON)
        assert f"uplink {CACHE_SWITCH} out carried {out.observed:.2f} Gbps, predicted 0.00" in degraded.message

        # Declared: the reader's range in the map under its rack, and in the plan at the rate it was measured
        # reading (the model's Gbps are a facility's; this one reader's are what loopback and a veth move).
        declared = facility_plan([{"name": "condor-a", "switch": RACK, "count": 1, "readGbps": round(rate, 4),
                                   "cidrs": [reader_cidr]}])
        predicted = predictions(declared.status["plan"])
        assert predicted[(CACHE_SWITCH, OUT)] == predicted[(RACK, IN)] == pytest.approx(rate, rel=0.01)
        client_map.write_text(json.dumps({"switches": {CACHE_SWITCH: ["127.0.0.0/8"], RACK: [reader_cidr]}}))
        wait_until(lambda: RACK in _served(exporter.scrape()), timeout=30, interval=0.5,
                   what="the exporter re-reading the client map")
        with steady_reader(namespace, url):
            wait_until(lambda: _served(exporter.scrape()).get(RACK, 0) >= size, timeout=30, interval=0.5,
                       what="the declared reader's first file, counted on its rack")
            unknown_before = _served(exporter.scrape()).get("unknown", 0)
            check = LiveCheck(exporter, declared, LIVE_RULES)
            seen = [check.read()]
            deadline = time.monotonic() + LIVE_RULES.window_seconds + 3 * LIVE_RULES.sustain_seconds
            while time.monotonic() < deadline:
                time.sleep(0.5)
                seen.append(check.read())
            unknown_after = _served(exporter.scrape()).get("unknown", 0)
        last = seen[-1]
        print("declared: " + "; ".join(v.describe() for v in last.verdicts if v.judged))
        assert unknown_after == unknown_before   # the map placed every byte the reader read
        assert not [v.describe() for result in seen for v in result.drifting]
        judged = {v.subject for v in last.verdicts if v.judged}
        assert {(CACHE_SWITCH, SERVE), (CACHE_SWITCH, OUT), (RACK, IN)} <= judged, last.verdicts
        for subject in ((CACHE_SWITCH, OUT), (RACK, IN)):
            assert verdict(last, subject).observed == pytest.approx(rate, rel=LIVE_RULES.threshold), last.verdicts
    finally:
        cache.daemon.stop()
        exporter.stop()
        origin.daemon.stop()
        origin.meter.close()


def _until(check: LiveCheck, done, at_least: float, timeout: float) -> Assessment:
    """Reads every half second until `done(assessment)`, for `at_least` seconds; fails naming the last verdicts
    after `timeout`."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        result = check.read()
        if done(result) and time.monotonic() - start >= at_least:
            return result
        assert time.monotonic() < deadline, [v.describe() for v in result.verdicts]
        time.sleep(0.5)
