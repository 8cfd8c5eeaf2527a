"""web_documents: the HTML captures of a crawl, read from WARC (and legacy ARC) files.

Each response or resource record becomes one decision: kept (an HTML page with its bytes) or removed
with the reason and a short ``detail``, so that a crawl's losses are visible in the funnel. Records
that are not captures (warcinfo, request, metadata, revisit) are not documents; they are only
counted in ``ReadStats``. Real crawls are messy: a truncated or corrupt file must not stop the run,
so what is readable is kept and the rest is counted in ``ReadStats``. WARC files are written as one gzip
member per record so that a reader can skip a damaged member: after damage (a member that fails to
inflate, garbage between members, a bad record header) the reader resynchronises at the next gzip member
(or ``WARC/1.`` line in an uncompressed file), reads on, and counts the bytes and members it skipped.
"""

from __future__ import annotations

import bisect
import gzip
import io
import os
import re
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import BinaryIO

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType
from pydantic import BaseModel, ConfigDict, Field, field_validator
from resiliparse.parse.encoding import detect_mime
from upath import UPath

from marin_pipelines.documents import Decision, Document, Funnel, map_in_processes, write_stage

WARC_SUFFIXES = (".warc", ".warc.gz", ".arc", ".arc.gz")
CAPTURE_TYPES = (WarcRecordType.response, WarcRecordType.resource)
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_MEMBER = _GZIP_MAGIC + b"\x08"  # magic and deflate: where a gzip member can begin
# where a record begins: a version line and a header field (zeros of a disk fault may precede it)
_WARC_START = re.compile(rb"WARC/1\.[01]\r?\n[A-Za-z][\w-]*:")
_SCAN_BYTES = 1 << 20  # read at a time while looking for the next record after damage
_INFLATE_IN = 1 << 18  # compressed bytes inflated per call by the recovering reader
_INFLATE_OUT = 1 << 20  # most bytes one call may inflate to: memory stays bounded inside a huge member
_HEAD_BYTES = 1 << 16  # bytes of a record's start read to recognise it
_ARC_DATE = re.compile(r"\d{14}")


class WebDocumentsConfig(BaseModel):
    """Which captures become documents.

    ``max_record_bytes`` bounds memory per record (Common Crawl truncates payloads at 1 MiB, so
    10 MB only skips outliers such as media served as HTML). ``content_types`` are the MIME types
    that are read as HTML; anything else is ``not_html``. ``shard_docs`` bounds the documents of one
    output shard (memory per worker) and sets how finely the next stages can spread over workers.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_record_bytes: int = Field(10_000_000, gt=0)
    shard_docs: int = Field(1_000, gt=0, description="documents per output shard: the unit of parallelism")
    content_types: tuple[str, ...] = Field(("text/html", "application/xhtml+xml"), min_length=1)

    @field_validator("content_types")
    @classmethod
    def _mime_types(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for mime in value:
            if not re.fullmatch(r"[\w.+-]+/[\w.+-]+", mime):
                raise ValueError(f"content_types: {mime!r} is not a MIME type such as 'text/html'")
        return tuple(mime.lower() for mime in value)


@dataclass
class ReadStats:
    """What the reader saw besides documents: records per type, the places it could not read, and what
    it skipped there to read on (bytes, and gzip members, per file name); files of 0 bytes, if any."""

    files: int = 0
    records: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    skipped_bytes: Counter[str] = field(default_factory=Counter)
    skipped_members: Counter[str] = field(default_factory=Counter)
    empty_files: list[str] = field(default_factory=list)  # 0 bytes: no records

    def add(self, other: ReadStats) -> None:
        self.files += other.files
        self.empty_files += other.empty_files
        self.records.update(other.records)
        self.errors += other.errors
        self.skipped_bytes.update(other.skipped_bytes)
        self.skipped_members.update(other.skipped_members)

    def skip(self, source: str, size: int, members: int) -> None:
        if size or members:
            self.skipped_bytes[source] += size
            self.skipped_members[source] += members

    def as_dict(self) -> dict[str, object]:
        files = sorted(set(self.skipped_bytes) | set(self.skipped_members))
        return {
            "files": self.files,
            "records": dict(sorted(self.records.items())),
            "errors": list(self.errors),
            "skipped": {
                "bytes": sum(self.skipped_bytes.values()),
                "members": sum(self.skipped_members.values()),
                "files": {
                    name: {"bytes": self.skipped_bytes[name], "members": self.skipped_members[name]}
                    for name in files
                },
            },
            **({"empty_files": list(self.empty_files)} if self.empty_files else {}),
        }


@dataclass
class _Capture:
    """One response/resource record from either format, before any decision is taken."""

    id: str
    url: str
    fetch_time: str | None
    block: bytes | None  # None: not read because it is larger than max_record_bytes
    declared_length: int
    is_http: bool
    content_type: str | None  # the record's own Content-Type (used when the block is not HTTP)
    corrupt: str | None = None  # why the record cannot be read, when it cannot


def crawl_path(location: str | os.PathLike[str]) -> Path | UPath:
    """A local path, or an fsspec path for a URL such as ``gs://bucket/crawl`` (gcsfs) or ``memory://``."""
    text = str(location)
    return UPath(text) if "://" in text else Path(text)


