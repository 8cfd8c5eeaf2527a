import gzip
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from marin_pipelines.crawl.demo_crawl import Page, _WarcWriter
from marin_pipelines.crawl.web_documents import (
    ReadStats,
    WebDocumentsConfig,
    find_warc_files,
    read_web_documents,
)
from marin_pipelines.documents import Funnel, read_documents, write_stage

KEPT_FIELDS = {"id", "url", "fetch_time", "content_type", "charset", "html", "source"}
HTML = b"<html><head><title>T</title></head><body><p>Hello, world. This is a page.</p></body></html>"

# What each real edge case should give: reasons (None = kept) per capture.
EDGE_CASES = {
    "bad.arc": {"corrupt_record": 2, "empty_body": 1},
    "example-bad-non-chunked.warc.gz": {None: 1},
    "example-bad.warc.gz.bad": {None: 1, "http_error": 1},
    "example-digest.warc": {},
    "example-iana.org-chunked.warc": {None: 1},
    "example-resource.warc.gz": {None: 1},
    "example-space-in-target-uri.warc.gz": {"not_html": 1},
    "example-space-in-url.arc": {None: 1},
    "example-trunc.warc": {None: 1},
    "example-wget-bad-target-uri.warc.gz": {None: 1, "not_html": 2},
    "example-wrong-chunks.warc.gz": {None: 1},
    "example.arc": {None: 1},
    "example.arc.gz": {None: 1},
    "example.warc": {None: 1},
    "example.warc.gz": {None: 1},
    "post-test.warc.gz": {"not_html": 3},
}


def _warc(path: Path, pages: list[Page]) -> Path:
    writer = _WarcWriter(path.name, 0, datetime(2024, 1, 1, tzinfo=UTC))
    path.write_bytes(writer.warcinfo() + b"".join(writer.response(page) for page in pages))
    return path


def _pages(n: int) -> list[Page]:
    return [
        Page("test", f"https://example.com/{i}", HTML.replace(b"Hello", f"Page {i}".encode()))
        for i in range(n)
    ]


def test_every_edge_case_file_is_read_without_crashing(shared_data):
    folder = shared_data / "warc-edge-cases"
    for path in sorted(folder.iterdir()):
        stats = ReadStats()
        decisions = list(read_web_documents([path], stats=stats))
        assert stats.files == 1
        for doc, reason in decisions:
            assert doc["source"] == path.name and doc["id"] and doc["url"]
            if reason is None:
                assert set(doc) == KEPT_FIELDS
                assert b"<html" in doc["html"].lower() or b"<!doctype" in doc["html"].lower()
            else:
                assert "html" not in doc and doc["detail"]


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_case_outcomes(shared_data, name):
    path = shared_data / "warc-edge-cases" / name
    assert Counter(reason for _, reason in read_web_documents([path])) == Counter(EDGE_CASES[name])


def test_edge_case_details(shared_data):
    folder = shared_data / "warc-edge-cases"
    arc = next(doc for doc, _ in read_web_documents([folder / "example-space-in-url.arc"]))
    assert (
        arc["url"]
        == "http://example.com/index.cfm?FuseAction=Email&EmailTitle=Examples From The Live Web&IsPopUp=False"
    )
    assert arc["fetch_time"] == "2014-02-16T05:02:21Z" and arc["content_type"] == "text/html"
    wget = next(
        doc
        for doc, reason in read_web_documents([folder / "example-wget-bad-target-uri.warc.gz"])
        if not reason
    )
    assert wget["url"] == "http://example.com/"  # the <...> around the URI are removed
    chunked = next(doc for doc, _ in read_web_documents([folder / "example-iana.org-chunked.warc"]))
    assert chunked["charset"] == "utf-8" and chunked["html"].rstrip().endswith(b"</html>")  # de-chunked
    gzipped = next(doc for doc, _ in read_web_documents([folder / "example.warc.gz"]))
    assert gzipped["html"].startswith(b"<!doctype html>")  # Content-Encoding: gzip decoded
    stats = ReadStats()
    list(read_web_documents([folder / "example-trunc.warc"], stats=stats))
    assert stats.records == {"warcinfo": 2, "response": 1, "request": 1}
    assert len(stats.errors) == 1 and "example-trunc.warc" in stats.errors[0]


