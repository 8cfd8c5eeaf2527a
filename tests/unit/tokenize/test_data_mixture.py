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
    assert loader.counts(0) == {"web": 6, "books": 2}
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
    assert loader.counts(0) == {"main": 4}
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


def test_a_staged_mixture_changes_shares_at_its_steps_and_seeks_in_o1(caches: dict[str, Path]) -> None:
    """3:1 web:books, then books only from step 5 (a cooldown), then 1:1 from step 9: each batch holds the
    stage's counts, and each source's rows over the steps are its own stream read once, in order, across
    the stage boundaries; any step is computed alone and equals the same step of another loader."""
    config = MixtureConfig(
        sources={"web": {"weight": 3}, "books": {"cache": str(caches["books"]), "weight": 1}},
        stages=[{"start": 5, "weights": {"books": 1}}, {"start": 9, "weights": {"web": 1, "books": 1}}],
    )
    loader = MixtureLoader.from_config(config, str(caches["web"]), seq_len=16, batch_size=8, seed=0)
    counts = [loader.counts(step) for step in range(12)]
    assert counts[:5] == [{"web": 6, "books": 2}] * 5
    assert counts[5:9] == [{"web": 0, "books": 8}] * 4
    assert counts[9:] == [{"web": 4, "books": 4}] * 3
    web, books = windows(caches["web"], 16), windows(caches["books"], 16)
    rows = {"web": [], "books": []}
    for step in range(12):
        batch, offset = loader.batch(step), 0
        for name in ("web", "books"):
            rows[name] += [tuple(r) for r in batch[offset : offset + counts[step][name]]]
            offset += counts[step][name]
    assert all(r in web for r in rows["web"]) and all(r in books for r in rows["books"])
    for (
        name,
        got,
    ) in rows.items():  # contiguous in each source's own stream: nothing repeated, nothing skipped
        stream = loader.loaders[name].samples(0, len(got))
        assert got == [tuple(r) for r in stream]
    assert (loader.consumed("web", 12), loader.consumed("books", 12)) == (
        5 * 6 + 3 * 4,
        5 * 2 + 4 * 8 + 3 * 4,
    )
    fresh = MixtureLoader.from_config(config, str(caches["web"]), seq_len=16, batch_size=8, seed=0)
    np.testing.assert_array_equal(fresh.batch(10_000), loader.batch(10_000))  # a restart, far on
    np.testing.assert_array_equal(fresh.rows(7, 3, 6), loader.batch(7)[3:6])  # one host's share


def test_stages_are_checked_against_the_sources() -> None:
    sources = {"web": {"weight": 1}, "books": {"weight": 1}}
    with pytest.raises(ValidationError, match=r"\['code'\] are not sources"):
        MixtureConfig(sources=sources, stages=[{"start": 3, "weights": {"code": 1}}])
    with pytest.raises(ValidationError, match="start steps must increase"):
        MixtureConfig(
            sources=sources,
            stages=[{"start": 5, "weights": {"web": 1}}, {"start": 5, "weights": {"books": 1}}],
        )
    with pytest.raises(ValidationError, match="one of them > 0"):
        MixtureConfig(sources=sources, stages=[{"start": 3, "weights": {"web": 0}}])
    config = MixtureConfig(sources={"common": {"weight": 1}, "rare": {"weight": 1}}, stages=[
        {"start": 4, "weights": {"common": 0.99, "rare": 0.01}}
    ])  # fmt: skip
    with pytest.raises(ValueError, match=r"sources \['rare'\] get 0 of 16"):
        config.batch_counts(16)


def test_epochs_count_each_sources_reads_through_the_stages() -> None:
    mixture = MixtureConfig(
        sources={"a": {"weight": 1.0}, "b": {"cache": "/b", "weight": 0.0}},
        stages=[{"start": 10, "weights": {"a": 1.0, "b": 1.0}}],
    )
    # batch 4: a has 4 rows for 10 steps, then 2 for 10; b none, then 2. Windows: a 80 // 8, b 40 // 8
    epochs = mixture.epochs(batch_size=4, steps=20, seq_len=8, train_tokens={"a": 81, "b": 41})
    assert epochs == {"a": 60 / 10, "b": 20 / 5}


def test_cache_urls_fill_a_source_without_a_cache_with_the_steps_own() -> None:
    mixture = MixtureConfig(sources={"web": {"weight": 3}, "code": {"weight": 1, "cache": "gs://b/code"}})
    assert mixture.cache_urls("/store/web") == {"web": "/store/web", "code": "gs://b/code"}
    as_input = MixtureConfig(sources={"web": {"weight": 1}, "code": {"weight": 1, "input": "cache_code"}})
    assert as_input.with_inputs({"cache_code": "/store/code"}).cache_urls("/w")["code"] == "/store/code"
