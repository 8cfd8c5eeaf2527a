"""The demo crawl through every text stage, as the asset graph runs it: each stage reads the previous
stage's shards and writes its own."""

from collections import Counter
from pathlib import Path

import pytest

from marin_pipelines.crawl.web_documents import ReadStats, find_warc_files, read_web_documents
from marin_pipelines.documents import REMOVED_PREFIX, Funnel, read_documents, write_stage
from marin_pipelines.text.deduplicated_text import deduplicate
from marin_pipelines.text.extracted_text import extract_text
from marin_pipelines.text.filtered_text import filter_text

FAMILIES = ("language", "gopher_repetition", "gopher_quality", "c4", "fineweb")


@pytest.fixture(scope="module")
def chain(demo_crawl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Funnel], Path]:
    root = tmp_path_factory.mktemp("stages")
    dirs = {name: root / name for name in ("web", "extracted", "filtered", "deduplicated")}
    for path in dirs.values():
        path.mkdir()
    stats = ReadStats()
    funnels = {
        "web": write_stage(read_web_documents(find_warc_files(demo_crawl_dir), stats=stats), dirs["web"])
    }
    funnels["extracted"] = write_stage(extract_text(read_documents(dirs["web"])), dirs["extracted"])
    funnels["filtered"] = write_stage(filter_text(read_documents(dirs["extracted"])), dirs["filtered"])
    funnels["deduplicated"] = write_stage(deduplicate(read_documents(dirs["filtered"])), dirs["deduplicated"])
    assert not stats.errors
    return funnels, root


def _removed(root: Path, stage: str) -> list[dict]:
    return list(read_documents(root / stage, prefix=REMOVED_PREFIX, columns=["url", "reason"]))


def test_funnels_are_conserved_and_chained(chain):
    funnels, _ = chain
    stages = list(funnels)
    for stage in stages:
        assert funnels[stage].conserved, stage
    for before, after in zip(stages, stages[1:], strict=False):
        assert funnels[after].docs_in == funnels[before].docs_out


def test_every_rule_family_and_skip_reason_removes_something(chain):
    funnels, _ = chain
    assert {"empty_body", "http_error", "not_html"} <= set(funnels["web"].removed)
    assert funnels["extracted"].removed["no_text"] >= 1  # the script-rendered page
    families = Counter()
    for reason, count in funnels["filtered"].removed.items():
        families[reason.split(":")[0]] += count
    assert all(families[family] >= 1 for family in FAMILIES), families
    assert funnels["deduplicated"].removed["exact_duplicate"] >= 1
    assert funnels["deduplicated"].removed["near_duplicate"] >= 1


def test_enough_english_prose_survives(chain):
    funnels, root = chain
    kept = list(read_documents(root / "deduplicated", columns=["url", "text", "lang"]))
    assert len(kept) == funnels["deduplicated"].docs_out >= 150
    assert sum(len(doc["text"].encode()) for doc in kept) >= 350_000
    assert {doc["lang"] for doc in kept} == {"en"}
    urls = {doc["url"] for doc in kept}
    assert "https://cafe.example.org/history.html" in urls  # the Windows-1252 page made it through


def test_planted_cases_are_caught_where_expected(chain):
    _, root = chain
    kept = {doc["url"] for doc in read_documents(root / "deduplicated", columns=["url"])}
    for url in kept:  # of an original and its planted copy, at most one survives
        if "utm_source" in url:
            assert url.split("?")[0] not in kept
        if url.startswith("https://pydocs-mirror.example.net/"):
            slug = url.rstrip("/").rsplit("/", 1)[1]
            assert f"https://docs.example.org/reference/{slug}.html" not in kept
    filtered = {doc["url"]: doc["reason"] for doc in _removed(root, "filtered")}
    spam = [reason for url, reason in filtered.items() if "best-watch-deals" in url]
    gibberish = [reason for url, reason in filtered.items() if ".example.info/" in url]
    assert len(spam) == 5 and all(reason.startswith("gopher_repetition:") for reason in spam)
    assert len(gibberish) == 5 and set(gibberish) == {"language"}
    assert "near_duplicate" in {doc["reason"] for doc in _removed(root, "deduplicated")}
