"""The default demo crawl, built once for the text tests, and its web documents."""

from pathlib import Path

import pytest

from marin_pipelines.crawl.demo_crawl import DemoCrawlConfig, build_demo_crawl
from marin_pipelines.crawl.web_documents import find_warc_files, read_web_documents


@pytest.fixture(scope="session")
def demo_crawl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo-crawl")
    build_demo_crawl(out, DemoCrawlConfig())
    return out


@pytest.fixture(scope="session")
def demo_docs(demo_crawl_dir: Path) -> list[dict]:
    return [doc for doc, reason in read_web_documents(find_warc_files(demo_crawl_dir)) if reason is None]
