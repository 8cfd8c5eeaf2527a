"""Bad crawls (issue 16.6): an empty crawl, a crawl of only non-HTML records, 50 MB records, unicode and
spaces in paths and snapshot names. Each gives a clear error naming the folder or file, or a counted skip
that says which stage removed everything and why; never a traceback from inside a library."""

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from bad_warcs import metadata_records, non_html_records, pages, record, response, write_warc
from dagster import DagsterInstance

from marin_pipelines.cli import main
from marin_pipelines.cli.local_runs import root_cause
from marin_pipelines.crawl.snapshots import crawl_snapshots
from marin_pipelines.crawl.web_documents import WebDocumentsConfig, read_web_documents
from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import crawl_and_text, quality_and_curation
from marin_pipelines.stages.crawl import NoDocuments
from marin_pipelines.store import MANIFEST

MB50 = 50_000_000


def process_crawl(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["process-crawl", *args, "--workers", "1"])
    out, err = capsys.readouterr()
    return code, out, err


def web_documents_metadata(out: Path) -> dict:
    (manifest,) = (out / "process_crawl" / "web_documents").glob(f"*/*/{MANIFEST}")
    return json.loads(manifest.read_text())["metadata"]


def test_an_empty_crawl_root_is_an_error_naming_it(tmp_path, capsys):
    root = tmp_path / "empty crawl"
    root.mkdir()
    code, _, err = process_crawl(capsys, "--warc", str(root), "--out", str(tmp_path / "out"))
    assert code == 2 and "no WARC or ARC files" in err and str(root) in err and "Traceback" not in err
    with pytest.raises(FileNotFoundError, match="no WARC or ARC files .* in .*empty crawl"):
        crawl_snapshots(root)
    text = crawl_and_text("empty", warc_root=str(root))
    with pytest.raises(FileNotFoundError, match="empty crawl"):  # before any run starts
        materialize_experiment(Experiment("empty", steps=[text.deduplicated_text]), str(tmp_path / "store"))


@pytest.mark.parametrize(
    ("records", "said", "counted"),
    [
        (None, "records: none; empty files (0 bytes): crawl.warc.gz", {"empty_files": ["crawl.warc.gz"]}),
        (metadata_records(), "records: request: 3, warcinfo: 3", {"records": {"request": 3, "warcinfo": 3}}),
        (non_html_records(), "removed all 9 documents (not_html: 9)", {"records": {"response": 9}}),
    ],
    ids=["zero_bytes", "only_warcinfo_and_requests", "only_images_pdfs_json"],
)
def test_a_crawl_without_html_is_counted_and_said(tmp_path, capsys, records, said, counted):
    warc = tmp_path / "crawl.warc.gz"
    write_warc(warc, records or [])
    code, out, err = process_crawl(capsys, "--warc", str(warc), "--out", str(tmp_path / "out"))
    assert code == 0 and "Traceback" not in err
    funnels = json.loads(out.strip().splitlines()[-1])
    assert all(funnel["docs_out"] == 0 for funnel in funnels.values())
    assert "no documents left: process_crawl/web_documents [cli]" in err and said in err
    metadata = web_documents_metadata(tmp_path / "out")
    assert metadata["funnel"]["docs_in"] == (9 if "removed all" in said else 0)
    assert all(metadata["records"][key] == value for key, value in counted.items())


def test_downstream_of_a_crawl_without_html_fails_naming_the_step_that_removed_it(tmp_path):
    root = tmp_path / "crawl"
    write_warc(root / "only-media.warc.gz", non_html_records())
    text = crawl_and_text("media", warc_root=str(root))
    quality = quality_and_curation("media", text.deduplicated_text, quality={"bucket": 10_000})
    with pytest.raises(Exception) as failure:
        experiment = Experiment("media", steps=[quality.curated_text])
        materialize_experiment(experiment, str(tmp_path / "store"), DagsterInstance.ephemeral())
    cause = root_cause(failure.value)
    assert isinstance(cause, NoDocuments)
    assert str(cause) == (
        "media/quality_scores has no documents to score: media/web_documents [crawl] removed all 9 documents "
        "(not_html: 9)"
    )


