"""Bytes read by client switch: the f-stream and user-login decoder, the attribution, the client map."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from switchyard.observe.clientmap import UNATTRIBUTED, UNKNOWN, ClientMap, InvalidClientMap, client_address, render
from switchyard.observe.exporter import ClientMapFile, ExporterSettings, XCacheCollector
from switchyard.xrootd.monitoring import (
    CacheTotals, FileOpened, FileRead, FileStream, MalformedPacket, UserGone, UserLogin, decode,
)

GOLDEN = Path(__file__).parent / "golden"


def _login(user_id: int, host: str) -> bytes:
    text = f"xroot/u.1:2@{host}\n&R=v5.5.3&x=xrdcp".encode()
    return struct.pack(">BBHII", ord("u"), 0, 12 + len(text), 1, user_id) + text


def _open(file_id: int, user_id: int, lfn: bytes = b"/f\x00\x00") -> bytes:
    body = struct.pack(">qI", 100, user_id) + lfn
    return struct.pack(">BBhI", 1, 1, 8 + len(body), file_id) + body


def _xfr(file_id: int, read: int, readv: int = 0, closed: bool = False) -> bytes:
    return struct.pack(">BBhIqqq", 0 if closed else 3, 0, 32, file_id, read, readv, 0)


def _disc(user_id: int) -> bytes:
    return struct.pack(">BBhI", 4, 0, 8, user_id)


def _fstream(*records: bytes) -> bytes:
    time_record = struct.pack(">BBhHHIIQ", 2, 0, 24, 0, len(records), 1, 2, 7)
    body = time_record + b"".join(records)
    return struct.pack(">BBHI", ord("f"), 0, 8 + len(body), 1) + body


def test_captured_login_and_fstream_decode():
    login = decode((GOLDEN / "xrootd-5.5.3-user-login.bin").read_bytes())
    assert login == UserLogin(1, "[::127.0.0.1]")
    stream = decode((GOLDEN / "xrootd-5.5.3-fstream.bin").read_bytes())
    # xrootd 5.5.3 with `fstat ... lfn` (the rendered config) names the path in each open record.
    assert stream == FileStream((FileOpened(2, 1, "/f.bin"), FileRead(2, 3145733, True), UserGone(1),
                                 FileOpened(4, 3, "/f.bin"), FileRead(4, 3145733, True), UserGone(3)))


def test_an_open_without_lfn_names_no_path():
    record = struct.pack(">BBhIq", 1, 0, 16, 7, 100)
    assert decode(_fstream(record)) == FileStream((FileOpened(7, None, None),))


def test_bytes_read_are_counted_per_path_once_and_drained():
    totals = CacheTotals()
    for packet in (_login(1, "[::10.0.1.5]"),
                   _fstream(_open(10, 1, b"/store/a.root\x00\x00\x00"), _open(11, 1, b"/b\x00\x00"), _xfr(10, 100)),
                   _fstream(_xfr(10, 250, 50), _xfr(11, 7, closed=True), _xfr(99, 5))):
        totals.add(decode(packet))
    # File 10 grew 100 -> 300 (read + readv): its growth, once; file 99's open was never seen: no path.
    assert totals.clients.take_path_reads() == {"/store/a.root": 300, "/b": 7}
    assert totals.clients.take_path_reads() == {}


def test_bytes_go_to_the_switch_of_the_reader_who_opened_the_file():
    clients = ClientMap.from_switches({"sw1": ["10.0.1.0/24"], "sw2": ["10.0.2.7", "10.244.2.0/24"]})
    totals = CacheTotals()
    totals.clients.switch_of = clients.switch_of
    for packet in (_login(1, "[::10.0.1.5]"), _login(2, "[::ffff:10.244.2.9]"), _login(3, "somehost.example"),
                   _fstream(_open(10, 1), _open(11, 2), _open(12, 3), _xfr(11, 1000, 500)),
                   _fstream(_xfr(10, 40, closed=True), _xfr(11, 4000, 500), _xfr(12, 7, closed=True), _disc(1)),
                   _fstream(_xfr(11, 4000, 500, closed=True), _xfr(99, 5))):
        totals.add(decode(packet))
    # File 11 grew 1500 -> 4500 over three records: counted once, as its growth. A host name is in no map
    # ('unknown': a reader elsewhere); file 99's open was never seen ('unattributed': anyone's).
    assert totals.clients.by_switch == {"sw1": 40, "sw2": 4500, UNKNOWN: 7, UNATTRIBUTED: 5}
    assert 1 not in totals.clients._users and 11 not in totals.clients._files


def test_a_map_change_does_not_move_bytes_of_files_already_open():
    totals = CacheTotals()
    totals.clients.switch_of = ClientMap.from_switches({"sw1": ["10.0.0.0/8"]}).switch_of
    totals.add(decode(_login(1, "[::10.0.0.1]")))
    totals.add(decode(_fstream(_open(5, 1), _xfr(5, 10))))
    totals.clients.switch_of = ClientMap.from_switches({"sw2": ["10.0.0.0/8"]}).switch_of
    totals.add(decode(_fstream(_xfr(5, 30, closed=True), _open(6, 1), _xfr(6, 1, closed=True))))
    assert totals.clients.by_switch == {"sw1": 30, "sw2": 1}


def test_tracked_users_and_files_are_bounded():
    totals = CacheTotals()
    totals.clients.max_tracked = 4
    for index in range(20):
        totals.add(decode(_login(index, "[::10.0.0.1]")))
        totals.add(decode(_fstream(_open(index, index))))
    assert len(totals.clients._users) == 4 and len(totals.clients._files) == 4


@pytest.mark.parametrize("packet", [
    struct.pack(">BBHI", ord("u"), 0, 8, 1),                                  # no dictid, no text
    struct.pack(">BBHII", ord("u"), 0, 16, 1, 1) + b"no-at-",                 # no '@host'
    _fstream(struct.pack(">BBhI", 3, 0, 16, 1) + bytes(8)),                   # xfr without its three counts
    _fstream(struct.pack(">BBhI", 1, 1, 12, 1) + bytes(4)),                   # open without the file size
    _fstream(struct.pack(">BBhI", 0, 0, 400, 1)),                             # size beyond the packet
    _fstream(struct.pack(">BBhI", 0, 0, 4, 1)),                               # size below a header
    _fstream(struct.pack(">BBhI", 9, 0, 8, 1)),                               # unknown record type
    _fstream(struct.pack(">BBhIqqq", 0, 0, 32, 1, -1, 0, 0)),                 # negative count
    struct.pack(">BBHI", ord("f"), 0, 11, 1) + b"abc",                        # truncated record header
])
def test_malformed_detail_records_are_refused(packet):
    with pytest.raises(MalformedPacket):
        decode(packet)


@pytest.mark.parametrize("host, expected", [
    ("[::127.0.0.1]", "127.0.0.1"), ("[::ffff:10.1.2.3]", "10.1.2.3"), ("10.1.2.3", "10.1.2.3"),
    ("[fd00::5]", "fd00::5"), ("[::1]", "::1"), ("node-1.example", None), ("", None),
])
def test_client_address_reads_xrootd_host_forms(host, expected):
    address = client_address(host)
    assert (str(address) if address is not None else None) == expected


def test_client_map_longest_prefix_wins_and_round_trips():
    text = render({"sw2": ["10.0.0.0/16", "10.0.0.0/16"], "sw1": ["10.0.0.9", "fd00::/64"]})
    clients = ClientMap.from_json(text)
    assert clients.switch_of("[::10.0.0.9]") == "sw1"
    assert clients.switch_of("[::10.0.3.1]") == "sw2"
    assert clients.switch_of("[fd00::7]") == "sw1"
    assert clients.switch_of("[::192.168.0.1]") == UNKNOWN
    assert clients.switch_of("name.example") == UNKNOWN
    assert clients.switches == {"sw1", "sw2"}
    assert render({"sw1": ["10.0.0.9", "fd00::/64"], "sw2": ["10.0.0.0/16"]}) == text


@pytest.mark.parametrize("text", ["[]", "{}", '{"switches": {"sw1": "10.0.0.1"}}', '{"switches": {"sw1": ["nope"]}}',
                                  '{"switches": {"unknown": ["10.0.0.1"]}}', "not json"])
def test_bad_client_maps_are_refused(text):
    with pytest.raises(InvalidClientMap):
        ClientMap.from_json(text)


def _by_label(collector: XCacheCollector, sample_name: str, label: str) -> dict[str, float]:
    """label value -> value of the collector's samples named `sample_name`."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {s.labels[label]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == sample_name}


