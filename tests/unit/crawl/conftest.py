"""The default demo crawl, built once for the crawl tests."""

from pathlib import Path

import pytest

from marin_pipelines.crawl.demo_crawl import DemoCrawlConfig, build_demo_crawl


@pytest.fixture(scope="session")
def demo_crawl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo-crawl")
    return out, build_demo_crawl(out, DemoCrawlConfig())
