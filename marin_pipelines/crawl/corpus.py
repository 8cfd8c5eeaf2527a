"""Documents from existing datasets: parquet, JSON lines (plain, gzip or zstandard) and Hugging Face datasets
saved to disk (``save_to_disk``: Arrow files), local or behind any fsspec URL, as the document shards the
text stages read (``documents-*.parquet``: ``id``, ``text`` and the kept fields).

The files are cut into the chunks of ``tokenize/text_sources.py`` (a parquet row group, a byte range of a
plain JSON-lines file, a whole compressed or Arrow file), one unit of the engine each, so a killed run
redoes only the units without a done record, and the shards and funnel do not depend on the workers.
A row that cannot be a document is not an error: it is counted under its reason, written to
``removed-*.parquet`` with its file and row or line, and the first few places are named in the metadata.
Only a field mapping that matches nothing (no row has the text field, a kept field no file has) fails.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import xxhash
import zstandard
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from marin_pipelines.crawl.snapshots import SNAPSHOT_KEY, SNAPSHOT_RULE
from marin_pipelines.documents import MISSING_FIELD, Decision, Document, Funnel, write_stage
from marin_pipelines.engine import Engine, LocalEngine, Progress, finish_units, map_units
from marin_pipelines.tokenize.text_sources import (
    Record,
    TextChunk,
    chunk_records,
    file_chunks,
    find_files,
    kind_of,
    rows_before,
    text_id,
)

# JSON lines under either name, as the big dumps ship them (Dolma, DCLM: .json.gz / .jsonl.zst)
SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst", ".arrow")
TABLES = ("parquet", "arrow")  # chunk kinds read as columns; the others are JSON lines
HF_DATASET = "state.json"  # what save_to_disk writes beside a Dataset's Arrow files
HF_DATASET_DICT = "dataset_dict.json"  # ... and beside a DatasetDict's split folders
# why a row is not a document (and MISSING_FIELD: no text field, or a null one)
NOT_TEXT = "not_text"  # the text field is not a string
EMPTY = "empty"  # nothing but whitespace
TOO_LARGE = "too_large"  # more than max_chars characters
UNDECODABLE_LINE = "undecodable_line"  # a JSON line that is not JSON, not UTF-8, or not an object
REASONS = (MISSING_FIELD, NOT_TEXT, EMPTY, TOO_LARGE, UNDECODABLE_LINE)
PLACES = 5  # the places named per reason in the metadata (removed-*.parquet has every one)
SURROGATE = re.compile("[\ud800-\udfff]")  # a JSON escape of half a UTF-16 pair: no UTF-8 text


class CorpusConfig(BaseModel):
    """Which files, and how their rows map to documents."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paths: list[str] = Field(
        default_factory=list,
        description="files, folders or fsspec URLs (gs://...): parquet, JSON lines (.jsonl, .json.gz, "
        ".jsonl.gz, .jsonl.zst), .arrow, or a folder written by a Hugging Face dataset's save_to_disk; "
        "none when the files are another step's output (the step's files input)",
    )
    globs: list[str] = Field(
        default_factory=list, description="patterns under each folder (e.g. 'data/*.parquet'); [] for all"
    )
    text_field: str = Field("text", min_length=1, description="the field holding each document's text")
    id_field: str = Field(
        "id", min_length=1, description="the field holding its id; a row without one gets a hash of its text"
    )
    keep_fields: list[str] = Field(default_factory=list, description="fields kept as columns beside the text")
    limit: int | None = Field(None, ge=1, description="read at most this many rows, in file order")
    sample: float = Field(1.0, gt=0, le=1, description="the fraction of rows read, chosen by seed")
    seed: int = Field(0, ge=0, description="the seed of the sample")
    max_chars: int = Field(1_000_000, ge=1, description="a longer text is left out as too_large")
    snapshot: str = Field("corpus", description="the partition key: the corpus is one snapshot")

    @field_validator("keep_fields")
    @classmethod
    def _kept_apart(cls, kept: list[str], info: ValidationInfo) -> list[str]:
        clash = {"id", "text", info.data.get("text_field"), info.data.get("id_field")} & set(kept)
        if clash:
            raise ValueError(f"{sorted(clash)} are kept already, as the id and text columns")
        return kept

    @field_validator("snapshot")
    @classmethod
    def _snapshot_key(cls, snapshot: str) -> str:
        if not SNAPSHOT_KEY.fullmatch(snapshot):
            raise ValueError(f"{snapshot!r}: use {SNAPSHOT_RULE}")
        return snapshot

    def snapshots(self, strict: bool = False) -> list[str]:
        return [self.snapshot]


class FieldMappingError(ValueError):
    """The field mapping matches nothing in the files: running again cannot help."""


def corpus_files(config: CorpusConfig) -> dict[str, dict[str, Any]]:
    """The files behind ``config.paths`` (URL -> fsspec info), in order: a saved Hugging Face dataset's
    Arrow files (a DatasetDict's splits in its order), else the readable files ``globs`` pick."""
    files: dict[str, dict[str, Any]] = {}
    for path in config.paths:
        fs, root = fsspec.core.url_to_fs(path)
        saved = _saved_dataset(fs, root.rstrip("/"))
        if saved is None:
            files.update(find_files([path], SUFFIXES, config.globs))
        else:
            files.update((fs.unstrip_protocol(name), fs.info(name)) for name in saved)
    return files


