"""Small documents in parquet / jsonl files, and a tokenizer trained on them."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer

WORDS = ["river", "stone", "paper", "light", "garden", "window", "market", "winter", "music", "letter"]


def make_docs(n: int, start: int = 0) -> list[dict]:
    rng = np.random.default_rng(n + start)
    return [
        {
            "id": f"doc-{i}",
            "text": " ".join(rng.choice(WORDS, size=int(rng.integers(5, 60)))) + f" ({i}) Grüße 😀",
        }
        for i in range(start, start + n)
    ]


def write_parquet(docs: list[dict], folder: Path, files: int) -> Path:
    """``docs`` over ``files`` files named like a document stage's output."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(docs)), files)):
        rows = [docs[j] for j in part]
        table = pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows]})
        pq.write_table(table, folder / f"documents-{i:05d}.parquet")
    return folder


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return train_tokenizer([doc["text"] for doc in make_docs(200)], TokenizerConfig(vocab_size=400))


@pytest.fixture(name="make_docs", scope="session")
def make_docs_fixture() -> Callable[..., list[dict]]:
    return make_docs


@pytest.fixture(name="write_parquet", scope="session")
def write_parquet_fixture() -> Callable[..., Path]:
    return write_parquet
