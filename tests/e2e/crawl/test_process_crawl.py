"""`marin-pipelines process-crawl`: the text chain without the UI, into the assets' store layout."""

import json

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