def _served(collector: XCacheCollector) -> dict[str, float]:
    return _by_label(collector, "switchyard_xcache_served_bytes_total", "client_switch")


def test_collector_serves_bytes_by_client_switch_and_follows_the_map_file(tmp_path):
    path = tmp_path / "clients.json"
    path.write_text(render({"sw1": ["10.0.1.0/24"], "sw2": ["10.0.2.0/24"]}))
    collector = XCacheCollector(ExporterSettings("p", "h", "sw1", (), (), 0.9, 0.95))
    map_file = ClientMapFile(str(path))
    assert map_file.refresh() and not map_file.refresh()
    collector.use_client_map(map_file.map)
    assert _served(collector) == {"sw1": 0, "sw2": 0, UNKNOWN: 0, UNATTRIBUTED: 0}
    for packet in (_login(1, "[::10.0.2.4]"), _fstream(_open(1, 1), _xfr(1, 300, closed=True))):
        collector.receive(packet, 0.0)
    path.write_text("{broken")
    assert not map_file.refresh() and map_file.map.switch_of("[::10.0.2.4]") == "sw2"  # the last good map stays
    path.write_text(render({"sw3": ["10.0.2.0/24"]}))
    assert map_file.refresh()
    collector.use_client_map(map_file.map)
    collector.receive(_fstream(_open(2, 1), _xfr(2, 5, closed=True)), 0.0)
    # sw2's counter stays (a counter never vanishes while the process lives); sw3 is new.
    assert _served(collector) == {"sw2": 300, "sw3": 5, UNKNOWN: 0, UNATTRIBUTED: 0}
    assert collector.packets["user"] == 1 and collector.packets["fstream"] == 2 and collector.malformed == 0


