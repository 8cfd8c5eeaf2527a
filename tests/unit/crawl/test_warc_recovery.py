"""WARC recovery: after damage the reader resynchronises, reads every undamaged record once, and counts
what it skipped. The crawl is built from the real pages in ../shared/data with ../shared/tools/make_warc.py
(one gzip member per record, as crawlers write), then copies are damaged as disks and partial downloads do.
"""

import gzip
import json
import subprocess
import sys
import zlib
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import pytest

from marin_pipelines.crawl.web_documents import (
    ReadStats,
    WebDocumentsConfig,
    read_web_documents,
    write_web_documents,
)
from marin_pipelines.engine import LocalEngine
from marin_pipelines.experiments.defaults import listed_files_and_text
from marin_pipelines.steps import StepContext, build_step
from marin_pipelines.store import MANIFEST, ArtifactStore


@dataclass(frozen=True)
class Crawl:
    """An undamaged WARC file of the real pages, and where each record lies in it."""

    gz: bytes  # one gzip member per record
    plain: bytes  # the same records, uncompressed
    ids: list[str]  # record ids in file order
    members: list[int]  # file offset of each member, and the file's size last
    records: list[int]  # offset of each record in ``plain``, and its size last
    page: bytes  # a real page's HTML, for a member that is not WARC