def _saved_dataset(fs: Any, root: str) -> list[str] | None:
    """The Arrow files of a folder that ``save_to_disk`` wrote (None for any other path)."""
    if fs.isfile(f"{root}/{HF_DATASET}"):
        state = json.loads(fs.cat_file(f"{root}/{HF_DATASET}"))
        return [f"{root}/{entry['filename']}" for entry in state["_data_files"]]
    if fs.isfile(f"{root}/{HF_DATASET_DICT}"):
        splits = json.loads(fs.cat_file(f"{root}/{HF_DATASET_DICT}"))["splits"]
        return [name for split in splits for name in _saved_dataset(fs, f"{root}/{split}") or []]
    return None


def corpus_identity(config: CorpusConfig) -> Any:
    """Each file's URL, size and change token (an object's generation or etag, a local file's modification
    time): a changed dump is a new version, an unchanged one the same, without reading the data."""
    try:
        files = corpus_files(config)
    except (FileNotFoundError, ValueError) as e:
        return {"missing": str(e)}  # the step raises the clear error when it runs
    identity = [[url, info.get("size"), _change_token(info)] for url, info in files.items()]
    if config.sample < 1:  # a sample's rows were keyed by the file's base name before: a new version
        return {"files": identity, "sampled_by": "path below the files' common folder"}
    return identity


def _change_token(info: dict[str, Any]) -> Any:
    for key in ("generation", "etag", "ETag", "md5Hash", "crc32c", "mtime", "LastModified", "updated"):
        if info.get(key) is not None:
            return str(info[key])
    return None


@dataclass
class CorpusResult:
    """The funnel of the rows read, and what a researcher checks first when it looks wrong."""

    funnel: Funnel
    files: int
    bytes: int
    units: int
    sampled_out: int
    fields: list[str]  # every field the files have
    places: dict[str, list[str]]  # reason -> its first places (file and row or line)

    def as_dict(self) -> dict[str, Any]:
        return {
            "funnel": self.funnel.as_dict(),
            "files": self.files,
            "bytes": self.bytes,
            "units": self.units,
            "sampled_out": self.sampled_out,
            "fields": self.fields,
            "removed_at": self.places,
        }


def write_corpus(
    config: CorpusConfig, work: str, engine: Engine | None = None, progress: Progress | None = None
) -> CorpusResult:
    """The documents of the files as shards in ``work`` (a folder or URL), one engine unit a chunk; a rerun
    does only the units without a done record. With ``limit``, units run one after another, each told how
    many rows are left, so the first ``limit`` rows in file order are read whatever the engine."""
    files = corpus_files(config)
    chunks = [chunk for url in files for chunk in file_chunks(url, kind_of(url, SUFFIXES))]
    engine = engine or LocalEngine(1)
    root = common_folder(list(files))
    if config.limit is None:
        results = map_units(engine, partial(_write_unit, config, root, None), chunks, work, progress)
    else:
        results = []
        for unit in range(len(chunks)):
            left = config.limit - sum(result["funnel"]["docs_in"] for result in results)
            if left <= 0:
                break
            results = map_units(
                engine, partial(_write_unit, config, root, left), chunks[: unit + 1], work, progress
            )
    finish_units(work)
    funnel = sum((Funnel.from_dict(result["funnel"]) for result in results), Funnel())
    places: dict[str, list[str]] = {}
    for result in results:
        for reason, found in result["places"].items():
            places[reason] = (places.get(reason, []) + found)[:PLACES]
    fields = sorted({name for result in results for name in result["fields"]})
    outcome = CorpusResult(
        funnel,
        files=len(files),
        bytes=sum(info.get("size") or 0 for info in files.values()),
        units=len(chunks),
        sampled_out=sum(result["sampled_out"] for result in results),
        fields=fields,
        places={reason: places[reason] for reason in REASONS if reason in places},
    )
    _check_mapping(config, outcome, sum(result["with_text"] for result in results))
    return outcome


def common_folder(urls: list[str]) -> str:
    """The deepest folder that holds every file, with its "/": a file's path below it keys its rows in a
    sample, so that same-named files in different folders (a DatasetDict's splits) are sampled apart, and a
    corpus copied elsewhere whole samples the same rows."""
    return "".join(f"{part}/" for part in os.path.commonprefix([url.split("/")[:-1] for url in urls]))


def _check_mapping(config: CorpusConfig, outcome: CorpusResult, with_text: int) -> None:
    """A text field no row has, or a kept field no file has, is a mistake in the mapping: an error listing
    the fields the files do have."""
    has = f"the files' fields: {', '.join(outcome.fields) or 'none'}"
    if outcome.funnel.removed[MISSING_FIELD] and not with_text:
        raise FieldMappingError(
            f"no row of {outcome.funnel.docs_in} read has the text field {config.text_field!r} ({has}); "
            f"name another with text_field (--text-field)"
        )
    absent = [name for name in config.keep_fields if name not in outcome.fields]
    if absent and outcome.funnel.docs_in:
        raise FieldMappingError(f"keep_fields {absent}: no file has them ({has})")


