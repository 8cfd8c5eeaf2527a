"""web_documents: the HTML captures of a crawl, read from WARC (and legacy ARC) files.

Each response or resource record becomes one decision: kept (an HTML page with its bytes) or removed
with the reason and a short ``detail``, so that a crawl's losses are visible in the funnel. Records
that are not captures (warcinfo, request, metadata, revisit) are not documents; they are only
counted in ``ReadStats``. Real crawls are messy: a truncated or corrupt file must not stop the run,
so what is readable is kept and the rest is counted in ``ReadStats``. WARC files are written as one gzip
member per record so that a reader can skip a damaged member: after damage (a member that fails to
inflate, garbage between members, a bad record header) the reader resynchronises at the next gzip member
(or ``WARC/1.`` line in an uncompressed file), reads on, and counts the bytes and members it skipped
(the byte-level part: ``warc_resync``).
"""

from __future__ import annotations

import gzip
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
from typing import Any, BinaryIO

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType
from pydantic import BaseModel, ConfigDict, Field, field_validator
from resiliparse.parse.encoding import detect_mime
from upath import UPath

from marin_pipelines.crawl.warc_resync import (
    GZIP_MAGIC,
    Inflated,
    cut_by_the_end,
    gzip_damage,
    plain_damage,
    restart_point,
    resynchronise,
    seek,
)
from marin_pipelines.documents import Decision, Document, Funnel, write_stage
from marin_pipelines.engine import Engine, LocalEngine, Progress, finish_units, map_units

WARC_SUFFIXES = (".warc", ".warc.gz", ".arc", ".arc.gz")
CAPTURE_TYPES = (WarcRecordType.response, WarcRecordType.resource)
_ARC_DATE = re.compile(r"\d{14}")


class WebDocumentsConfig(BaseModel):
    """Which captures become documents.

    ``max_record_bytes`` bounds memory per record (Common Crawl truncates payloads at 1 MiB, so
    10 MB only skips outliers such as media served as HTML). ``content_types`` are the MIME types
    that are read as HTML; anything else is ``not_html``. ``shard_docs`` bounds the documents of one
    output shard (memory per worker) and sets how finely the next stages can spread over workers.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_record_bytes: int = Field(
        10_000_000,
        gt=0,
        description="largest record read, in bytes; a larger one is removed as too_large (bounds memory "
        "per record)",
    )
    shard_docs: int = Field(1_000, gt=0, description="documents per output shard: the unit of parallelism")
    content_types: tuple[str, ...] = Field(
        ("text/html", "application/xhtml+xml"),
        min_length=1,
        description="MIME types read as HTML; a capture of any other is not_html",
    )

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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReadStats:
        """Back from ``as_dict`` (a unit's done record)."""
        files = d["skipped"]["files"]
        return cls(
            files=d["files"],
            records=Counter(d["records"]),
            errors=list(d["errors"]),
            skipped_bytes=Counter({name: f["bytes"] for name, f in files.items()}),
            skipped_members=Counter({name: f["members"] for name, f in files.items()}),
            empty_files=list(d.get("empty_files", [])),
        )

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
    work: str | os.PathLike[str],
    config: WebDocumentsConfig | None = None,
    engine: Engine | None = None,
    progress: Progress | None = None,
) -> tuple[Funnel, ReadStats]:
    """Read every file into its own numbered shards in ``work`` (a folder or URL), one file per unit of
    ``engine``; a rerun reads only the files without a done record.

    Shards are named by the file's position, so the output and the funnel do not depend on the engine.
    """
    config = config or WebDocumentsConfig()
    paths = _expand(warc_paths)
    results = map_units(engine or LocalEngine(1), partial(_write_file, config), paths, str(work), progress)
    finish_units(str(work))
    stats = ReadStats()
    for result in results:
        stats.add(ReadStats.from_dict(result["records"]))
    return sum((Funnel.from_dict(result["funnel"]) for result in results), Funnel()), stats


def _write_file(config: WebDocumentsConfig, unit: int, path: Path | UPath, directory: Path) -> dict[str, Any]:
    stats = ReadStats()
    funnel = write_stage(read_web_documents([path], config, stats), directory, config.shard_docs, unit=unit)
    return {"funnel": funnel.as_dict(), "records": stats.as_dict()}


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
        gzipped = raw.read(2) == GZIP_MAGIC
        restart = restart_point(raw, gzipped, [(done - 1, last), run] if last else [])
        if restart is None and error is None and last is not None:
            return  # undamaged as far as fastwarc saw, and its last record cannot be found cheaply again
        damaged = yield from _recover(raw, gzipped, path.name, config, stats, restart or (0, 0), done)
    if error and not damaged:
        stats.errors.append(error)


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
        reader: BinaryIO = Inflated(raw, at) if gzipped else seek(raw, at)
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
        if isinstance(reader, Inflated):
            damage = gzip_damage(reader, at, last, failure)
        else:
            damage = plain_damage(raw, at, last, failure)
        if cut := cut_by_the_end(raw, reader, last, damage):
            stats.errors.append(f"{source}: {cut}")
            return True
        if damage is None:
            break
        damaged = True
        skipped = resynchronise(raw, gzipped, *damage)
        stats.skip(source, skipped.bytes, skipped.members)
        stats.errors.append(f"{source}: {skipped.message}")
        at = skipped.resume
    return damaged


def _cut_short(reader: BinaryIO, capture: _Capture) -> _Capture:
    """A record whose block ends at damage is corrupt: its last bytes may be what a broken member
    inflated to. (A file that simply ends is different: what is there is kept, as for a truncated file.)"""
    damage = reader.damage if isinstance(reader, Inflated) else None
    block = capture.block
    if damage and not damage.truncated and block is not None and len(block) < capture.declared_length:
        capture.block, capture.corrupt = b"", f"cut short by a damaged gzip member at byte {damage.at}"
    return capture


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
        compressed = raw.read(2) == GZIP_MAGIC
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