def test_non_capture_records_are_counted_not_yielded(shared_data):
    stats = ReadStats()
    decisions = list(read_web_documents([shared_data / "warc-edge-cases" / "example.warc"], stats=stats))
    assert len(decisions) == 1
    assert stats.as_dict() == {
        "files": 1,
        "records": {"request": 2, "response": 1, "revisit": 1, "warcinfo": 2},
        "errors": [],
        "skipped": {"bytes": 0, "members": 0, "files": {}},
    }


def test_kept_document_fields(tmp_path):
    page = Page(
        "t", "https://example.com/cafe", "<p>café</p>".encode("cp1252"), "text/html; charset=windows-1252"
    )
    doc, reason = next(read_web_documents([_warc(tmp_path / "a.warc.gz", [page])]))
    assert reason is None
    assert set(doc) == KEPT_FIELDS
    assert doc["id"].startswith("urn:uuid:") and doc["url"] == "https://example.com/cafe"
    assert doc["fetch_time"] == "2024-01-01T00:00:07Z"
    assert (doc["content_type"], doc["charset"], doc["source"]) == ("text/html", "windows-1252", "a.warc.gz")
    assert doc["html"] == "<p>café</p>".encode("cp1252")


def test_removal_reasons(tmp_path):
    pages = [
        Page("ok", "https://example.com/ok", HTML),
        Page("404", "https://example.com/404", HTML, status="404 Not Found"),
        Page("png", "https://example.com/a.png", b"\x89PNG\r\n\x1a\n....", "image/png"),
        Page("empty", "https://example.com/empty", b"  \n"),
        Page("big", "https://example.com/big", b"<html>" + b"x" * 5000 + b"</html>"),
        Page("sniffed", "https://example.com/sniffed", HTML, content_type=""),
        Page(
            "gzip",
            "https://example.com/gz",
            gzip.compress(HTML),
            extra_headers=(("Content-Encoding", "gzip"),),
        ),
        Page(
            "bad-gzip",
            "https://example.com/badgz",
            b"not gzip",
            extra_headers=(("Content-Encoding", "gzip"),),
        ),
    ]
    config = WebDocumentsConfig(max_record_bytes=2000)
    decisions = {
        doc["url"].rsplit("/", 1)[1]: (doc, reason)
        for doc, reason in read_web_documents([_warc(tmp_path / "r.warc.gz", pages)], config)
    }
    reasons = {key: reason for key, (_, reason) in decisions.items()}
    assert reasons == {
        "ok": None,
        "404": "http_error",
        "a.png": "not_html",
        "empty": "empty_body",
        "big": "too_large",
        "sniffed": None,
        "gz": None,
        "badgz": "corrupt_record",
    }
    assert decisions["404"][0]["detail"] == "HTTP 404"
    assert decisions["a.png"][0]["detail"] == "image/png"
    assert decisions["gz"][0]["html"] == HTML
    assert decisions["sniffed"][0]["content_type"] == "text/html"


def test_truncated_gzip_keeps_what_is_readable(tmp_path):
    path = _warc(tmp_path / "t.warc.gz", _pages(5))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # the last record's gzip member is cut
    decisions = list(read_web_documents([path]))
    assert [reason for _, reason in decisions[:4]] == [None] * 4
    assert len(decisions) == 5


