import gzip
import os
import subprocess
import sys
import sysconfig
import zlib
from collections import Counter
from pathlib import Path

import pytest
from fastwarc.warc import ArchiveIterator, WarcRecordType
from pydantic import ValidationError

from marin_pipelines.crawl.demo_crawl import DemoCrawlConfig, build_demo_crawl
from marin_pipelines.stdlib_material import CURATED_MODULES

SMALL = DemoCrawlConfig(pydoc_modules=("json", "textwrap"), n_files=2)


def _records(path: Path) -> list:
    out = []
    for record in ArchiveIterator(str(path), parse_http=False):
        out.append((record, record.reader.read()))
    return out


def _gzip_members(data: bytes) -> int:
    members = 0
    while data:
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        decompressor.decompress(data)
        assert decompressor.eof, "a gzip member is cut short"
        data = decompressor.unused_data
        members += 1
    return members


def test_stats_describe_the_files(demo_crawl):
    out, stats = demo_crawl
    assert stats["files"] == [p.name for p in sorted(out.glob("*.warc.gz"))]
    assert len(stats["files"]) == 4
    assert stats["records"] == sum(stats["pages"].values()) + len(stats["files"])  # one warcinfo per file
    assert stats["bytes"] == sum((out / name).stat().st_size for name in stats["files"])
    expected_kinds = {
        "reference",
        "pydoc",
        "library",
        "boilerplate",
        "exact_duplicate",
        "near_duplicate",
        "spam",
        "gibberish",
        "cp1252",
        "latin1_meta",
        "empty_body",
        "script_only",
        "http_error",
        "redirect",
        "image",
        "pdf",
    }
    assert set(stats["pages"]) == expected_kinds
    assert stats["pages"]["pydoc"] == len(CURATED_MODULES)
    assert 300 <= stats["records"] <= 800
    assert stats["bytes"] < 5_000_000  # small enough for a laptop demo


def test_every_record_is_its_own_gzip_member_with_the_required_headers(demo_crawl):
    out, stats = demo_crawl
    ids, total = set(), 0
    for name in stats["files"]:
        path = out / name
        records = _records(path)
        assert _gzip_members(path.read_bytes()) == len(records)
        assert records[0][0].record_type == WarcRecordType.warcinfo
        assert all(r.record_type == WarcRecordType.response for r, _ in records[1:])
        for record, _ in records:
            headers = record.headers
            assert headers.status_line == "WARC/1.0"
            assert headers.get("WARC-Date", "").startswith("2024-01-01T")  # from the seed, not the clock
            ids.add(headers["WARC-Record-ID"])
            total += 1
        for record, _ in records[1:]:
            assert record.headers["WARC-Target-URI"].startswith("https://")
            assert record.headers["WARC-Payload-Digest"].startswith("sha1:")
    assert len(ids) == total == stats["records"]


def test_block_and_payload_digests_verify(demo_crawl):
    out, stats = demo_crawl
    path = str(out / stats["files"][0])
    blocks = [record.verify_block_digest() for record in ArchiveIterator(path, parse_http=False)]
    payloads = [
        record.verify_payload_digest()
        for record in ArchiveIterator(path, parse_http=True, record_types=WarcRecordType.response)
    ]
    assert len(blocks) > 50 and all(blocks)
    assert len(payloads) == len(blocks) - 1 and all(payloads)


def test_pages_carry_no_machine_specific_text(demo_crawl):
    out, stats = demo_crawl
    stdlib = sysconfig.get_paths()["stdlib"].encode()
    for name in stats["files"]:
        for _, block in _records(out / name):
            body = block.split(b"\r\n\r\n", 1)[-1]
            if b"Content-Encoding: gzip" in block[:1000]:
                body = gzip.decompress(body)
            assert stdlib not in body
            assert b" at 0x" not in body


def test_same_config_gives_same_bytes_and_another_seed_does_not(tmp_path):
    first, second, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    build_demo_crawl(first, SMALL)
    build_demo_crawl(second, SMALL)
    build_demo_crawl(other, SMALL.model_copy(update={"seed": 1}))
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert all((first / n).read_bytes() == (second / n).read_bytes() for n in names)
    assert [(first / n).read_bytes() for n in names] != [
        (other / n).read_bytes() for n in sorted(other.iterdir())
    ]


def test_bytes_do_not_depend_on_the_calling_process(tmp_path):
    """pytest has filled linecache and changed logging and warnings: none of it may reach the pages."""
    config = SMALL.model_copy(update={"pydoc_modules": ("linecache", "logging", "warnings")})
    build_demo_crawl(tmp_path / "here", config)
    code = (
        "import sys; from pathlib import Path; from marin_pipelines.crawl.demo_crawl import *; "
        "build_demo_crawl(Path(sys.argv[1]), DemoCrawlConfig.model_validate_json(sys.argv[2]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "TZ": "Asia/Tokyo"}
    there = str(tmp_path / "there")
    subprocess.run([sys.executable, "-c", code, there, config.model_dump_json()], check=True, env=env)
    for path in sorted((tmp_path / "here").iterdir()):
        assert path.read_bytes() == (tmp_path / "there" / path.name).read_bytes()


def test_small_config_controls_the_generated_cases(tmp_path):
    config = SMALL.model_copy(
        update={"exact_duplicates": 0, "near_duplicates": 2, "spam_pages": 1, "gibberish_pages": 0}
    )
    stats = build_demo_crawl(tmp_path, config)
    assert len(stats["files"]) == 2
    assert stats["pages"]["pydoc"] == 2
    assert stats["pages"]["near_duplicate"] == 2 and stats["pages"]["spam"] == 1
    assert "exact_duplicate" not in stats["pages"] and "gibberish" not in stats["pages"]


def test_charset_pages_are_encoded_as_declared(demo_crawl):
    out, stats = demo_crawl
    found = Counter()
    for name in stats["files"]:
        for record, block in _records(out / name):
            url = record.headers.get("WARC-Target-URI", "")
            if url == "https://cafe.example.org/history.html":
                assert b"charset=windows-1252" in block
                assert "café".encode("cp1252") in block and "€".encode("cp1252") in block
                found["cp1252"] += 1
            elif url == "https://bakery.example.de/news.html":
                assert b'<meta charset="iso-8859-1">' in block and "Münster".encode("latin-1") in block
                found["latin1"] += 1
    assert found == {"cp1252": 1, "latin1": 1}


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"pydoc_modules": ("antigravity",)}, "pydoc_modules"),
        ({"n_files": 0}, "n_files"),
        ({"seed": -1}, "seed"),
    ],
)
def test_config_errors_name_the_field(update, field):
    with pytest.raises(ValidationError, match=field):
        DemoCrawlConfig(**update)