def is_warc_file(path: Path | UPath) -> bool:
    return path.name.lower().endswith(WARC_SUFFIXES) and path.is_file()


def find_warc_files(root: str | os.PathLike[str]) -> list[Path | UPath]:
    """All WARC/ARC files under ``root`` (or ``root`` itself), sorted; an error if there are none."""
    root = crawl_path(root)
    if not root.exists():
        raise FileNotFoundError(f"crawl root not found: {root}")
    found = [root] if root.is_file() else sorted(root.rglob("*"))
    found = [p for p in found if is_warc_file(p)]
    if not found:
        raise FileNotFoundError(
            f"no WARC or ARC files ({', '.join('*' + s for s in WARC_SUFFIXES)}) in {root}"
        )
    return found


def write_web_documents(
    warc_paths: Sequence[str | os.PathLike[str]],
    directory: Path,
    config: WebDocumentsConfig | None = None,
    workers: int = 1,
) -> tuple[Funnel, ReadStats]:
    """Read every file into its own numbered shards in ``directory``, ``workers`` files at a time.

    Shards are named by the file's position, so the output and the funnel do not depend on ``workers``.
    """
    config = config or WebDocumentsConfig()
    paths = _expand(warc_paths)
    results = map_in_processes(partial(_write_file, directory, config), list(enumerate(paths)), workers)
    stats = ReadStats()
    for _, file_stats in results:
        stats.add(file_stats)
    return sum((funnel for funnel, _ in results), Funnel()), stats


def _write_file(
    directory: Path, config: WebDocumentsConfig, indexed: tuple[int, Path | UPath]
) -> tuple[Funnel, ReadStats]:
    index, path = indexed
    stats = ReadStats()
    decisions = read_web_documents([path], config, stats)
    return write_stage(decisions, directory, config.shard_docs, unit=index), stats


def _expand(warc_paths: Iterable[str | os.PathLike[str]]) -> list[Path | UPath]:
    """Files as given and folders as the WARC files under them; a missing path fails before any reading."""
    paths: list[Path | UPath] = []
    for path in map(crawl_path, warc_paths):
        if not path.exists():
            raise FileNotFoundError(f"WARC file not found: {path}")
        paths.extend(find_warc_files(path) if path.is_dir() else [path])
    return paths


def read_web_documents(
    warc_paths: Iterable[str | os.PathLike[str]],
    config: WebDocumentsConfig | None = None,
    stats: ReadStats | None = None,
) -> Iterator[Decision]:
    """Decisions for every capture in the files, in file and record order.

    A folder in ``warc_paths`` stands for the WARC files under it. All paths are checked before the
    first record is read, so a typo fails at once with the path in the message.
    """
    config = config or WebDocumentsConfig()
    stats = stats if stats is not None else ReadStats()
    for path in _expand(warc_paths):
        stats.files += 1
        if path.stat().st_size == 0:  # nothing to read, nothing damaged: counted apart from the errors
            stats.empty_files.append(path.name)
            continue
        reader = _arc_captures if _is_arc(path) else _warc_captures
        for capture in reader(path, config, stats):
            yield _decide(capture, path.name, config)


