"""Observed uplinks (switchyard.observe.drift): exporters' bytes by reader switch and origin fetches -> Gbps per uplink."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from switchyard.observe.clientmap import ClientMap
from switchyard import conditions as cond
from switchyard.observe import drift
from switchyard.observe.drift import REASON, DriftRules, HostFlows, assess, observed_uplinks, parse_flows, with_drift
from switchyard.observe.exporter import ExporterSettings, XCacheCollector

SUMMARY = (Path(__file__).parent / "golden" / "xrootd-5.5.3-summary.xml").read_bytes()
RULES = DriftRules(window_seconds=60, stale_seconds=60)
GB = 1e9 / 8  # bytes per Gbps-second


def _fstream_read(user_id: int, file_id: int, host: str, size: int) -> list[bytes]:
    text = f"xroot/u.1:2@{host}\n".encode()
    login = struct.pack(">BBHII", ord("u"), 0, 12 + len(text), 1, user_id) + text
    opened = struct.pack(">BBhIqI", 1, 1, 24, file_id, size, user_id) + b"/f\x00\x00"
    closed = struct.pack(">BBhIqqq", 0, 0, 32, file_id, size, 0, 0)
    body = opened + closed
    return [login, struct.pack(">BBHI", ord("f"), 0, 8 + len(body), 1) + body]


def test_parse_flows_reads_a_real_collector():
    collector = XCacheCollector(ExporterSettings("pool", "node-1", "sw1", (), (), 0.9, 0.95))
    collector.use_client_map(ClientMap.from_switches({"sw1": ["10.0.1.0/24"], "sw2": ["10.0.2.0/24"]}))
    collector.receive(SUMMARY, 1.0)
    for packet in [*_fstream_read(1, 1, "[::10.0.2.5]", 700), *_fstream_read(2, 2, "[::10.0.1.5]", 50),
                   *_fstream_read(3, 3, "[::172.16.0.1]", 9)]:
        collector.receive(packet, 1.0)
    registry = CollectorRegistry()
    registry.register(collector)
    [flows] = parse_flows(generate_latest(registry).decode())
    assert (flows.pool, flows.host, flows.switch) == ("pool", "node-1", "sw1")
    assert dict(flows.served) == {"sw1": 50, "sw2": 700, "unknown": 9, "unattributed": 0}
    assert flows.started > 0 and flows.origin_bytes == 0
    assert parse_flows("not metrics {") == []


def _reading(host: str, switch: str, served: dict, origin: float, started: float = 1.0) -> HostFlows:
    return HostFlows("pool", host, switch, served, origin, started, reported_at=0.0)


def record_flows(history, readings, seen: float, keep_seconds: float) -> dict:
    """drift.record_flows with each count brought up to date by its exporter at `seen` (the operator's clock)."""
    return drift.record_flows(history, [replace(r, reported_at=seen) for r in readings], seen, keep_seconds)


def test_uplinks_count_cross_switch_serves_and_origin_fetches():
    expected = {"sw1": [("pool", "a")], "sw2": [("pool", "b")], "sw3": []}   # sw3: workers only
    history = record_flows({}, [_reading("a", "sw1", {"sw1": 0, "sw2": 0, "sw3": 0, "unknown": 0}, 0),
                                _reading("b", "sw2", {"sw2": 0, "sw1": 0}, 0)], seen=0, keep_seconds=120)
    history = record_flows(history, [
        _reading("a", "sw1", {"sw1": 50 * 60 * GB, "sw2": 2 * 60 * GB, "sw3": 3 * 60 * GB, "unknown": 7 * 60 * GB},
                 1 * 60 * GB),
        _reading("b", "sw2", {"sw2": 10 * 60 * GB, "sw1": 4 * 60 * GB}, 0.5 * 60 * GB),
    ], seen=60, keep_seconds=120)
    uplinks = observed_uplinks(history, expected, now=60, rules=RULES)
    # a's readers the client map does not place (7) leave sw1 and enter no switch we can name.
    want = {("sw1", "out"): 2 + 3 + 7, ("sw1", "in"): 4 + 1, ("sw2", "out"): 4, ("sw2", "in"): 2 + 0.5,
            ("sw3", "out"): 0, ("sw3", "in"): 3}
    assert uplinks.keys() == want.keys()
    for key, gbps in want.items():
        assert abs(uplinks[key] - gbps) < 1e-9, key


def test_a_direction_is_observed_only_when_every_host_it_depends_on_is_measured():
    expected = {"sw1": [("pool", "a")], "sw2": [("pool", "b")], "sw3": []}
    history = record_flows({}, [_reading("a", "sw1", {"sw2": 0}, 0)], seen=0, keep_seconds=120)
    history = record_flows(history, [_reading("a", "sw1", {"sw2": GB * 60}, 0)], seen=60, keep_seconds=120)
    # b never read: out of sw1 (a's own) and of sw3 (no caches) are known; no "in" is, nor out of sw2.
    assert observed_uplinks(history, expected, now=60, rules=RULES) == {("sw1", "out"): 1.0, ("sw3", "out"): 0.0}
    history = record_flows(history, [_reading("b", "sw2", {}, 0)], seen=60, keep_seconds=120)
    assert ("sw2", "out") not in observed_uplinks(history, expected, now=60, rules=RULES)  # b read once: no window
    assert observed_uplinks(history, expected, now=200, rules=RULES) == {("sw3", "out"): 0.0}  # a and b stale


def test_a_restarted_host_is_measured_from_its_new_start_only():
    expected = {"sw1": [("pool", "a")], "sw2": []}
    history = {}
    for seen, started, served in ((0, 1.0, 900 * GB), (40, 2.0, 0), (80, 2.0, 40 * GB)):
        history = record_flows(history, [_reading("a", "sw1", {"sw2": served}, 0, started)], seen, keep_seconds=120)
    uplinks = observed_uplinks(history, expected, now=80, rules=RULES)
    assert abs(uplinks[("sw1", "out")] - 1.0) < 1e-9 and abs(uplinks[("sw2", "in")] - 1.0) < 1e-9


def test_uplinks_stay_measured_when_reads_come_unevenly():
    # Reads 2.11 s then 1.9 s apart, window 4 s: the read 4.01 s before the last is the window's start; the
    # oldest read inside it, 1.9 s back, is under half a window. The uplink is measured over the 4.01 s.
    rules = DriftRules(window_seconds=4, stale_seconds=10)
    expected = {"sw1": [("pool", "a")], "sw2": []}
    history: dict = {}
    for seen in (0.0, 2.11, 4.01):
        history = record_flows(history, [_reading("a", "sw1", {"sw2": seen * GB}, 0)], seen=seen, keep_seconds=14)
    assert observed_uplinks(history, expected, now=4.01, rules=rules)[("sw1", "out")] == pytest.approx(1.0)


def test_readers_the_map_does_not_place_load_the_cache_switch_out_and_drift_there():
    """Readers the client map does not place (outside the cluster, undeclared) leave the cache host's switch by
    its uplink, into no switch we can name: a plan that knows only sw3's reader drifts on the caches' outs."""
    expected = {"sw1": [("pool", "a")], "sw2": [("pool", "b")], "sw3": [], "unknown": []}  # a switch so named, too
    history = record_flows({}, [_reading("a", "sw1", {"sw3": 0, "unknown": 0}, 0),
                                _reading("b", "sw2", {"unknown": 0}, 0)], seen=0, keep_seconds=120)
    history = record_flows(history, [_reading("a", "sw1", {"sw3": 1 * 60 * GB, "unknown": 6 * 60 * GB}, 0),
                                     _reading("b", "sw2", {"unknown": 2 * 60 * GB}, 0)], seen=60, keep_seconds=120)
    uplinks = observed_uplinks(history, expected, now=60, rules=RULES)
    assert uplinks == pytest.approx({("sw1", "out"): 1 + 6, ("sw2", "out"): 2, ("sw3", "out"): 0,
                                     ("unknown", "out"): 0, ("sw1", "in"): 0, ("sw2", "in"): 0,
                                     ("sw3", "in"): 1, ("unknown", "in"): 0})
    predicted = {("sw1", "out"): 1.0, ("sw2", "out"): 0.0, ("sw3", "in"): 1.0}
    rules = DriftRules(sustain_seconds=0)
    drifted = assess(predicted, uplinks, {}, 60, rules)
    assert [v.subject for v in drifted.drifting] == [("sw1", "out"), ("sw2", "out")]
    message = with_drift(cond.ready(), drifted)["Degraded"].message
    assert message.startswith(REASON) and "uplink sw1 out carried 7.00 Gbps, predicted 1.00 (ratio 7.00)" in message
    assert "uplink sw2 out carried 2.00 Gbps, predicted 0.00 (ratio n/a)" in message


def test_bytes_tied_to_no_reader_load_no_uplink():
    """'unattributed' bytes (a file opened before the exporter started) may be anyone's, a reader on the cache's
    own switch most of all: an exporter restarted under long local reads must not put them on the uplink."""
    expected = {"sw1": [("pool", "a")], "sw2": []}
    history = record_flows({}, [_reading("a", "sw1", {"sw2": 0, "unattributed": 0}, 0)], seen=0, keep_seconds=120)
    history = record_flows(history, [_reading("a", "sw1", {"sw2": 1 * 60 * GB, "unattributed": 9 * 60 * GB}, 0)],
                           seen=60, keep_seconds=120)
    assert observed_uplinks(history, expected, now=60, rules=RULES) == pytest.approx(
        {("sw1", "out"): 1, ("sw2", "out"): 0, ("sw1", "in"): 0, ("sw2", "in"): 1})


def test_an_uplink_and_its_switchs_serve_are_timed_alike_while_the_f_stream_is_late():
    """A reader outside the map at 1 Gbps, read every second; the f-stream is late from the 7th second (the
    count, and when it was brought up to date, stand still). Out of the switch reads what the switch served,
    timed by when the exporter brought the count up to date: by the reads, 4 late seconds of a 10 s window
    read 0.6 of it (CI saw 0.12 Gbps out beside 0.20 served)."""
    rules = DriftRules(window_seconds=10, stale_seconds=10)
    expected = {"sw1": [("pool", "a")]}
    labels = 'pool="pool",host="a",switch="sw1"'
    history: dict = {}
    flows: dict = {}
    for seen in range(12):
        at = min(seen, 7)
        text = (f'switchyard_xcache_served_bytes_total{{{labels},client_switch="unknown"}} {at * GB}\n'
                f"switchyard_xcache_served_bytes_timestamp_seconds{{{labels}}} {1000 + at}\n"
                f"switchyard_xcache_exporter_start_time_seconds{{{labels}}} 1\n")
        history = drift.record(history, drift.parse_readings(text), seen, keep_seconds=20)
        flows = drift.record_flows(flows, parse_flows(text), seen, keep_seconds=20)
    now = 11
    assert drift.observed_gbps(history, expected, now, rules) == {"sw1": pytest.approx(1.0)}
    assert observed_uplinks(flows, expected, now, rules)[("sw1", "out")] == pytest.approx(1.0)
