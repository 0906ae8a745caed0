"""Decode XRootD monitoring packets and keep a cache host's running totals (pure).

Three UDP streams arrive from the cache on loopback:
  * the xrd.report summary: one XML <statistics> document per interval, with
    cumulative counters since the daemon started (link bytes, connections,
    open file handles);
  * the pfc g-stream: JSON records, one `file_close` per file the cache closes,
    with the bytes served from disk (hit), fetched on demand (miss) and read
    around the cache (bypass);
  * the detailed binary records (XrdXrootdMonData.hh) that say who read what:
    a 'u' record per client login (dictid -> "prot/user.pid:sid@host", the
    host an address since the config says `xrd.network nodnr`) and the
    f-stream ('f': file open with the reader's dictid, periodic transfer
    totals, close, user disconnect). Bytes read per file are attributed to the
    client address of the user who opened it, and to the file's path (the open
    record's lfn, which `fstat ... lfn` in the config asks for).

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
from collections.abc import Callable
from dataclasses import dataclass, field

UNKNOWN_SWITCH = "unknown"  # the client switch of bytes whose reader's address the map does not place (clientmap.py)
UNATTRIBUTED = "unattributed"  # ... of bytes tied to no reader at all: the file's open or its login never seen

# Binary monitoring record codes XRootD may send to a monitor destination
# (XrdXrootdMonData.hh); 'g', 'u' and 'f' carry something we decode.
_BINARY_CODES = frozenset(b"=dfgiprtuxUTM")
_GSTREAM_HEADER = struct.Struct(">BBHIIIQ")  # code, pseq, plen, stod, tBeg, tEnd, sID
_MON_HEADER = struct.Struct(">BBHI")  # code, pseq, plen, stod
_DICT_ID = struct.Struct(">I")
_FILE_HEADER = struct.Struct(">BBhI")  # recType, recFlag, recSize, fileID / userID / nRecs
_FILE_XFR = struct.Struct(">qqq")  # bytes read, readv, written: the file's totals so far
_OPEN_SIZE = struct.Struct(">q")  # file size, before the optional user dictid and lfn
_IS_CLOSE, _IS_OPEN, _IS_TIME, _IS_XFR, _IS_DISC = range(5)
_HAS_LFN = 0x01
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


@dataclass(frozen=True)
class UserLogin:
    """A 'u' record: the dictid xrootd gives one client login, and the client's host."""

    user_id: int
    host: str


@dataclass(frozen=True)
class FileOpened:
    file_id: int
    user_id: int | None  # None when the open record carries no lfn (fstat without 'lfn')
    path: str | None = None  # the lfn as the client named it; None without 'lfn'


@dataclass(frozen=True)
class FileRead:
    """Bytes a client read from one open file so far (read + readv), from an xfr or close record."""

    file_id: int
    read_bytes: int
    closed: bool


@dataclass(frozen=True)
class UserGone:
    user_id: int


FileEvent = FileOpened | FileRead | UserGone


@dataclass(frozen=True)
class FileStream:
    """The records of one f-stream packet, in order."""

    events: tuple[FileEvent, ...]


Decoded = Summary | list[FileClose] | Ignored | UserLogin | FileStream


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
    if packet[0] == ord("u"):
        return decode_user_login(packet)
    if packet[0] == ord("f"):
        return decode_file_stream(packet)
    if packet[0] != ord("g"):
        return Ignored(f"binary monitoring record {chr(packet[0])!r}")
    if len(packet) < _GSTREAM_HEADER.size:
        raise MalformedPacket("g-stream record shorter than its header")
    return decode_gstream_text(packet[_GSTREAM_HEADER.size:])


def decode_user_login(packet: bytes) -> UserLogin:
    """A 'u' record: header, dictid, then "prot/user.pid:sid@host\n&key=value..."."""
    start = _MON_HEADER.size + _DICT_ID.size
    if len(packet) <= start:
        raise MalformedPacket("user record without its text")
    (user_id,) = _DICT_ID.unpack_from(packet, _MON_HEADER.size)
    ident = packet[start:].split(b"\n", 1)[0].split(b"\x00", 1)[0]
    _, at, host = ident.rpartition(b"@")
    if not at or not host:
        raise MalformedPacket("user record names no client host")
    try:
        return UserLogin(user_id, host.decode("ascii"))
    except UnicodeDecodeError:
        raise MalformedPacket("user record host is not ASCII") from None