def _decide(capture: _Capture, source: str, config: WebDocumentsConfig) -> Decision:
    """Kept with the HTML bytes, or removed with the reason and a short detail."""
    base: Document = {"id": capture.id, "url": capture.url, "source": source}

    def removed(reason: str, detail: str) -> Decision:
        return {**base, "detail": detail}, reason

    if capture.corrupt:
        return removed("corrupt_record", capture.corrupt)
    if capture.block is None:
        return removed("too_large", f"{capture.declared_length} bytes > max_record_bytes")
    # A record cut short (a truncated file) is kept when its HTTP head is complete: what is there is
    # readable. Without a readable head it is corrupt.
    truncated = len(capture.block) < capture.declared_length
    short = f"; truncated: {len(capture.block)} of {capture.declared_length} bytes" if truncated else ""
    if capture.is_http:
        try:
            status, content_type, charset, body = _parse_http(capture.block)
        except OSError as error:  # fastwarc reports unreadable headers and failed decoding as OSError
            return removed("corrupt_record", f"HTTP payload: {error}{short}")
        if status is None:
            return removed("corrupt_record", f"no HTTP status line{short}")
        if not 200 <= status < 300:
            return removed("http_error", f"HTTP {status}")
    else:
        content_type, charset = _split_content_type(capture.content_type)
        body = capture.block
    if not body.strip():
        return removed("empty_body", "no payload")
    content_type = content_type or _sniff(body)
    if content_type not in config.content_types:
        return removed("not_html", content_type)
    doc = {**base, "fetch_time": capture.fetch_time, "content_type": content_type, "charset": charset}
    return {**doc, "html": body}, None


def _parse_http(block: bytes) -> tuple[int | None, str | None, str | None, bytes]:
    """Status, MIME type, charset and decoded body of an HTTP response, parsed by fastwarc."""
    header = b"WARC/1.0\r\nWARC-Type: response\r\nContent-Type: application/http; msgtype=response\r\n"
    record = WarcRecord.from_bytes(header + b"Content-Length: %d\r\n\r\n" % len(block) + block)
    record.parse_http(auto_decode="all", quirks_mode=True)  # chunked / gzip / br bodies are decoded
    status = record.http_headers.status_code if record.http_headers else None
    content_type = record.http_content_type.lower() if record.http_content_type else None
    return status, content_type, record.http_charset, record.reader.read()


def _sniff(body: bytes) -> str:
    """MIME type of a body served without one: HTML by its opening tags, else resiliparse's magic bytes."""
    head = body[:1024].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
        return "text/html"
    return detect_mime(body[:1024])


def _split_content_type(value: str | None) -> tuple[str | None, str | None]:
    if not value:
        return None, None
    mime, _, params = value.partition(";")
    charset = re.search(r"charset\s*=\s*[\"']?([\w.:-]+)", params, re.IGNORECASE)
    return mime.strip().lower() or None, charset.group(1) if charset else None


def _warc_captures(path: Path | UPath, config: WebDocumentsConfig, stats: ReadStats) -> Iterator[_Capture]:
    """Captures of a WARC file: fastwarc over the whole file, then a recovering pass from its last record.

    fastwarc is fast but stops at the first damage. The recovering pass re-reads from the last record
    fastwarc gave (skipping the records already given), resynchronises after each damage and counts
    what it skipped. On an undamaged file it re-reads only that last record, which finds a last member
    cut short or garbage after it.
    """
    done, last, error = 0, None, None
    run: tuple[int, WarcRecord] | None = None  # the first record read at the last record's stream_pos
    try:
        with _open(path) as source:
            for record in ArchiveIterator(source, parse_http=False, quirks_mode=False):
                if run is None or record.stream_pos != run[1].stream_pos:
                    run = (done, record)
                done, last = done + 1, record
                stats.records[str(record.record_type)] += 1
                if record.record_type in CAPTURE_TYPES:
                    yield _warc_capture(record, config, path.name, done)
    except OSError as failure:
        error = f"{path.name}: {failure} after record {done}"
    with path.open("rb") as raw:
        gzipped = raw.read(2) == _GZIP_MAGIC
        restart = _restart_point(raw, gzipped, [(done - 1, last), run] if last else [])
        if restart is None and error is None and last is not None:
            return  # undamaged as far as fastwarc saw, and its last record cannot be found cheaply again
        damaged = yield from _recover(raw, gzipped, path.name, config, stats, restart or (0, 0), done)
    if error and not damaged:
        stats.errors.append(error)