def test_the_experiment_command_says_why_without_a_traceback(tmp_path, capsys, monkeypatch):
    """`marin-pipelines experiment` on a crawl of one empty file, into a store with unicode and spaces."""
    write_warc(tmp_path / "crawl" / "CC-2024" / "empty one.warc.gz", [])
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "hollow.py").write_text(
        textwrap.dedent(f"""
        from marin_pipelines.experiment import Experiment
        from marin_pipelines.experiments.defaults import crawl_and_text, quality_and_curation

        text = crawl_and_text("hollow", warc_root={str(tmp_path / "crawl")!r})
        quality = quality_and_curation("hollow", text.deduplicated_text, quality={{"bucket": 10_000}})
        hollow = Experiment("hollow", steps=[quality.curated_text])
        """)
    )
    monkeypatch.setenv("MARIN_EXPERIMENTS_PATH", str(folder))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))  # the instance the UI would show
    (tmp_path / "dagster").mkdir()
    store = tmp_path / "störe ü" / "a b"
    assert main(["experiment", "hollow", "--store-root", str(store)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (
        "hollow failed: NoDocuments: hollow/quality_scores has no documents to score: hollow/web_documents "
        "[CC-2024] found no HTML captures in the WARC files (records: none; empty files (0 bytes): "
        "empty one.warc.gz)"
    ) in err
    assert list((store / "hollow" / "web_documents" / "CC-2024").glob(f"*/{MANIFEST}"))


def test_50_mb_records_among_pages_are_counted_too_large_in_bounded_memory(tmp_path):
    line = b"<p>" + b"word " * 199 + b"end.</p>\n"
    big_html = b"<html><body>" + line * (MB50 // len(line) + 1) + b"</body></html>"
    warc = write_warc(
        tmp_path / "big.warc.gz",
        [
            *pages(3),
            response("https://example.com/big.html", big_html),
            response("https://example.com/big.mp4", bytes(MB50), "video/mp4"),
            *pages(3, start=3),
        ],
    )
    # the peak of this process's own memory (VmHWM): ru_maxrss would carry over the peak of the process that
    # forked it (an xdist worker holding fixtures), which Linux keeps across exec
    script = f"""
import json, re
from marin_pipelines.process_crawl import process_crawl
funnels = process_crawl([{str(warc)!r}], {str(tmp_path / "out")!r})
peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read())[1])
print(json.dumps({{"funnels": funnels, "max_rss_mb": peak / 1024}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["funnels"]["web_documents"] == {"docs_in": 8, "docs_out": 6, "removed": {"too_large": 2}}
    assert result["max_rss_mb"] < 1500, result  # two 50 MB records, never held many times over

    # with a limit above it, the page is read (and the binary is counted as not HTML), one at a time
    decisions = list(read_web_documents([warc], WebDocumentsConfig(max_record_bytes=60_000_000)))
    reasons = {doc["url"]: reason for doc, reason in decisions}
    assert reasons["https://example.com/big.html"] is None
    assert reasons["https://example.com/big.mp4"] == "not_html"
    (page,) = [doc for doc, _ in decisions if doc["url"].endswith("big.html")]
    assert len(page["html"]) == len(big_html)


def test_unicode_and_spaces_in_crawl_warc_and_store_paths(tmp_path, capsys):
    root = tmp_path / "crawl ü dir" / "snap shot"
    warc = write_warc(root / "päge one, ü|x.warc.gz", pages(4))
    write_warc(root / "日本 two.warc", [gzip.decompress(r) for r in pages(2, start=4)])  # uncompressed
    out = tmp_path / "störe root ü" / "out put"
    args = ["--warc", str(root), "--out", str(out), "--snapshot", "schnée-1"]
    code, stdout, err = process_crawl(capsys, *args)
    assert code == 0 and "Traceback" not in err
    funnels = json.loads(stdout.strip().splitlines()[-1])
    assert funnels["web_documents"]["docs_in"] == 6 and funnels["deduplicated_text"]["docs_out"] >= 4
    metadata = web_documents_metadata(out)
    assert metadata["records"]["records"] == {"response": 6} and metadata["records"]["errors"] == []
    assert (out / "process_crawl" / "deduplicated_text" / "schnée-1").is_dir()
    assert warc.name in json.dumps(
        json.loads(next((out / "process_crawl" / "crawl").glob(f"*/*/{MANIFEST}")).read_text()),
        ensure_ascii=False,
    )


def test_unicode_snapshot_folders_and_store_root_through_dagster(tmp_path):
    root = tmp_path / "crawl ü root"
    write_warc(root / "2024-ü1" / "fïle one.warc.gz", pages(4))
    write_warc(root / "日本-2" / "sub dir" / "fïle two.warc.gz", pages(4, start=4))
    store = tmp_path / "störe ü" / "with space"
    text = crawl_and_text("uni", warc_root=str(root))
    run = materialize_experiment(Experiment("uni", steps=[text.deduplicated_text]), str(store))
    done = {(m.asset, m.partition) for m in run.materialized}
    assert {("uni/deduplicated_text", "2024-ü1"), ("uni/deduplicated_text", "日本-2")} <= done
    for snapshot in ("2024-ü1", "日本-2"):
        (manifest,) = (store / "uni" / "web_documents" / snapshot).glob(f"*/{MANIFEST}")
        assert json.loads(manifest.read_text())["metadata"]["funnel"]["docs_out"] == 4


@pytest.mark.parametrize("name", ["CC MAIN 2024", "a,b", "a|b", "2024...2025", "_hidden"])
def test_snapshot_folders_that_cannot_be_partition_keys_are_an_error_naming_them(tmp_path, capsys, name):
    root = tmp_path / "crawl"
    write_warc(root / name / "x.warc.gz", pages(1))
    write_warc(root / "fine-1" / "x.warc.gz", pages(1))
    with pytest.raises(ValueError) as error:
        crawl_snapshots(root)
    message = str(error.value)
    assert repr(name) in message and str(root) in message and "partition keys" in message
    assert "fine-1" not in message
    text = crawl_and_text("named", warc_root=str(root))
    with pytest.raises(ValueError, match="cannot be snapshot keys"):
        materialize_experiment(Experiment("named", steps=[text.deduplicated_text]), str(tmp_path / "store"))
    args = ["--warc", str(root / "fine-1"), "--out", str(tmp_path / "out"), "--snapshot", name]
    code, _, err = process_crawl(capsys, *args)
    assert code == 2 and "--snapshot" in err and "Traceback" not in err


def test_a_record_without_a_body_type_is_not_a_crash(tmp_path, capsys):
    """A response whose HTTP head is not HTTP at all: counted as corrupt, the rest read."""
    odd = record("response", "https://example.com/x", b"\x00\x01 no http")
    warc = write_warc(tmp_path / "odd.warc.gz", [*pages(2), odd])
    code, out, err = process_crawl(capsys, "--warc", str(warc), "--out", str(tmp_path / "out"))
    funnel = json.loads(out.strip().splitlines()[-1])["web_documents"]
    assert code == 0 and "Traceback" not in err
    assert funnel["docs_in"] == 3 and funnel["docs_out"] == 2 and funnel["removed"] == {"corrupt_record": 1}


def test_an_output_folder_under_a_file_is_an_error_naming_it(tmp_path, capsys):
    write_warc(tmp_path / "crawl" / "a.warc.gz", pages(1))
    (tmp_path / "a file").write_text("")
    code, _, err = process_crawl(
        capsys, "--warc", str(tmp_path / "crawl"), "--out", str(tmp_path / "a file" / "x")
    )
    assert code == 2 and "Not a directory" in err and "a file" in err and "Traceback" not in err
