"""Decode XRootD monitoring packets and keep a cache host's running totals (pure).

Two UDP streams arrive from the cache on loopback:
  * the xrd.report summary: one XML <statistics> document per interval, with
    cumulative counters since the daemon started (link bytes, connections,
    open file handles);
  * the pfc g-stream: JSON records, one `file_close` per file the cache closes,
    with the bytes served from disk (hit), fetched on demand (miss) and read
    around the cache (bypass).

XRootD 5.5 reports a cold read with prefetching on as 100% hits (xrootd#2366),
so bytes fetched from the origin are not b_miss: newer releases send b_todisk,
which is used when present; otherwise they are estimated from the growth of
the file's blocks on disk between close records, which is exact for whole
files and never counts the same block twice.
"""

from __future__ import annotations

import json
import re
import struct
import xml.etree.ElementTree as ET
from collections import OrderedDict
from dataclasses import dataclass, field

# Binary monitoring record codes XRootD may send to a monitor destination
# (XrdXrootdMonData.hh); only 'g' carries something we decode.
_BINARY_CODES = frozenset(b"=dfgiprtuxUTM")
_GSTREAM_HEADER = struct.Struct(">BBHIIIQ")  # code, pseq, plen, stod, tBeg, tEnd, sID
_LEADING_INT = re.compile(r"\s*(-?\d+)")


class MalformedPacket(ValueError):
    """A packet that is neither a summary, a g-stream nor a known binary record."""


@dataclass(frozen=True)
class Summary:
    """What one xrd.report <statistics> document says (counters since start)."""

    source: str
    program: str
    instance: str
    pid: int
    started: int
    reported: int
    connections: int
    connections_total: int
    bytes_received: int
    bytes_sent: int
    open_files: int | None


@dataclass(frozen=True)
class FileClose:
    """One pfc g-stream file_close record."""

    lfn: str
    size: int
    block_size: int
    blocks: int
    blocks_done: int
    access_count: int
    remotes: tuple[str, ...]
    hit_bytes: int
    miss_bytes: int
    bypass_bytes: int
    to_disk_bytes: int | None


@dataclass(frozen=True)
class Ignored:
    """A well-formed packet that carries nothing we export (e.g. an ident record)."""

    reason: str


Decoded = Summary | list[FileClose] | Ignored


def decode(packet: bytes) -> Decoded:
    """Classify and decode one UDP datagram; raises MalformedPacket."""
    if not packet:
        raise MalformedPacket("empty packet")
    start = packet.lstrip()[:1]
    if start == b"<":
        return decode_summary(packet)
    if start == b"{":
        return decode_gstream_text(packet)
    if packet[0] in _BINARY_CODES:
        return _decode_binary(packet)
    raise MalformedPacket(f"unknown packet start {packet[:1]!r}")


def _decode_binary(packet: bytes) -> Decoded:
    if len(packet) < 8:
        raise MalformedPacket("binary record shorter than its header")
    plen = struct.unpack_from(">H", packet, 2)[0]
    if plen != len(packet):
        raise MalformedPacket(f"binary record says {plen} bytes, got {len(packet)}")
    if packet[0] != ord("g"):
        return Ignored(f"binary monitoring record {chr(packet[0])!r}")
    if len(packet) < _GSTREAM_HEADER.size:
        raise MalformedPacket("g-stream record shorter than its header")
    return decode_gstream_text(packet[_GSTREAM_HEADER.size:])


def _int(element: ET.Element | None, path: str) -> int | None:
    node = element.find(path) if element is not None else None
    if node is None or node.text is None:
        return None
    # XRootD 5.5 writes some values with a stray '>' ("0>"): read the number.
    match = _LEADING_INT.match(node.text)
    return int(match.group(1)) if match else None