def _restart_point(
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


def _recover(
    raw: BinaryIO,
    gzipped: bool,
    source: str,
    config: WebDocumentsConfig,
    stats: ReadStats,
    restart: tuple[int, int],
    done: int,
) -> Iterator[_Capture]:
    """Captures from ``restart`` (the file offset of a record, and how many records come before it) to
    the end of the file, past every damage; returns whether there was any.

    Each stretch of undamaged input is parsed by fastwarc; records numbered up to ``done`` were given
    by the fast pass and are skipped, so each record is given once.
    """
    at: int | None
    at, index = restart
    damaged = False
    while at is not None:
        reader: BinaryIO = _Inflated(raw, at) if gzipped else _seek(raw, at)
        last, failure = None, None
        try:
            for record in ArchiveIterator(reader, parse_http=False, quirks_mode=False, stream_detect=False):
                last, index = record, index + 1
                if index <= done:
                    continue
                done = index
                stats.records[str(record.record_type)] += 1
                if record.record_type in CAPTURE_TYPES:
                    yield _cut_short(reader, _warc_capture(record, config, source, index))
        except OSError as error:
            failure = str(error)
        if isinstance(reader, _Inflated):
            damage = _gzip_damage(reader, at, last, failure)
        else:
            damage = _plain_damage(raw, at, last, failure)
        if cut := _cut_by_the_end(raw, reader, last, damage):
            stats.errors.append(f"{source}: {cut}")
            return True
        if damage is None:
            break
        damaged = True
        at = _resynchronise(raw, gzipped, source, stats, *damage)
    return damaged


def _seek(raw: BinaryIO, offset: int) -> BinaryIO:
    raw.seek(offset)
    return raw


def _cut_short(reader: BinaryIO, capture: _Capture) -> _Capture:
    """A record whose block ends at damage is corrupt: its last bytes may be what a broken member
    inflated to. (A file that simply ends is different: what is there is kept, as for a truncated file.)"""
    damage = reader.damage if isinstance(reader, _Inflated) else None
    block = capture.block
    if damage and not damage.truncated and block is not None and len(block) < capture.declared_length:
        capture.block, capture.corrupt = b"", f"cut short by a damaged gzip member at byte {damage.at}"
    return capture


def _gzip_damage(
    reader: _Inflated, start: int, last: WarcRecord | None, failure: str | None
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


def _plain_damage(
    raw: BinaryIO, start: int, last: WarcRecord | None, failure: str | None
) -> tuple[int, int, str] | None:
    """As ``_gzip_damage`` for an uncompressed file: the unreadable bytes begin after the last record's
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


def _cut_by_the_end(
    raw: BinaryIO, reader: BinaryIO, last: WarcRecord | None, damage: tuple[int, int, str] | None
) -> str | None:
    """Why the file ends inside the last record read, if it does. That record was given (what is there
    is kept, as for any truncated file), so nothing is counted as skipped."""
    if last is None:
        return None
    header = _header(last)
    end = last.stream_pos + len(header) + last.content_length
    whole = header.endswith((b"\r\n\r\n", b"\n\n"))
    if isinstance(reader, _Inflated):
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


def _resynchronise(
    raw: BinaryIO, gzipped: bool, source: str, stats: ReadStats, at: int, scan: int, why: str
) -> int | None:
    """The offset of the next record from ``scan`` on (None: there is none); counts and reports the bytes
    from ``at`` to there, and the gzip members that begin in them, as skipped."""
    if gzipped:
        resume, rejected = _next_gzip_member(raw, scan)
    else:
        resume, rejected = _next_warc_header(raw, scan), []
    end = resume if resume is not None else raw.seek(0, io.SEEK_END)
    raw.seek(at)
    damaged_member = {at} if gzipped and raw.read(3) == _GZIP_MEMBER else set()
    size = max(0, end - at)
    members = len({p for p in rejected if at <= p < end} | damaged_member) if size else 0
    stats.skip(source, size, members)
    kind = f" ({members} gzip members)" if gzipped else ""
    where = f"resumed at byte {resume}" if resume is not None else "nothing readable after it"
    stats.errors.append(f"{source}: {why} at byte {at}; skipped {size} bytes{kind}, {where}")
    return resume


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
class _Damage:
    at: int  # file offset where the unreadable bytes begin (a member's start, or the first garbage byte)
    position: int  # the inflated stream's length there
    why: str
    truncated: bool = False  # the file ends inside a member: nothing after it is damaged


class _Inflated(io.RawIOBase):
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
        self.damage: _Damage | None = None

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
        self.damage = _Damage(at, self._position + len(self._output), why, truncated)


def _warc_capture(record: WarcRecord, config: WebDocumentsConfig, source: str, index: int) -> _Capture:
    headers = record.headers
    declared = record.content_length
    record_id = (headers.get("WARC-Record-ID") or "").strip("<>") or _synthetic_id(source, index)
    block, corrupt = None, None
    if declared <= config.max_record_bytes:
        try:
            block = record.reader.read()
        except OSError as error:  # e.g. a gzip member that breaks inside the payload
            block, corrupt = b"", f"payload: {error}"
    return _Capture(
        id=record_id,
        url=(headers.get("WARC-Target-URI") or "").strip("<>"),
        fetch_time=headers.get("WARC-Date"),
        block=block,
        declared_length=declared,
        is_http=record.record_type == WarcRecordType.response
        and "application/http" in (headers.get("Content-Type") or "application/http"),
        content_type=headers.get("Content-Type"),
        corrupt=corrupt,
    )


def _is_arc(path: Path | UPath) -> bool:
    """ARC files start with a ``filedesc://`` line (checked on content, not on the file name)."""
    with _open_maybe_gzip(path) as f:
        try:
            return f.read(11) == b"filedesc://"
        except (OSError, EOFError, zlib.error):
            return False


@contextmanager
def _open(path: Path | UPath) -> Iterator[str | BinaryIO]:
    """What fastwarc reads: a local file's name (its own reader, fastest), or an fsspec file object."""
    if not isinstance(path, UPath):
        yield str(path)
        return
    with path.open("rb") as f:
        yield f


@contextmanager
def _open_maybe_gzip(path: Path | UPath) -> Iterator[BinaryIO]:
    with path.open("rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        yield gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw


def _arc_captures(path: Path | UPath, config: WebDocumentsConfig, stats: ReadStats) -> Iterator[_Capture]:
    """Captures of an ARC v1 file (one header line ``URL IP date content-type length`` per record).

    A header that cannot be parsed gives a ``corrupt_record`` capture when it names a URL; the
    reader then skips lines until the next valid header. URLs may contain spaces, so the fields are
    split from the right.
    """
    with _open_maybe_gzip(path) as f:
        try:
            while line := f.readline():
                offset = f.tell() - len(line)
                if not line.strip():
                    continue
                fields = line.rstrip(b"\r\n").decode("utf-8", "replace").rsplit(" ", 4)
                valid = len(fields) == 5 and fields[4].isdigit() and bool(_ARC_DATE.fullmatch(fields[2]))
                if fields[0].startswith("filedesc:"):  # the file header and its version block
                    stats.records["filedesc"] += 1
                    f.read(int(fields[4]) if valid else 0)
                elif valid:
                    stats.records["arc"] += 1
                    length = int(fields[4])
                    block = f.read(length) if length <= config.max_record_bytes else None
                    if block is None:
                        f.seek(length, 1)
                    yield _Capture(
                        id=_synthetic_id(path.name, offset),
                        url=fields[0],
                        fetch_time=_arc_date(fields[2]),
                        block=block,
                        declared_length=length,
                        is_http=(block or b"").startswith(b"HTTP/"),
                        content_type=fields[3],
                    )
                elif "://" in fields[0]:
                    stats.records["arc"] += 1
                    yield _Capture(
                        id=_synthetic_id(path.name, offset),
                        url=fields[0],
                        fetch_time=None,
                        block=None,
                        declared_length=0,
                        is_http=False,
                        content_type=None,
                        corrupt=f"invalid ARC header: {line[:200]!r}",
                    )
                else:
                    stats.records["unparsed_line"] += 1
        except (OSError, EOFError, zlib.error) as error:
            stats.errors.append(f"{path.name}: {error}")


def _arc_date(digits: str) -> str:
    return f"{digits[:4]}-{digits[4:6]}-{digits[6:8]}T{digits[8:10]}:{digits[10:12]}:{digits[12:14]}Z"


def _synthetic_id(source: str, offset: int) -> str:
    """A stable id for records that have none (ARC): derived from the file name and position."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{source}#{offset}").urn
