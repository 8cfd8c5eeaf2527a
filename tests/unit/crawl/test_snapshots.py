"""Crawl roots: snapshot folders, local or behind fsspec (memory:// stands in for gs://), and
shard-parallel reading whose output does not depend on the number of workers."""

import uuid

import pytest
from upath import UPath

from marin_pipelines.crawl.snapshots import (
    crawl_fingerprint,
    crawl_snapshots,
    snapshot_files,
)
from marin_pipelines.crawl.web_documents import (
    ReadStats,
    WebDocumentsConfig,
    find_warc_files,
    read_web_documents,
    write_web_documents,
)
from marin_pipelines.documents import read_documents, run_stage
from marin_pipelines.engine import LocalEngine
from marin_pipelines.text.extracted_text import ExtractConfig, extract_text


def test_snapshot_folders_and_single_snapshot_roots(tmp_path):
    for name in ("CC-2024-18/a.warc.gz", "CC-2024-10/x/b.warc", "notes/readme.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert crawl_snapshots(tmp_path) == ["CC-2024-10", "CC-2024-18"]  # folders without WARCs are not
    assert [p.name for p in snapshot_files(tmp_path, "CC-2024-10")] == ["b.warc"]
    assert crawl_fingerprint(tmp_path) is None  # snapshots are partitions, immutable once processed
    with pytest.raises(FileNotFoundError, match="CC-2025-01"):
        snapshot_files(tmp_path, "CC-2025-01")
    assert crawl_snapshots(None) == ["demo"]

    single = tmp_path / "CC-2024-18"
    assert crawl_snapshots(single) == ["CC-2024-18"]
    assert [p.name for p in snapshot_files(single, "CC-2024-18")] == ["a.warc.gz"]
    before = crawl_fingerprint(single)
    (single / "c.warc").write_bytes(b"more")
    assert crawl_fingerprint(single) != before  # a single-snapshot root is versioned by its files


def test_bad_layouts_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        crawl_snapshots(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no WARC or ARC files"):
        crawl_snapshots(tmp_path / "empty")
    (tmp_path / "mixed" / "s1").mkdir(parents=True)
    (tmp_path / "mixed" / "s1" / "a.warc").write_bytes(b"")
    (tmp_path / "mixed" / "loose.warc").write_bytes(b"")
    with pytest.raises(ValueError, match="loose WARC files"):
        crawl_snapshots(tmp_path / "mixed")
    (tmp_path / "odd" / "bad name").mkdir(parents=True)
    (tmp_path / "odd" / "bad name" / "a.warc").write_bytes(b"")
    with pytest.raises(ValueError, match="bad name"):
        crawl_snapshots(tmp_path / "odd")


@pytest.fixture
def memory_root(shared_data):
    """Real WARC and ARC files (gzipped and not) behind fsspec's in-memory filesystem."""
    root = UPath(f"memory://bucket-{uuid.uuid4().hex[:8]}/crawl")
    names = ["example.warc.gz", "example.warc", "example.arc.gz", "example.arc", "example-trunc.warc"]
    for name in names:
        target = root / "CC-2024-10" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((shared_data / "warc-edge-cases" / name).read_bytes())
    yield root, names
    root.fs.rm(str(root.parent), recursive=True)


def test_a_fsspec_crawl_root_reads_like_a_local_folder(memory_root, shared_data):
    root, names = memory_root
    assert crawl_snapshots(str(root)) == ["CC-2024-10"]
    files = snapshot_files(str(root), "CC-2024-10")
    assert [p.name for p in files] == sorted(names) and all(str(p).startswith("memory://") for p in files)
    assert find_warc_files(str(root / "CC-2024-10")) == files
    remote_stats, local_stats = ReadStats(), ReadStats()
    remote = list(read_web_documents([str(p) for p in files], stats=remote_stats))
    local = list(
        read_web_documents([shared_data / "warc-edge-cases" / n for n in sorted(names)], stats=local_stats)
    )
    assert remote == local and len(remote) == 5 and all(reason is None for _, reason in remote)
    assert remote_stats.as_dict() == local_stats.as_dict() and remote_stats.errors  # the truncated one
    assert crawl_fingerprint(str(root / "CC-2024-10"))[0][0] == "example-trunc.warc"


def test_a_missing_fsspec_path_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="memory://nobody/here"):
        crawl_snapshots("memory://nobody/here")


def test_outputs_and_funnels_do_not_depend_on_workers(demo_crawl, tmp_path):
    """Per-file reading and per-shard extraction, with 1 and 2 worker processes: identical shards."""
    crawl, _ = demo_crawl
    files = find_warc_files(crawl)
    assert len(files) >= 2
    config = WebDocumentsConfig(shard_docs=40)
    results = {}
    for workers in (1, 2):
        web, text = tmp_path / f"web{workers}", tmp_path / f"text{workers}"
        web.mkdir()
        text.mkdir()
        funnel, stats = write_web_documents(files, web, config, LocalEngine(workers))
        extracted = run_stage(extract_text, ExtractConfig(), web, text, LocalEngine(workers))
        results[workers] = (funnel, stats.as_dict(), extracted, sorted(p.name for p in web.iterdir()))
        assert funnel.conserved and extracted.conserved and extracted.docs_in == funnel.docs_out
    assert results[1] == results[2]
    assert len([n for n in results[1][3] if n.startswith("documents-")]) > len(files)  # shards of 40
    for name in sorted(p.name for p in (tmp_path / "text1").iterdir()):
        one = list(read_documents(tmp_path / "text1", prefix=name.removesuffix(".parquet")))
        assert one == list(read_documents(tmp_path / "text2", prefix=name.removesuffix(".parquet")))
