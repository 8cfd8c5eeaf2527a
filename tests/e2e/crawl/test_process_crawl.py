"""`marin-pipelines process-crawl`: the text chain without the UI, into the assets' store layout."""

import json
import subprocess
import sys

from marin_pipelines.cli import main
from marin_pipelines.documents import read_documents
from marin_pipelines.process_crawl import DOCUMENT_STAGES, EXPERIMENT
from marin_pipelines.store import MANIFEST


def test_process_crawl_writes_every_stage_and_prints_the_funnel(demo_crawl, shared_data, tmp_path, capsys):
    crawl, _ = demo_crawl
    edge = shared_data / "warc-edge-cases"
    args = ["process-crawl", "--warc", str(crawl), str(edge / "example.arc.gz"), "--out", str(tmp_path)]
    assert main([*args, "--workers", "2", "--snapshot", "2024-10"]) == 0
    funnels = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(funnels) == sorted(DOCUMENT_STAGES)
    for before, after in zip(DOCUMENT_STAGES, DOCUMENT_STAGES[1:], strict=False):
        assert funnels[after]["docs_in"] == funnels[before]["docs_out"]
    for funnel in funnels.values():
        assert funnel["docs_in"] == funnel["docs_out"] + sum(funnel["removed"].values())
    assert funnels["deduplicated_text"]["removed"]["near_duplicate"] >= 1
    for stage in ("crawl", *DOCUMENT_STAGES):
        (manifest,) = (tmp_path / EXPERIMENT / stage / "2024-10").glob(f"*/{MANIFEST}")
        if stage != "crawl":
            assert json.loads(manifest.read_text())["metadata"]["funnel"] == funnels[stage]
    (final,) = (tmp_path / EXPERIMENT / "deduplicated_text" / "2024-10").iterdir()
    assert len(list(read_documents(final))) == funnels["deduplicated_text"]["docs_out"]

    assert main([*args, "--workers", "1", "--snapshot", "2024-10"]) == 0  # reused by version
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == funnels
    assert len(list((tmp_path / EXPERIMENT / "deduplicated_text" / "2024-10").iterdir())) == 1


def test_process_crawl_bad_input_is_a_clear_error(tmp_path, capsys):
    assert main(["process-crawl", "--warc", str(tmp_path / "nope.warc.gz"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nope.warc.gz" in err and "Traceback" not in err
    (tmp_path / "a.warc").write_bytes(b"")
    assert main(["process-crawl", "--warc", str(tmp_path), "--out", str(tmp_path), "--snapshot", "a b"]) == 2
    assert "--snapshot" in capsys.readouterr().err


def test_damaged_files_are_told_and_a_full_disk_is_one_line_naming_the_output(demo_crawl, tmp_path, capsys):
    from bad_warcs import pages, write_warc

    whole = write_warc(tmp_path / "crawl" / "whole.warc", pages(12))
    cut = tmp_path / "crawl" / "cut.warc"
    data = pages(12, start=100)
    cut.write_bytes(b"".join(data)[: sum(map(len, data[:7])) + 40])  # the eighth record's header cut short
    assert main(["process-crawl", "--warc", str(whole.parent), "--out", str(tmp_path / "out")]) == 0
    notes = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("marin-pipelines: note:")
    ]
    assert any("1 damaged files" in line for line in notes), notes
    assert any("cut.warc" in line for line in notes) and not any("whole.warc" in line for line in notes)

    crawl, _ = demo_crawl
    out = tmp_path / "full"
    command = f'ulimit -f 8 && exec "{sys.executable}" -m marin_pipelines.cli "$@"'
    args = ["process-crawl", "--warc", str(crawl), "--out", str(out)]
    full = subprocess.run(["bash", "-c", command, "-", *args], capture_output=True, text=True)
    assert full.returncode == 2 and full.stderr.count("\n") == 1, full.stderr[-3000:]
    assert "no space left" in full.stderr and str(out) in full.stderr
