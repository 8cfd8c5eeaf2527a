"""Reading a WARC file again after damage: where the readable records start again, and what is skipped.

WARC files are written as one gzip member per record so that a reader can skip a damaged member. These
are the byte-level parts of that: ``Inflated`` inflates the members from an offset on as one stream that
ends at the first damage (so fastwarc gives every record before it); ``gzip_damage`` / ``plain_damage``
say where the unreadable bytes begin; ``resynchronise`` finds the next gzip member that inflates to a
record header (or the next ``WARC/1.`` line in an uncompressed file) and says what it skipped. The
records themselves stay fastwarc's to parse (``web_documents``).
"""

from __future__ import annotations

import bisect
import io
import re
import zlib
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

from fastwarc.warc import WarcRecord

GZIP_MAGIC = b"\x1f\x8b"
_GZIP_MEMBER = GZIP_MAGIC + b"\x08"  # magic and deflate: where a gzip member can begin
# where a record begins: a version line and a header field (zeros of a disk fault may precede it)
_WARC_START = re.compile(rb"WARC/1\.[01]\r?\n[A-Za-z][\w-]*:")
_SCAN_BYTES = 1 << 20  # read at a time while looking for the next record after damage
_INFLATE_IN = 1 << 18  # compressed bytes inflated per call by the recovering reader
_INFLATE_OUT = 1 << 20  # most bytes one call may inflate to: memory stays bounded inside a huge member
_HEAD_BYTES = 1 << 16  # bytes of a record's start read to recognise it


def restart_point(
    raw: BinaryIO, gzipped: bool, candidates: list[tuple[int, WarcRecord] | None]
) -> tuple[int, int] | None:
    """The file offset and number of the first candidate record found where it says it begins (its
    record id in the header there), or None.

    In a gzip file fastwarc's ``stream_pos`` is the start of the member a record was read from only for
    the first record of a member (often the only one), so it is checked.
    """
    for index, record in filter(None, candidates):
        record_id = (record.headers.get("WARC-Record-ID") or "").encode()
        head = _head(raw, record.stream_pos, gzipped)
        header = head.partition(b"\r\n\r\n")[0]
        if _is_warc_head(head) and (record_id in header if record_id else not gzipped):
            return record.stream_pos, index
    return None


def seek(raw: BinaryIO, offset: int) -> BinaryIO:
    raw.seek(offset)
    return raw


def gzip_damage(
    reader: Inflated, start: int, last: WarcRecord | None, failure: str | None
) -> tuple[int, int, str] | None:
    """Where the unreadable bytes begin, where to look for the next member from, and why; None at a
    clean end.

    A record header that fastwarc cannot parse spoils the member it lies in (the one after the last
    record's end); the next member is looked for after the last record's first member.
    """
    damage = reader.damage
    if failure is not None:
        if last is None:
            position, at, scan = 0, start, start + 1
        else:
            position = last.stream_pos + len(_header(last)) + last.content_length
            # + 4: past the blank lines that end the record, into the member of what follows it
            at, scan = reader.member_at(position + 4), reader.member_at(last.stream_pos) + 1
        if damage is None or (position < damage.position and at < damage.at):
            return at, scan, failure
    return None if damage is None else (damage.at, damage.at + 1, damage.why)


def plain_damage(
    raw: BinaryIO, start: int, last: WarcRecord | None, failure: str | None
) -> tuple[int, int, str] | None:
    """As ``gzip_damage`` for an uncompressed file: the unreadable bytes begin after the last record's
    end, and the next record is looked for after them (not inside the last record: a page may quote
    a WARC record)."""
    if failure is None:
        return None
    if last is None:
        return start, start + 1, failure
    end = last.stream_pos + len(_header(last)) + last.content_length
    raw.seek(end)
    blank = raw.read(64)
    at = end + len(blank) - len(blank.lstrip(b"\r\n"))
    return at, at + 1, failure