@dataclass
class _UnitStats:
    fields: set[str] = field(default_factory=set)
    places: dict[str, list[str]] = field(default_factory=dict)
    sampled_out: int = 0
    with_text: int = 0


def _write_unit(
    config: CorpusConfig, root: str, cap: int | None, unit: int, chunk: TextChunk, directory: Path
) -> dict:
    stats = _UnitStats()
    funnel = write_stage(chunk_documents(chunk, config, root, cap, stats), directory, unit=unit)
    return {
        "funnel": funnel.as_dict(),
        "fields": sorted(stats.fields),
        "places": stats.places,
        "sampled_out": stats.sampled_out,
        "with_text": stats.with_text,
    }


def chunk_documents(
    chunk: TextChunk,
    config: CorpusConfig,
    root: str = "",
    cap: int | None = None,
    stats: _UnitStats | None = None,
) -> Iterator[Decision]:
    """``(document, reason)`` for each row of the chunk in the sample (rows keyed by the file's path below
    ``root``, ``common_folder``'s), at most ``cap`` of them."""
    stats = stats if stats is not None else _UnitStats()
    columns = list(dict.fromkeys([config.text_field, config.id_field, *config.keep_fields]))
    name = chunk.url.removeprefix(root)
    before: list[int] = []  # rows of the file before the chunk, counted when a place is first named
    taken = 0
    for record in _records(chunk, columns, stats.fields):
        if config.sample < 1 and not _sampled(config, name, chunk.part, record.row):
            stats.sampled_out += 1
            continue
        if cap is not None and taken >= cap:
            break
        taken += 1
        doc, reason = _decide(record, chunk, config)
        if record.fields is not None and record.fields.get(config.text_field) is not None:
            stats.with_text += 1
        if reason is not None:
            if not before:
                before.append(rows_before(chunk))
            doc["place"] = _place(chunk, before[0] + record.row)
            named = stats.places.setdefault(reason, [])
            if len(named) < PLACES:
                named.append(doc["place"])
        yield doc, reason


def _records(chunk: TextChunk, columns: list[str], seen: set[str]) -> Iterator[Record]:
    """The chunk's records; a damaged file (truncated gzip, a bad zstd frame, not parquet or Arrow) is an
    error naming it: none of its rows can be trusted, unlike one bad line."""
    try:
        yield from chunk_records(chunk, columns, seen)
    except (EOFError, OSError, zlib.error, zstandard.ZstdError, pa.ArrowException) as e:
        name = chunk.url.removeprefix("file://")
        raise ValueError(f"{name}: not a readable {chunk.kind} file ({e or type(e).__name__})") from None


def _sampled(config: CorpusConfig, name: str, part: int, row: int) -> bool:
    """A row is in the sample by a seeded hash of its place (``name``: its file's path below the files'
    common folder): the same rows on any engine, on every run."""
    return xxhash.xxh64_intdigest(f"{name}\0{part}\0{row}".encode(), seed=config.seed) < config.sample * 2**64


def _decide(record: Record, chunk: TextChunk, config: CorpusConfig) -> Decision:
    source = chunk.url.removeprefix("file://")
    if record.fields is None:
        return {"id": None, "text": _readable(record.error, config), "source": source}, UNDECODABLE_LINE
    fields = record.fields
    text = fields.get(config.text_field)
    doc_id = fields.get(config.id_field)
    doc: Document = {"id": None if doc_id is None else str(doc_id), "text": None, "source": source}
    if text is None:
        return doc, MISSING_FIELD
    if not isinstance(text, str):
        return {**doc, "text": json.dumps(text, default=str)[: config.max_chars]}, NOT_TEXT
    if chunk.kind not in TABLES and not text.isascii() and SURROGATE.search(text):
        return {**doc, "text": text.encode("utf-8", "replace").decode()[: config.max_chars]}, UNDECODABLE_LINE
    if not text.strip():
        return {**doc, "text": text}, EMPTY
    if len(text) > config.max_chars:
        return {**doc, "text": text[: config.max_chars]}, TOO_LARGE
    kept = {"id": doc["id"] if doc["id"] is not None else text_id(text), "text": text}
    return {**kept, **{name: fields.get(name) for name in config.keep_fields}}, None


def _readable(error: ValueError | None, config: CorpusConfig) -> str | None:
    """What can be read of a line that is no JSON object: the line itself, bad bytes replaced."""
    if isinstance(error, json.JSONDecodeError):
        return error.doc[: config.max_chars]
    if isinstance(error, UnicodeDecodeError):
        return error.object.decode("utf-8", "replace")[: config.max_chars]
    return str(error) if error is not None else None


def _place(chunk: TextChunk, row: int) -> str:
    """File and row (tables, from 0) or line (JSON lines, from 1), as a table or an editor shows it."""
    where = f"row {row}" if chunk.kind in TABLES else f"line {row + 1}"
    return f"{chunk.url.removeprefix('file://')} {where}"