def test_garbage_between_gzip_members_is_skipped_and_counted(tmp_path):
    path = _warc(tmp_path / "g.warc.gz", _pages(4))
    data = path.read_bytes()
    cut = data.index(b"\x1f\x8b", len(data) // 2)  # start of a member in the second half
    path.write_bytes(data[:cut] + b"GARBAGE" * 100 + data[cut:])
    stats = ReadStats()
    decisions = list(read_web_documents([path], stats=stats))
    assert len(decisions) == 4 and all(reason is None for _, reason in decisions)  # resynchronised
    assert len(stats.errors) == 1 and stats.errors[0].startswith("g.warc.gz: ")
    assert (stats.skipped_bytes["g.warc.gz"], stats.skipped_members["g.warc.gz"]) == (700, 0)


def test_garbage_in_an_uncompressed_warc_is_skipped(tmp_path):
    path = _warc(tmp_path / "p.warc.gz", _pages(4))
    plain = gzip.decompress(path.read_bytes())
    cut = plain.index(b"WARC/1.0", len(plain) // 2)
    broken = tmp_path / "p.warc"
    broken.write_bytes(plain[:cut] + b"this is not a record\r\n" * 20 + plain[cut:])
    stats = ReadStats()
    decisions = list(read_web_documents([broken], stats=stats))
    assert len(decisions) == 4 and all(reason is None for _, reason in decisions)  # resynchronised
    assert len(stats.errors) == 1


@pytest.mark.parametrize("content", [b"", b"this is not a WARC file\n" * 10, b"\x1f\x8b\x08garbage"])
def test_unreadable_files_give_no_documents(tmp_path, content):
    path = tmp_path / "x.warc.gz"
    path.write_bytes(content)
    stats = ReadStats()
    assert list(read_web_documents([path], stats=stats)) == []
    assert stats.files == 1 and len(stats.errors) == (1 if content else 0)


def test_missing_paths_fail_before_reading(tmp_path):
    good = _warc(tmp_path / "a.warc.gz", _pages(1))
    missing = tmp_path / "nope.warc.gz"
    with pytest.raises(FileNotFoundError, match="nope.warc.gz"):
        read_web_documents([good, missing]).__next__()
    with pytest.raises(FileNotFoundError, match="no-such-dir"):
        find_warc_files(tmp_path / "no-such-dir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no WARC or ARC files .* in .*empty"):
        find_warc_files(tmp_path / "empty")


def test_find_warc_files_is_recursive_sorted_and_filtered(tmp_path):
    (tmp_path / "b" / "c").mkdir(parents=True)
    for name in ["b/c/z.warc.gz", "b/a.arc", "m.warc", "x.arc.gz", "notes.txt", "y.warc.gz.bad"]:
        (tmp_path / name).write_bytes(b"")
    found = [p.relative_to(tmp_path).as_posix() for p in find_warc_files(tmp_path)]
    assert found == ["b/a.arc", "b/c/z.warc.gz", "m.warc", "x.arc.gz"]
    assert find_warc_files(tmp_path / "m.warc") == [tmp_path / "m.warc"]


def test_a_folder_stands_for_its_warc_files(tmp_path):
    _warc(tmp_path / "a.warc.gz", _pages(2))
    _warc(tmp_path / "b.warc.gz", _pages(3))
    stats = ReadStats()
    docs = list(read_web_documents([tmp_path], stats=stats))
    assert len(docs) == 5 and stats.files == 2
    assert [doc["source"] for doc, _ in docs] == ["a.warc.gz"] * 2 + ["b.warc.gz"] * 3


def test_demo_crawl_funnel_is_conserved(demo_crawl, tmp_path):
    out, stats = demo_crawl
    read_stats = ReadStats()
    funnel = write_stage(read_web_documents(find_warc_files(out), stats=read_stats), tmp_path)
    assert funnel.conserved and funnel.docs_in == sum(stats["pages"].values())
    assert funnel.removed == {"empty_body": 1, "http_error": 2, "not_html": 2}
    assert read_stats.records["warcinfo"] == len(stats["files"]) and not read_stats.errors
    assert len(list(read_documents(tmp_path))) == funnel.docs_out
    assert isinstance(Funnel.from_dict(funnel.as_dict()), Funnel)


def test_config_validation():
    assert WebDocumentsConfig().max_record_bytes == 10_000_000
    with pytest.raises(ValidationError, match="content_types"):
        WebDocumentsConfig(content_types=("html",))
    with pytest.raises(ValidationError, match="max_record_bytes"):
        WebDocumentsConfig(max_record_bytes=0)


def test_nul_bytes_and_undecodable_pages_are_kept_as_bytes(tmp_path):
    """Repair is extraction's job (it decodes with replacement); reading never fails on the bytes."""
    nul = HTML.replace(b"Hello", b"Hel\x00lo")
    broken = HTML.replace(b"Hello", b"H\xe9llo \xff\xfe")
    pages = [
        Page("nul", "https://example.com/nul", nul),
        Page("bad-utf8", "https://example.com/bad", broken, "text/html; charset=utf-8"),
    ]
    decisions = list(read_web_documents([_warc(tmp_path / "n.warc.gz", pages)]))
    assert [reason for _, reason in decisions] == [None, None]
    assert [doc["html"] for doc, _ in decisions] == [nul, broken]
    funnel = write_stage(iter(decisions), tmp_path)
    assert funnel.docs_out == 2 and [d["html"] for d in read_documents(tmp_path)] == [nul, broken]