def _hot_files(collector: XCacheCollector) -> dict[str, float]:
    return _by_label(collector, "switchyard_xcache_hot_file_read_bytes_per_second", "path")


def test_collector_serves_the_hottest_files_bounded_and_decaying():
    collector = XCacheCollector(ExporterSettings("p", "h", "sw1", (), (), 0.9, 0.95))
    collector.clock = lambda: 1000.0
    assert _hot_files(collector) == {}
    collector.receive(_login(1, "[::10.0.1.5]"), 1000.0)
    opens = [_open(i, 1, f"/f{i:02d}".encode() + b"\x00") for i in range(30)]
    collector.receive(_fstream(*opens), 1000.0)
    # File i reads (i + 1) x 60 kB at once: its rate is that over tau (60 s), (i + 1) kB/s.
    collector.receive(_fstream(*(_xfr(i, (i + 1) * 60_000) for i in range(30))), 1000.0)
    hot = _hot_files(collector)
    assert sorted(hot) == [f"/f{i:02d}" for i in range(10, 30)]  # the 20 hottest
    assert hot["/f29"] == 30_000.0 and hot["/f10"] == 11_000.0
    collector.clock = lambda: 1000.0 + 60.0 * 2.5  # e^-2.5 = 0.082: only files above 12.2 kB/s stay above 1 kB/s
    assert sorted(_hot_files(collector)) == [f"/f{i:02d}" for i in range(12, 30)]
    collector.clock = lambda: 1000.0 + 60.0 * 10
    assert _hot_files(collector) == {}


def test_refused_packets_are_logged_at_most_once_a_minute(caplog):
    """A monitoring stream that turns bad (a summary xrootd writes that no longer parses, say) says why in the
    exporter's log, not only in a counter: one line a minute, however many packets are refused."""
    collector = XCacheCollector(ExporterSettings("p", "h", "sw1", (), (), 0.9, 0.95))
    with caplog.at_level("WARNING", logger="switchyard.observe.exporter"):
        for second in (0.0, 1.0, 59.0, 60.0, 61.0):
            collector.receive(b"<statistics><stats id='link'>", second)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert collector.malformed == 5
    assert len(refused) == 2 and refused[0].startswith("monitoring packet refused (1 so far): summary is not XML")