@pytest.fixture(scope="module")
def crawl(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    pages = sorted((shared_data / "web-pages").glob("*.html.gz"))
    out = tmp_path_factory.mktemp("recovery") / "crawl.warc.gz"
    tool = shared_data.parent / "tools" / "make_warc.py"
    subprocess.run([sys.executable, str(tool), str(out), *map(str, pages)], check=True)
    data = out.read_bytes()
    members, rest = [0], data
    while rest:
        member = zlib.decompressobj(31)
        member.decompress(rest)
        rest = member.unused_data
        members.append(len(data) - len(rest))
    plain = gzip.decompress(data)
    records = [0]
    while (found := plain.find(b"WARC/1.0\r\n", records[-1] + 1)) >= 0:
        records.append(found)
    records.append(len(plain))
    ids = [doc["id"] for doc, _ in read_web_documents([out])]
    assert len(pages) == len(ids) == len(set(ids)) == len(members) - 1 == len(records) - 1 > 50
    return Crawl(data, plain, ids, members, records, gzip.decompress(pages[0].read_bytes()))


def _read(path: Path) -> tuple[Counter[str], dict[str, str | None], ReadStats]:
    stats = ReadStats()
    decisions = list(read_web_documents([path], stats=stats))
    return Counter(doc["id"] for doc, _ in decisions), {doc["id"]: reason for doc, reason in decisions}, stats


def _assert_recovered(crawl: Crawl, path: Path, damaged: Collection[int] = ()) -> ReadStats:
    """Every undamaged record read exactly once (and kept), a damaged one at most once, nothing else."""
    counts, reasons, stats = _read(path)
    undamaged = {crawl.ids[i] for i in range(len(crawl.ids)) if i not in damaged}
    assert {i for i in undamaged if counts[i] != 1} == set()
    assert {i for i in undamaged if reasons[i] is not None} == set()
    assert set(counts) <= set(crawl.ids) and max(counts.values()) == 1
    return stats


def _skipped(stats: ReadStats, path: Path) -> tuple[int, int]:
    return stats.skipped_bytes[path.name], stats.skipped_members[path.name]


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_an_undamaged_crawl_is_read_whole_with_nothing_skipped(crawl, tmp_path):
    for name, data in (("whole.warc.gz", crawl.gz), ("whole.warc", crawl.plain)):
        stats = _assert_recovered(crawl, _write(tmp_path, name, data))
        assert not stats.errors and not stats.skipped_bytes and not stats.skipped_members


def test_flipped_bytes_inside_a_member(crawl, tmp_path):
    mid = len(crawl.ids) // 2
    start, end = crawl.members[mid], crawl.members[mid + 1]
    data = bytearray(crawl.gz)
    data[(start + end) // 2 : (start + end) // 2 + 8] = bytes(
        b ^ 0xFF for b in data[(start + end) // 2 :][:8]
    )
    path = _write(tmp_path, "flipped.warc.gz", bytes(data))
    stats = _assert_recovered(crawl, path, damaged={mid})
    reasons = _read(path)[1]
    assert reasons.get(crawl.ids[mid], "not read") in ("not read", "corrupt_record")  # never kept
    assert _skipped(stats, path) == (end - start, 1)
    assert len(stats.errors) == 1 and f"at byte {start}" in stats.errors[0]


@pytest.mark.parametrize(
    "garbage", [b"\x00" * 4096, b"GARBAGE \x1f\x8b not a member\r\n" * 30], ids=["zeros", "text"]
)
def test_garbage_between_members(crawl, tmp_path, garbage):
    cut = crawl.members[len(crawl.ids) // 3]
    path = _write(tmp_path, "garbage.warc.gz", crawl.gz[:cut] + garbage + crawl.gz[cut:])
    stats = _assert_recovered(crawl, path)
    assert _skipped(stats, path) == (len(garbage), 0)  # no gzip member was lost, only the garbage
    assert len(stats.errors) == 1 and "not a gzip member" in stats.errors[0]


def test_a_member_that_is_not_warc(crawl, tmp_path):
    cut = crawl.members[len(crawl.ids) // 2]
    html = gzip.compress(crawl.page)
    path = _write(tmp_path, "html-member.warc.gz", crawl.gz[:cut] + html + crawl.gz[cut:])
    stats = _assert_recovered(crawl, path)
    assert _skipped(stats, path) == (len(html), 1)


def test_a_truncated_last_member_keeps_what_is_there(crawl, tmp_path):
    start, end = crawl.members[-2], crawl.members[-1]
    path = _write(tmp_path, "cut.warc.gz", crawl.gz[: (start + end) // 2])
    stats = _assert_recovered(crawl, path, damaged={len(crawl.ids) - 1})
    assert _read(path)[0][crawl.ids[-1]] == 1  # the last record is read, cut short, as for any truncated file
    assert _skipped(stats, path) == (0, 0)  # nothing after it is lost: the file just ends
    assert len(stats.errors) == 1 and "ends inside the record" in stats.errors[0]


def test_a_last_member_cut_in_its_gzip_header_is_skipped(crawl, tmp_path):
    path = _write(tmp_path, "cut-header.warc.gz", crawl.gz[: crawl.members[-2] + 8])
    stats = _assert_recovered(crawl, path, damaged={len(crawl.ids) - 1})
    assert crawl.ids[-1] not in _read(path)[0]
    assert _skipped(stats, path) == (8, 1)


def test_several_damages_in_one_file(crawl, tmp_path):
    """Flipped bytes, garbage, a non-WARC member and a cut end: the reader resynchronises each time."""
    m = crawl.members
    a, b, c = len(m) // 4, len(m) // 2, 3 * len(m) // 4
    flipped = bytearray(crawl.gz[m[a] : m[a + 1]])
    flipped[len(flipped) // 2] ^= 0xFF
    flipped[len(flipped) // 2 + 1] ^= 0xFF
    garbage, html = b"\x00" * 1000, gzip.compress(crawl.page)
    data = crawl.gz[: m[a]] + flipped + crawl.gz[m[a + 1] : m[b]] + garbage + crawl.gz[m[b] : m[c]] + html
    data += crawl.gz[m[c] : m[-2] + 5]
    path = _write(tmp_path, "several.warc.gz", data)
    stats = _assert_recovered(crawl, path, damaged={a, len(crawl.ids) - 1})
    assert _skipped(stats, path) == (m[a + 1] - m[a] + len(garbage) + len(html) + 5, 3)
    assert len(stats.errors) == 4


def test_records_inflated_before_damage_in_a_member_of_many_are_kept(crawl, tmp_path):
    """A writer that packs ten records per member: the damaged member's records before the damage stay."""
    groups = [range(i, min(i + 10, len(crawl.ids))) for i in range(0, len(crawl.ids), 10)]
    members = [
        gzip.compress(b"".join(crawl.plain[crawl.records[i] : crawl.records[i + 1]] for i in g))
        for g in groups
    ]
    bad = len(groups) // 2
    damaged = bytearray(members[bad])
    damaged[len(damaged) // 2 : len(damaged) // 2 + 8] = b"\xff" * 8
    members[bad] = bytes(damaged)
    path = _write(tmp_path, "packed.warc.gz", b"".join(members))
    stats = _assert_recovered(crawl, path, damaged=set(groups[bad]))
    counts = _read(path)[0]
    assert counts[crawl.ids[groups[bad][0]]] == 1  # inflated before the damage
    assert _skipped(stats, path) == (len(members[bad]), 1)


def _plain_record(crawl: Crawl, index: int) -> tuple[int, int]:
    return crawl.records[index], crawl.records[index + 1]


@pytest.mark.parametrize(
    "garbage", [b"this is not a record\r\n" * 20, b"\x00" * 4096], ids=["lines", "zeros"]
)
def test_garbage_between_uncompressed_records(crawl, tmp_path, garbage):
    cut, _ = _plain_record(crawl, len(crawl.ids) // 2)
    path = _write(tmp_path, "garbage.warc", crawl.plain[:cut] + garbage + crawl.plain[cut:])
    stats = _assert_recovered(crawl, path)
    assert _skipped(stats, path) == (len(garbage), 0)
    assert len(stats.errors) == 1


def test_a_mangled_uncompressed_record_header(crawl, tmp_path):
    mid = len(crawl.ids) // 2
    start, end = _plain_record(crawl, mid)
    mangled = b"WARX/1.0\r\nWARC-Tpye" + crawl.plain[start + 19 : end]
    path = _write(tmp_path, "mangled.warc", crawl.plain[:start] + mangled + crawl.plain[end:])
    stats = _assert_recovered(crawl, path, damaged={mid})
    assert crawl.ids[mid] not in _read(path)[0]
    assert _skipped(stats, path) == (end - start, 0)


def test_a_bad_content_length_in_an_uncompressed_file(crawl, tmp_path):
    mid = len(crawl.ids) // 2
    start, end = _plain_record(crawl, mid)
    field = crawl.plain.index(b"Content-Length: ", start)
    data = crawl.plain[:field] + b"Content-Length: 12x4" + crawl.plain[field + 20 :]
    stats = _assert_recovered(crawl, _write(tmp_path, "length.warc", data), damaged={mid})
    assert len(stats.errors) == 1 and 0 < stats.skipped_bytes["length.warc"] < end - start


def test_a_truncated_uncompressed_file(crawl, tmp_path):
    start, _ = _plain_record(crawl, len(crawl.ids) - 1)
    path = _write(tmp_path, "cut.warc", crawl.plain[: start + 2000])
    stats = _assert_recovered(crawl, path, damaged={len(crawl.ids) - 1})
    assert _skipped(stats, path) == (0, 0) and "ends inside the record" in stats.errors[0]


def test_skipped_counts_reach_the_web_documents_metadata(crawl, tmp_path):
    """Through the stage (as `process-crawl` and the assets run it): the counts are in its metadata."""
    garbage, cut = b"\x00" * 512, crawl.members[10]
    (tmp_path / "crawl").mkdir()
    damaged = _write(tmp_path / "crawl", "damaged.warc.gz", crawl.gz[:cut] + garbage + crawl.gz[cut:])
    whole = _write(tmp_path / "crawl", "whole.warc", crawl.plain)
    steps = listed_files_and_text("recovery", [str(damaged), str(whole)], "s1")
    store = ArtifactStore(tmp_path / "store")
    listed = build_step(StepContext(steps.crawl, store, "s1", engine=LocalEngine(1)), {})
    documents = build_step(
        StepContext(steps.web_documents, store, "s1", engine=LocalEngine(1)), {"crawl": listed}
    )
    skipped = {"bytes": 512, "members": 0, "files": {"damaged.warc.gz": {"bytes": 512, "members": 0}}}
    assert documents.metadata["records"]["skipped"] == skipped
    assert json.loads((documents.path / MANIFEST).read_text())["metadata"]["records"]["skipped"] == skipped
    funnel = documents.metadata["funnel"]
    assert funnel["docs_in"] == 2 * len(crawl.ids) == funnel["docs_out"] + sum(funnel["removed"].values())


def test_skipped_counts_add_up_over_files_and_workers(crawl, tmp_path):
    cut = crawl.members[5]
    a = _write(tmp_path, "a.warc.gz", crawl.gz[:cut] + b"\x00" * 100 + crawl.gz[cut:])
    b = _write(tmp_path, "b.warc.gz", crawl.gz[:cut] + gzip.compress(crawl.page) + crawl.gz[cut:])
    results = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        out.mkdir()
        funnel, stats = write_web_documents([a, b], out, WebDocumentsConfig(), LocalEngine(workers))
        assert funnel.conserved and funnel.docs_in == 2 * len(crawl.ids)
        results.append(stats.as_dict())
    assert results[0] == results[1]
    skipped = results[0]["skipped"]
    html = len(gzip.compress(crawl.page))
    assert skipped["files"] == {
        "a.warc.gz": {"bytes": 100, "members": 0},
        "b.warc.gz": {"bytes": html, "members": 1},
    }
    assert (skipped["bytes"], skipped["members"]) == (100 + html, 1)
