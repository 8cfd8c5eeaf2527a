"""A small token cache built the way the pipeline builds one, for the CLI and launcher tests."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin_pipelines.tokenize.tokenized_cache import CacheConfig, build_cache
from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer

WORDS = ["river", "stone", "paper", "light", "garden", "window", "market", "winter", "music", "letter"]


def write_tiny_cache(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(20, 80)))) for _ in range(300)]
    docs = folder / "docs"
    docs.mkdir(parents=True)
    pq.write_table(
        pa.table({"id": [f"d{i}" for i in range(300)], "text": texts}), docs / "documents-0.parquet"
    )
    tokenizer = train_tokenizer(texts, TokenizerConfig(vocab_size=300))
    cache = folder / "cache"
    cache.mkdir()
    build_cache([str(docs)], tokenizer, cache, CacheConfig(validation_fraction=0.1), folder / "work")
    return cache


@pytest.fixture(scope="session")
def token_cache(tmp_path_factory) -> Path:
    return write_tiny_cache(tmp_path_factory.mktemp("token_cache"))
