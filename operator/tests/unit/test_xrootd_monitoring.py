"""The monitoring decoder and running totals, on packets recorded from xrootd 5.5.3.

The golden/*.bin and *.xml packets were captured from a real cache reading a
5,000,000-byte file twice (1 MiB blocks): a cold read, then a warm one.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.exposition import generate_latest

from switchyard.observe.exporter import ExporterSettings, XCacheCollector
from switchyard.xrootd.monitoring import CacheTotals, FileClose, Ignored, MalformedPacket, Summary, decode

GOLDEN = Path(__file__).parent / "golden"
SUMMARY = (GOLDEN / "xrootd-5.5.3-summary.xml").read_bytes()
COLD = (GOLDEN / "xrootd-5.5.3-pfc-gstream-cold.bin").read_bytes()
WARM = (GOLDEN / "xrootd-5.5.3-pfc-gstream-warm.bin").read_bytes()


def test_summary_from_xrootd_decodes():
    summary = decode(SUMMARY)
    assert isinstance(summary, Summary)
    assert (summary.program, summary.instance, summary.source) == ("xrootd", "cache", "vm:21095")
    # Two clients each read the 5,000,000-byte file once.
    assert summary.connections_total == 2 and summary.connections == 0
    assert 2 * 5_000_000 <= summary.bytes_sent < 2 * 5_000_000 + 64 * 1024
    assert summary.open_files == 0


def test_gstream_records_from_xrootd_decode():
    cold, warm = decode(COLD), decode(WARM)
    assert [c.access_count for c in cold] == [1] and [c.access_count for c in warm] == [2]
    assert cold[0] == FileClose(lfn="/f1.bin", size=5_000_000, block_size=1 << 20, blocks=5, blocks_done=5,
                                access_count=1, remotes=("127.0.0.1:21094",), hit_bytes=5_000_000, miss_bytes=0,
                                bypass_bytes=0, to_disk_bytes=None)
    assert warm[0].remotes == ()


def test_origin_bytes_count_blocks_reaching_disk_once():
    totals = CacheTotals()
    totals.add(decode(COLD))
    assert totals.origin_bytes == 5_000_000  # XRootD 5.5 called the cold read all hits; the blocks tell the truth
    totals.add(decode(WARM))
    assert totals.origin_bytes == 5_000_000
    assert (totals.hit_bytes, totals.miss_bytes, totals.files_closed) == (10_000_000, 0, 2)


def _close(lfn="/f", access=1, done=3, blocks=4, size=4_000_000, block=1 << 20, todisk=None, bypass=0) -> FileClose:
    return FileClose(lfn, size, block, blocks, done, access, (), 0, 0, bypass, todisk)


def test_partial_then_complete_file_counts_only_new_blocks():
    totals = CacheTotals()
    totals.add([_close(access=1, done=2)])
    totals.add([_close(access=2, done=4)])
    assert totals.origin_bytes == 4_000_000  # 2 MiB, then the rest up to the file size


def test_a_purged_and_refetched_file_counts_again():
    totals = CacheTotals()
    totals.add([_close(access=1, done=4)])
    totals.add([_close(access=1, done=4)])  # the .cinfo was purged: access count starts over
    assert totals.origin_bytes == 8_000_000


def test_unknown_history_counts_nothing_and_todisk_wins_when_sent():
    totals = CacheTotals()
    totals.add([_close(lfn="/seen-before-restart", access=7, done=4)])
    assert totals.origin_bytes == 0
    totals.add([_close(lfn="/new", access=3, done=4, todisk=123, bypass=7)])
    assert totals.origin_bytes == 130


def test_tracked_files_are_bounded():
    totals = CacheTotals(max_tracked_files=3)
    for index in range(10):
        totals.add([_close(lfn=f"/f{index}")])
    assert len(totals._seen) == 3


def test_binary_gstream_header_is_understood():
    payload = b'{"event":"file_close","lfn":"/b","size":10,"blk_size":4096,"n_blks":1,"n_blks_done":1,' \
              b'"access_cnt":1,"attach_t":1,"detach_t":2,"remotes":[],"b_hit":0,"b_miss":10,"b_bypass":0}\x00'
    header = struct.pack(">BBHIIIQ", ord("g"), 1, 24 + len(payload), 1, 1, 2, 99)
    assert decode(header + payload)[0].miss_bytes == 10
    ident = struct.pack(">BBHI", ord("="), 0, 8, 0)
    assert isinstance(decode(ident), Ignored)


@pytest.mark.parametrize("packet", [
    b"", b"\xff\xfe", b"<statistics", b"<other/>", b"<statistics><stats id='info'/></statistics>",
    b'{"event":"file_close","lfn":"/x"}', b"{not json", b'{"event":"file_close","lfn":"/x","size":-1}',
    struct.pack(">BBHI", ord("g"), 0, 99, 0), b"[1,2]",
])
def test_malformed_packets_are_refused(packet):
    with pytest.raises(MalformedPacket):
        decode(packet)


def test_a_stray_angle_bracket_in_numbers_is_tolerated():
    packet = SUMMARY.replace(b"<out>10015024</out>", b"<out>10015024></out>")
    assert decode(packet).bytes_sent == 10015024


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.sampled_from([SUMMARY, COLD, WARM]).flatmap(
    lambda good: st.integers(0, len(good)).map(lambda cut: good[:cut]))))
def test_any_bytes_decode_or_raise_malformed(packet):
    try:
        decode(packet)
    except MalformedPacket:
        pass


def _scrape(collector: XCacheCollector) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            extra = {k: v for k, v in sample.labels.items() if k not in ("pool", "host", "switch")}
            key = sample.name + "".join(f"[{k}={v}]" for k, v in sorted(extra.items()))
            out[key] = sample.value
    return out


def test_collector_counts_malformed_and_keeps_going(tmp_path):
    collector = XCacheCollector(ExporterSettings("p", "h", "s", (str(tmp_path),), (), 0.5, 0.75))
    for packet in (b"junk", COLD, b"<statistics>", SUMMARY, WARM, json.dumps([1]).encode()):
        collector.receive(packet, now=100.0)
    metrics = _scrape(collector)
    assert metrics["switchyard_xcache_monitoring_malformed_packets_total"] == 3
    assert metrics["switchyard_xcache_monitoring_packets_total[kind=gstream]"] == 2
    assert metrics["switchyard_xcache_origin_bytes_total"] == 5_000_000
    assert metrics["switchyard_xcache_client_bytes_total"] == decode(SUMMARY).bytes_sent
    assert metrics["switchyard_xcache_space_watermark_ratio[mark=high][space=data]"] == 0.75
    assert metrics[f"switchyard_xcache_disk_total_bytes[path={tmp_path}]"] > 0
    st = os.statvfs(tmp_path)
    used_fraction = (st.f_blocks - st.f_bfree) / st.f_blocks
    assert abs(metrics["switchyard_xcache_space_usage_ratio[space=data]"] - used_fraction) < 0.01


def test_deeply_nested_json_is_malformed_not_a_crash():
    with pytest.raises(MalformedPacket):
        decode(b'{"event":' + b"[" * 60_000)