def cut_by_the_end(
    raw: BinaryIO, reader: BinaryIO, last: WarcRecord | None, damage: tuple[int, int, str] | None
) -> str | None:
    """Why the file ends inside the last record read, if it does. That record was given (what is there
    is kept, as for any truncated file), so nothing is counted as skipped."""
    if last is None:
        return None
    header = _header(last)
    end = last.stream_pos + len(header) + last.content_length
    whole = header.endswith((b"\r\n\r\n", b"\n\n"))
    if isinstance(reader, Inflated):
        ends = reader.damage  # the stream ends at the end of the file, inside a member
        if not (ends and ends.truncated and damage and damage[0] == ends.at):
            return None
        if whole and end <= ends.position:
            return None  # the last record is whole: the member cut short after it is skipped
        return (
            f"the file ends inside the record in the gzip member at byte {reader.member_at(last.stream_pos)}"
        )
    if damage is not None or (whole and end <= raw.seek(0, io.SEEK_END)):
        return None
    return f"the file ends inside the record at byte {last.stream_pos}"


def _header(record: WarcRecord) -> bytes:
    """The record's header block as it was read (fastwarc writes it back byte for byte)."""
    out = io.BytesIO()
    record.headers.write(out)
    return out.getvalue()


def resynchronise(raw: BinaryIO, gzipped: bool, at: int, scan: int, why: str) -> Skipped:
    """The offset of the next record from ``scan`` on (None: there is none), and what is skipped to reach
    it: the bytes from ``at`` on, and the gzip members that begin in them."""
    if gzipped:
        resume, rejected = _next_gzip_member(raw, scan)
    else:
        resume, rejected = _next_warc_header(raw, scan), []
    end = resume if resume is not None else raw.seek(0, io.SEEK_END)
    raw.seek(at)
    damaged_member = {at} if gzipped and raw.read(3) == _GZIP_MEMBER else set()
    size = max(0, end - at)
    members = len({p for p in rejected if at <= p < end} | damaged_member) if size else 0
    kind = f" ({members} gzip members)" if gzipped else ""
    where = f"resumed at byte {resume}" if resume is not None else "nothing readable after it"
    return Skipped(resume, size, members, f"{why} at byte {at}; skipped {size} bytes{kind}, {where}")


def _next_gzip_member(raw: BinaryIO, start: int) -> tuple[int | None, list[int]]:
    """The first gzip member from ``start`` on that inflates to a WARC record's start, and the places
    passed over that looked like one (a gzip header) but are not."""
    rejected: list[int] = []
    position = start
    while True:
        raw.seek(position)
        block = raw.read(_SCAN_BYTES)
        found = block.find(_GZIP_MEMBER)
        while found >= 0:
            if _is_warc_head(_head(raw, position + found, True)):
                return position + found, rejected
            rejected.append(position + found)
            found = block.find(_GZIP_MEMBER, found + 1)
        if len(block) < _SCAN_BYTES:
            return None, rejected
        position += len(block) - len(_GZIP_MEMBER) + 1


def _next_warc_header(raw: BinaryIO, start: int) -> int | None:
    """The first offset from ``start`` on where a WARC record header begins (``WARC/1.0`` or ``1.1``)."""
    overlap = 256  # a match that may run past the block's end is looked for again in the next block
    position = start
    while True:
        raw.seek(position)
        block = raw.read(_SCAN_BYTES)
        found = _WARC_START.search(block)
        final = len(block) < _SCAN_BYTES
        if found and (final or found.start() < len(block) - overlap):
            return position + found.start()
        if final:
            return None
        position += len(block) - overlap


def _head(raw: BinaryIO, offset: int, gzipped: bool) -> bytes:
    """The first bytes of what starts at ``offset``: inflated for a gzip member, as far as it inflates."""
    raw.seek(offset)
    data = raw.read(_HEAD_BYTES)
    return _salvage(zlib.decompressobj(31), data, _HEAD_BYTES) if gzipped else data


def _is_warc_head(head: bytes) -> bool:
    return _WARC_START.match(head.lstrip(b"\r\n")) is not None


