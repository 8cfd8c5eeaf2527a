"""Token cache: stable id-hash split, EOS after every document, dtype by vocabulary, seekable batches."""

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer, models

from marin_pipelines.tokenize.tokenized_cache import (
    CacheConfig,
    SequenceLoader,
    TokenCache,
    build_cache,
    split_key,
)
from marin_pipelines.tokenize.tokenizer import EOS, TokenizerConfig, train_tokenizer

WORDS = [
    "river",
    "stone",
    "paper",
    "light",
    "garden",
    "window",
    "market",
    "winter",
    "music",
    "letter",
    "station",
    "bridge",
]


def make_docs(n: int) -> list[dict]:
    rng = np.random.default_rng(n)
    return [
        {
            "id": f"doc-{i}",
            "url": f"https://example.org/{i}",
            "title": f"page {i}",
            "lang": "en",
            "text": " ".join(rng.choice(WORDS, size=int(rng.integers(5, 60)))) + f" ({i}) Grüße 😀",
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer([doc["text"] for doc in make_docs(200)], TokenizerConfig(vocab_size=400))


def test_build_and_open(tokenizer: Tokenizer, tmp_path: Path) -> None:
    docs = make_docs(400)
    config = CacheConfig(validation_fraction=0.1, encode_batch_size=64)
    info = build_cache(docs, tokenizer, tmp_path, config)
    assert json.loads((tmp_path / "cache.json").read_text()) == info
    assert info["dtype"] == "uint16" and info["eos_id"] == tokenizer.token_to_id(EOS) == 0
    assert info["vocab_size"] == tokenizer.get_vocab_size() > 300
    train, val = info["splits"]["train"], info["splits"]["validation"]
    assert train["documents"] + val["documents"] == 400
    assert 15 <= val["documents"] <= 70  # about 10%
    expected_val = [d for d in docs if split_key(d["id"], config.seed) < 0.1]
    assert val["documents"] == len(expected_val)
    assert val["text_bytes"] == sum(len(d["text"].encode()) for d in expected_val)

    cache = TokenCache(tmp_path)
    assert cache.info == info
    assert cache.train.dtype == np.uint16 and len(cache.train) == train["tokens"]
    assert len(cache.validation) == val["tokens"] == (tmp_path / "validation.bin").stat().st_size // 2
    # every document's tokens then EOS, in input order: decoding the split gives the texts back
    pieces = np.split(np.asarray(cache.validation), np.flatnonzero(cache.validation == 0) + 1)[:-1]
    assert [tokenizer.decode(p[:-1].tolist()) for p in pieces] == [d["text"] for d in expected_val]
    assert int((cache.train == 0).sum()) == train["documents"]


def test_split_is_stable_per_document(tokenizer: Tokenizer, tmp_path: Path) -> None:
    docs = make_docs(300)
    (tmp_path / "small").mkdir(), (tmp_path / "large").mkdir()
    small = build_cache(docs[:100], tokenizer, tmp_path / "small", CacheConfig())
    large = build_cache(docs, tokenizer, tmp_path / "large", CacheConfig())
    val_small = _validation_texts(tokenizer, tmp_path / "small")
    assert val_small and set(val_small) <= set(_validation_texts(tokenizer, tmp_path / "large"))
    assert small["splits"]["validation"]["documents"] < large["splits"]["validation"]["documents"]
    other_seed = build_cache(docs, tokenizer, tmp_path, CacheConfig(seed=7))
    assert other_seed["splits"]["validation"] != large["splits"]["validation"]


def _validation_texts(tokenizer: Tokenizer, path: Path) -> list[str]:
    tokens = np.asarray(TokenCache(path).validation)
    return [tokenizer.decode(p[:-1].tolist()) for p in np.split(tokens, np.flatnonzero(tokens == 0) + 1)[:-1]]


def test_validation_never_empty_with_two_docs(tokenizer: Tokenizer, tmp_path: Path) -> None:
    docs = make_docs(2)
    config = CacheConfig(validation_fraction=1e-9)
    assert all(split_key(d["id"], config.seed) >= 1e-9 for d in docs)
    info = build_cache(docs, tokenizer, tmp_path, config)
    lowest = min(docs, key=lambda d: split_key(d["id"], config.seed))
    assert info["splits"]["validation"]["documents"] == info["splits"]["train"]["documents"] == 1
    assert _validation_texts(tokenizer, tmp_path) == [lowest["text"]]


def test_single_document_goes_to_train(tokenizer: Tokenizer, tmp_path: Path) -> None:
    info = build_cache(make_docs(1), tokenizer, tmp_path, CacheConfig(validation_fraction=1e-9))
    assert info["splits"]["train"]["documents"] == 1
    cache = TokenCache(tmp_path)
    assert len(cache.validation) == 0 and cache.train[-1] == 0


def test_empty_input_and_bad_config(tokenizer: Tokenizer, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no documents to tokenize"):
        build_cache([], tokenizer, tmp_path, CacheConfig())
    with pytest.raises(FileNotFoundError, match="not a token cache"):
        TokenCache(tmp_path / "nothing")
    with pytest.raises(ValidationError, match="validation_fraction"):
        CacheConfig(validation_fraction=0)


def test_uint32_for_large_vocabulary(tmp_path: Path) -> None:
    vocab = {f"w{i}": i for i in range(70_000)} | {EOS: 70_000}
    big = Tokenizer(models.WordLevel(vocab, unk_token=EOS))
    info = build_cache(
        [{"id": "a", "text": "w69999"}, {"id": "b", "text": "w1"}], big, tmp_path, CacheConfig()
    )
    assert info["dtype"] == "uint32"
    cache = TokenCache(tmp_path)
    assert sorted(np.concatenate([cache.train, cache.validation]).tolist()) == [1, 69_999, 70_000, 70_000]


def test_loader_is_deterministic_and_seekable() -> None:
    tokens = np.arange(1001, dtype=np.uint16)
    loader = SequenceLoader(tokens, seq_len=10, batch_size=7, seed=3)
    assert loader.num_sequences == 100
    sequential = [loader.batch(step) for step in range(40)]  # about 3 epochs, batches across epochs
    fresh = SequenceLoader(tokens, seq_len=10, batch_size=7, seed=3)
    for step in (39, 0, 14, 15, 28):
        np.testing.assert_array_equal(fresh.batch(step), sequential[step])
    assert sequential[0].shape == (7, 11) and sequential[0].dtype == np.int32
    # inputs and targets: each row is seq_len + 1 consecutive tokens starting on a window boundary
    assert (np.diff(sequential[0], axis=1) == 1).all() and (sequential[0][:, 0] % 10 == 0).all()
    other = SequenceLoader(tokens, seq_len=10, batch_size=7, seed=4)
    assert not np.array_equal(other.batch(0), sequential[0])


def test_every_window_once_per_epoch() -> None:
    tokens = np.arange(961, dtype=np.uint32)
    loader = SequenceLoader(tokens, seq_len=8, batch_size=6, seed=0)
    assert loader.num_sequences == 120
    for epoch in range(3):
        steps = range(epoch * 20, (epoch + 1) * 20)
        starts = np.concatenate([loader.batch(step)[:, 0] for step in steps])
        assert sorted(starts.tolist()) == list(range(0, 960, 8))
        assert starts.tolist() != sorted(starts.tolist())  # shuffled
    first, second = (
        np.concatenate([loader.batch(s)[:, 0] for s in range(e * 20, e * 20 + 20)]) for e in (0, 1)
    )
    assert not np.array_equal(first, second)  # a new order each epoch


def test_loader_errors() -> None:
    with pytest.raises(ValueError, match="too few tokens for one sequence: have 10, need seq_len \\+ 1 = 11"):
        SequenceLoader(np.arange(10), seq_len=10, batch_size=1, seed=0)
    with pytest.raises(ValueError, match="too few tokens"):
        SequenceLoader(np.zeros(0, dtype=np.uint16), seq_len=4, batch_size=1, seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        SequenceLoader(np.arange(100), seq_len=10, batch_size=0, seed=0)
    with pytest.raises(ValueError, match="step"):
        SequenceLoader(np.arange(100), seq_len=10, batch_size=2, seed=0).batch(-1)


def test_loader_over_cache(tokenizer: Tokenizer, tmp_path: Path) -> None:
    build_cache(make_docs(300), tokenizer, tmp_path, CacheConfig())
    cache = TokenCache(tmp_path)
    batch = SequenceLoader(cache.train, seq_len=32, batch_size=4, seed=0).batch(5)
    assert batch.shape == (4, 33) and batch.max() < 400
