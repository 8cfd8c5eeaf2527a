"""Mixtures: fixed per-source counts in every batch, each source's own shuffle, one tokenizer."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer

from marin_pipelines.tokenize.data_mixture import MixtureConfig, MixtureLoader, batch_counts
from marin_pipelines.tokenize.sequence_loader import SequenceLoader
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, TokenCache, build_cache
from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer


def test_batch_counts() -> None:
    assert batch_counts({"web": 0.7, "code": 0.3}, 16) == {"web": 11, "code": 5}
    assert batch_counts({"a": 1, "b": 1, "c": 1}, 16) == {"a": 6, "b": 5, "c": 5}  # ties: config order
    assert batch_counts({"only": 2.5}, 16) == {"only": 16}
    with pytest.raises(ValueError, match=r"sources \['rare'\] get 0 of 16"):
        batch_counts({"common": 0.99, "rare": 0.01}, 16)
    with pytest.raises(ValidationError, match="weight"):
        MixtureConfig(sources={"a": {"weight": 0}})
    with pytest.raises(ValidationError, match="sources"):
        MixtureConfig(sources={})


@pytest.fixture
def caches(
    tokenizer: Tokenizer, tmp_path: Path, make_docs: Callable, write_parquet: Callable
) -> dict[str, Path]:
    out = {}
    for name, start in (("web", 0), ("books", 10_000)):
        inputs = write_parquet(make_docs(200, start), tmp_path / f"in-{name}", files=2)
        (tmp_path / name).mkdir()
        build_cache([str(inputs)], tokenizer, tmp_path / name, CacheConfig(), tmp_path / f".{name}.work")
        out[name] = tmp_path / name
    return out


def windows(cache: Path, seq_len: int) -> set[tuple[int, ...]]:
    stream = np.asarray(TokenCache(cache).train)
    return {tuple(stream[s : s + seq_len + 1]) for s in range(0, len(stream) - seq_len, seq_len)}


def test_every_batch_holds_fixed_counts(caches: dict[str, Path]) -> None:
    config = MixtureConfig(
        sources={"web": {"weight": 3}, "books": {"cache": str(caches["books"]), "weight": 1}}
    )
    loader = MixtureLoader.from_config(config, str(caches["web"]), seq_len=16, batch_size=8, seed=0)
    assert loader.counts == {"web": 6, "books": 2}
    web, books = windows(caches["web"], 16), windows(caches["books"], 16)
    for step in (0, 1, 77, 5000):
        batch = loader.batch(step)
        assert batch.shape == (8, 17) and batch.dtype == np.int32
        assert all(tuple(row) in web for row in batch[:6]) and all(tuple(row) in books for row in batch[6:])
    again = MixtureLoader.from_config(config, str(caches["web"]), seq_len=16, batch_size=8, seed=0)
    np.testing.assert_array_equal(again.batch(77), loader.batch(77))
    # each source is its own seeded stream: its rows are that source's loader at the same step
    web_only = SequenceLoader(TokenCache(caches["web"]).train, 16, 6, loader.loaders["web"].seed)
    np.testing.assert_array_equal(web_only.batch(77), loader.batch(77)[:6])
    assert set(loader.validation) == {"web", "books"}
    assert (
        len(loader.validation["books"]) == TokenCache(caches["books"]).info["splits"]["validation"]["tokens"]
    )


def test_one_source_is_the_plain_loader(caches: dict[str, Path]) -> None:
    loader = MixtureLoader.from_config(MixtureConfig(), str(caches["web"]), seq_len=16, batch_size=4, seed=2)
    assert loader.counts == {"main": 4}
    np.testing.assert_array_equal(loader.batch(3), loader.loaders["main"].batch(3))


def test_sources_must_share_the_tokenizer(
    caches: dict[str, Path], tmp_path: Path, make_docs: Callable
) -> None:
    other = train_tokenizer([d["text"] for d in make_docs(50)], TokenizerConfig(vocab_size=300))
    (tmp_path / "in.jsonl").write_text('{"text": "some words"}\n{"text": "more words"}\n')
    (tmp_path / "other").mkdir()
    build_cache([str(tmp_path / "in.jsonl")], other, tmp_path / "other", CacheConfig(), tmp_path / ".o.work")
    config = MixtureConfig(
        sources={"web": {"weight": 1}, "other": {"cache": str(tmp_path / "other"), "weight": 1}}
    )
    with pytest.raises(ValueError, match="different tokenizers"):
        MixtureLoader.from_config(config, str(caches["web"]), seq_len=4, batch_size=4, seed=0)