def _salvage(member: zlib._Decompress, data: bytes, limit: int) -> bytes:
    """What ``data`` inflates to before any damage in it, fed in small steps (at most about ``limit``)."""
    out: list[bytes] = []
    size = 0
    for step in range(0, len(data), 512):
        try:
            out.append(member.decompress(data[step : step + 512], limit - size))
        except zlib.error:
            break
        size += len(out[-1])
        if size >= limit or member.eof:
            break
    return b"".join(out)


@dataclass
class Damage:
    at: int  # file offset where the unreadable bytes begin (a member's start, or the first garbage byte)
    position: int  # the inflated stream's length there
    why: str
    truncated: bool = False  # the file ends inside a member: nothing after it is damaged


class Inflated(io.RawIOBase):
    """The WARC bytes of the gzip members from ``start`` on, as one stream that ends at the first damage.

    Damage (a member that fails to inflate, bytes that are not a member, a member cut by the end of the
    file) ends the stream as the end of a file would, so fastwarc gives every record inflated before it;
    ``damage`` then says where it is. Members are concatenated as gzip readers do (a record may span
    several); memory is bounded by the read sizes, however large a member is.
    """

    def __init__(self, raw: BinaryIO, start: int) -> None:
        super().__init__()
        raw.seek(start)
        self._raw = raw
        self._input = b""  # compressed bytes read, not yet inflated
        self._offset = start  # file offset of _input[0]
        self._member: zlib._Decompress | None = None
        self._output = memoryview(b"")
        self._position = 0  # bytes handed out
        self._starts: list[int] = []  # position at which each member begun starts
        self._offsets: list[int] = []  # its file offset
        self.damage: Damage | None = None

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._output and self._inflate():
            pass
        size = min(len(buffer), len(self._output))
        buffer[:size] = self._output[:size]
        self._output = self._output[size:]
        self._position += size
        return size

    def member_at(self, position: int) -> int:
        """The file offset of the member that the inflated ``position`` lies in."""
        return self._offsets[max(bisect.bisect_right(self._starts, position) - 1, 0)]

    def _inflate(self) -> bool:
        """Inflate the next step into ``_output``; False at the end of the stream."""
        if self.damage or (self._member is None and not self._begin_member()):
            return False
        assert self._member is not None
        at_end = not self._input and not self._read()
        before = self._member.copy()  # to salvage what inflates before damage in this step
        try:
            out = self._member.decompress(self._input, _INFLATE_OUT)
        except zlib.error as error:
            self._output = memoryview(_salvage(before, self._input, _INFLATE_OUT))
            self._fail(self._offsets[-1], f"damaged gzip member ({error})")
            return True
        if at_end and not out and not self._member.eof:
            self._fail(self._offsets[-1], "gzip member cut short by the end of the file", truncated=True)
            return False
        rest = self._member.unused_data if self._member.eof else self._member.unconsumed_tail
        self._offset += len(self._input) - len(rest)
        self._input = rest
        if self._member.eof:
            self._member = None
        self._output = memoryview(out)
        return True

    def _begin_member(self) -> bool:
        while len(self._input) < len(_GZIP_MEMBER) and self._read():
            pass
        if not self._input:
            return False  # the file ends after a whole member
        if not self._input.startswith(_GZIP_MEMBER):
            cut = _GZIP_MEMBER.startswith(self._input)
            why = (
                "gzip member cut short by the end of the file" if cut else "bytes that are not a gzip member"
            )
            self._fail(self._offset, why, truncated=cut)
            return False
        self._member = zlib.decompressobj(31)
        self._starts.append(self._position)
        self._offsets.append(self._offset)
        return True

    def _read(self) -> bool:
        more = self._raw.read(_INFLATE_IN)
        self._input += more
        return bool(more)

    def _fail(self, at: int, why: str, truncated: bool = False) -> None:
        self.damage = Damage(at, self._position + len(self._output), why, truncated)


class Skipped(NamedTuple):
    """What ``resynchronise`` found: where reading resumes (None: nowhere), and what it skipped."""

    resume: int | None
    bytes: int
    members: int
    message: str