def decode_summary(packet: bytes) -> Summary:
    """Decode an xrd.report <statistics> document."""
    try:
        root = ET.fromstring(packet.rstrip(b"\x00 \n"))
    except ET.ParseError as error:
        raise MalformedPacket(f"summary is not XML: {error}") from None
    if root.tag != "statistics":
        raise MalformedPacket(f"summary root is <{root.tag}>, not <statistics>")
    sections = {stats.get("id"): stats for stats in root.findall("stats")}
    link = sections.get("link")
    if link is None:
        raise MalformedPacket("summary has no link section (xrd.report must include 'all' or 'link')")
    values = {name: _int(link, name) for name in ("num", "tot", "in", "out")}
    if None in values.values():
        raise MalformedPacket("summary link section lacks num, tot, in or out")
    try:
        pid, started, reported = (int(root.get(key, "0")) for key in ("pid", "tos", "tod"))
    except ValueError:
        raise MalformedPacket("summary pid, tos or tod is not a number") from None
    return Summary(
        source=root.get("src", ""),
        program=root.get("pgm", ""),
        instance=root.get("ins", ""),
        pid=pid,
        started=started,
        reported=reported,
        connections=values["num"],
        connections_total=values["tot"],
        bytes_received=values["in"],
        bytes_sent=values["out"],
        open_files=_int(sections.get("ofs"), "han"),
    )


def decode_gstream_text(payload: bytes) -> list[FileClose] | Ignored:
    """Decode the JSON lines of a g-stream packet (after any binary header)."""
    try:
        text = payload.split(b"\x00", 1)[0].decode()
    except UnicodeDecodeError:
        raise MalformedPacket("g-stream payload is not UTF-8") from None
    closes: list[FileClose] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise MalformedPacket("g-stream line is not JSON") from None
        if not isinstance(record, dict):
            raise MalformedPacket("g-stream record is not an object")
        if record.get("event") == "file_close":
            closes.append(_file_close(record))
    return closes if closes else Ignored("g-stream packet without file_close records")


def _file_close(record: dict) -> FileClose:
    def number(key: str, default: int | None = None) -> int:
        value = record.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise MalformedPacket(f"file_close field {key!r} is not a count")
        return value

    remotes = record.get("remotes", [])
    if not isinstance(remotes, list) or not all(isinstance(r, str) for r in remotes):
        raise MalformedPacket("file_close remotes is not a list of hosts")
    lfn = record.get("lfn")
    if not isinstance(lfn, str):
        raise MalformedPacket("file_close lfn is not a string")
    return FileClose(
        lfn=lfn,
        size=number("size"),
        block_size=number("blk_size"),
        blocks=number("n_blks"),
        blocks_done=number("n_blks_done"),
        access_count=number("access_cnt"),
        remotes=tuple(remotes),
        hit_bytes=number("b_hit"),
        miss_bytes=number("b_miss"),
        bypass_bytes=number("b_bypass", 0),
        to_disk_bytes=number("b_todisk") if "b_todisk" in record else None,
    )


@dataclass
class _FileSeen:
    access_count: int
    blocks_done: int


@dataclass
class CacheTotals:
    """Running totals of one cache host, fed one decoded packet at a time."""

    max_tracked_files: int = 100_000
    summary: Summary | None = None
    hit_bytes: int = 0
    miss_bytes: int = 0
    bypass_bytes: int = 0
    origin_bytes: int = 0
    files_closed: int = 0
    _seen: OrderedDict[str, _FileSeen] = field(default_factory=OrderedDict)

    def add(self, decoded: Decoded) -> None:
        if isinstance(decoded, Summary):
            self.summary = decoded
        elif isinstance(decoded, list):
            for close in decoded:
                self._add_close(close)

    def _add_close(self, close: FileClose) -> None:
        self.files_closed += 1
        self.hit_bytes += close.hit_bytes
        self.miss_bytes += close.miss_bytes
        self.bypass_bytes += close.bypass_bytes
        fetched = close.to_disk_bytes if close.to_disk_bytes is not None else self._new_bytes_on_disk(close)
        self.origin_bytes += fetched + close.bypass_bytes

    def _new_bytes_on_disk(self, close: FileClose) -> int:
        """Bytes of blocks that reached disk since this file's previous close."""
        previous = self._seen.pop(close.lfn, None)
        self._seen[close.lfn] = _FileSeen(close.access_count, close.blocks_done)
        if len(self._seen) > self.max_tracked_files:
            self._seen.popitem(last=False)
        if previous is not None and close.access_count > previous.access_count:
            before = previous.blocks_done
        elif previous is not None or close.access_count == 1:
            before = 0  # first access, or the cache purged and refetched the file
        else:
            return 0  # history unknown (exporter restarted): count nothing rather than guess
        return max(0, _bytes_in_blocks(close, close.blocks_done) - _bytes_in_blocks(close, before))


def _bytes_in_blocks(close: FileClose, blocks: int) -> int:
    return min(blocks * close.block_size, close.size)
