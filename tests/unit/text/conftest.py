"""The demo crawl's web documents, read once for the text tests."""

from pathlib import Path

import pytest

from marin_pipelines.crawl.web_documents import find_warc_files, read_web_documents


@pytest.fixture(scope="session")
def demo_crawl_dir(demo_crawl: tuple[Path, dict]) -> Path:
    return demo_crawl[0]


@pytest.fixture(scope="session")
def demo_docs(demo_crawl_dir: Path) -> list[dict]:
    return [doc for doc, reason in read_web_documents(find_warc_files(demo_crawl_dir)) if reason is None]
