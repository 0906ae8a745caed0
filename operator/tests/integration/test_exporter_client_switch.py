"""Bytes read from a real cache, by the reader's switch: a reader on loopback and one in a network namespace.

The exporter's client map puts 127.0.0.0/8 behind switch 'local' and the
namespace's address behind 'remote'; each reader reads a file of its own size,
so bytes counted under the wrong switch (or under 'unknown') fail the test.
The uplink loads they make are then judged against a plan (drift.assess): one
that predicted twice the namespace reader's bytes out of 'local' drifts, named
in the condition, and clears against the right prediction.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from netns import veth_namespace, xrdcp_from
from xrootd_fixtures import cache_pool, free_port, start_cache, start_exporter, start_origin, wait_until, xrdcp

from switchyard import conditions as cond
from switchyard.observe.drift import (
    REASON, DriftRules, SwitchDrift, assess, observed_uplinks, parse_flows, record_flows, seed, with_drift,
)
from switchyard.observe.exporterspec import exporter_args

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
        first = history[("fast", "cache-host-1")][0]
        span = now - first.seen
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