def decode_file_stream(packet: bytes) -> FileStream:
    """An 'f' packet: a time record, then open / xfr / close / disconnect records."""
    events: list[FileEvent] = []
    offset = _MON_HEADER.size
    while offset < len(packet):
        if len(packet) - offset < _FILE_HEADER.size:
            raise MalformedPacket("f-stream record shorter than its header")
        kind, flags, size, ident = _FILE_HEADER.unpack_from(packet, offset)
        if size < _FILE_HEADER.size or offset + size > len(packet):
            raise MalformedPacket(f"f-stream record size {size} does not fit the packet")
        body = packet[offset + _FILE_HEADER.size: offset + size]
        if kind == _IS_OPEN:
            events.append(_file_opened(ident, flags, body))
        elif kind in (_IS_XFR, _IS_CLOSE):
            if len(body) < _FILE_XFR.size:
                raise MalformedPacket("f-stream transfer record without its byte counts")
            read, readv, _ = _FILE_XFR.unpack_from(body)
            if read < 0 or readv < 0:
                raise MalformedPacket("f-stream byte counts are negative")
            events.append(FileRead(ident, read + readv, closed=kind == _IS_CLOSE))
        elif kind == _IS_DISC:
            events.append(UserGone(ident))
        elif kind != _IS_TIME:
            raise MalformedPacket(f"unknown f-stream record type {kind}")
        offset += size
    return FileStream(tuple(events))


def _file_opened(file_id: int, flags: int, body: bytes) -> FileOpened:
    if len(body) < _OPEN_SIZE.size:
        raise MalformedPacket("f-stream open record without the file size")
    if not flags & _HAS_LFN:
        return FileOpened(file_id, None)
    if len(body) < _OPEN_SIZE.size + _DICT_ID.size:
        raise MalformedPacket("f-stream open record without its user")
    (user_id,) = _DICT_ID.unpack_from(body, _OPEN_SIZE.size)
    # The lfn is NUL-terminated and padded; a path the config cannot name is kept, its odd bytes replaced.
    lfn = body[_OPEN_SIZE.size + _DICT_ID.size:].split(b"\x00", 1)[0].decode("utf-8", "replace")
    return FileOpened(file_id, user_id, lfn or None)


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
class _OpenFile:
    client_switch: str
    counted: int = 0
    path: str | None = None


@dataclass
class ClientTotals:
    """Bytes clients read from this cache, by the switch each client sits behind.

    A file's bytes go to the switch of the client that opened it, judged with
    `switch_of` at the open (so a later map change never moves bytes already
    counted between labels). Transfer records carry a file's totals so far: only
    the growth since the last record is added. A file opened before the exporter
    started, or by a login it never saw, counts as UNATTRIBUTED: not 'unknown',
    which says the reader is outside the map (behind another uplink), while
    these may be anyone's (the drift check leaves them out).

    The same growth is added to `path_reads` under the file's path (when its open
    record named one): the per-file read load, which the exporter drains after
    every packet (`take_path_reads`) into its decaying rates, so it stays small.
    """

    switch_of: Callable[[str], str] = lambda host: UNKNOWN_SWITCH
    max_tracked: int = 100_000
    by_switch: dict[str, int] = field(default_factory=dict)
    _users: OrderedDict[int, str] = field(default_factory=OrderedDict)
    _files: OrderedDict[int, _OpenFile] = field(default_factory=OrderedDict)
    path_reads: dict[str, int] = field(default_factory=dict)

    def take_path_reads(self) -> dict[str, int]:
        """Bytes read per path since the last call."""
        taken, self.path_reads = self.path_reads, {}
        return taken

    def add(self, decoded: Decoded) -> None:
        if isinstance(decoded, UserLogin):
            _remember(self._users, decoded.user_id, decoded.host, self.max_tracked)
        elif isinstance(decoded, FileStream):
            for event in decoded.events:
                self._add_event(event)

    def _add_event(self, event: FileEvent) -> None:
        if isinstance(event, FileOpened):
            host = self._users.get(event.user_id) if event.user_id is not None else None
            switch = self.switch_of(host) if host is not None else UNATTRIBUTED
            _remember(self._files, event.file_id, _OpenFile(switch, path=event.path), self.max_tracked)
        elif isinstance(event, FileRead):
            entry = self._files.get(event.file_id) or _OpenFile(UNATTRIBUTED)
            if event.read_bytes > entry.counted:
                growth = event.read_bytes - entry.counted
                self.by_switch[entry.client_switch] = self.by_switch.get(entry.client_switch, 0) + growth
                if entry.path is not None:
                    self.path_reads[entry.path] = self.path_reads.get(entry.path, 0) + growth
                entry.counted = event.read_bytes
            if event.closed:
                self._files.pop(event.file_id, None)
            elif event.file_id not in self._files:
                _remember(self._files, event.file_id, entry, self.max_tracked)
        elif isinstance(event, UserGone):
            self._users.pop(event.user_id, None)


def _remember(table: OrderedDict, key, value, bound: int) -> None:
    table[key] = value
    table.move_to_end(key)
    if len(table) > bound:
        table.popitem(last=False)


@dataclass
class CacheTotals:
    """Running totals of one cache host, fed one decoded packet at a time."""

    max_tracked_files: int = 100_000
    clients: ClientTotals = field(default_factory=ClientTotals)
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
        else:
            self.clients.add(decoded)

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
