import json
import math

import numpy as np
import pytest

from marin_pipelines.scaling import ladder_diagnostics as diagnostics
from marin_pipelines.scaling.ladder_diagnostics import ladder_diagnostics, target_epochs, unigram_loss
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, TokenCache, build_cache
from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer


def test_unigram_loss_is_the_cross_entropy_of_train_frequencies():
    train, validation = np.array([0, 0, 0, 1]), np.array([0, 1])
    # add-1/2 over a vocabulary of 4: p(0) = 3.5 / 6, p(1) = 1.5 / 6
    expected = -(math.log(3.5 / 6) + math.log(1.5 / 6)) / 2
    assert unigram_loss([train], [validation], vocab_size=4) == pytest.approx(expected)
    # two sources pool their counts and their validation tokens
    pooled = unigram_loss([train[:2], train[2:]], [validation[:1], validation[1:]], vocab_size=4)
    assert pooled == pytest.approx(expected)
    # a uniform sample over the whole vocabulary costs about log(vocab)
    rng = np.random.default_rng(0)
    uniform = unigram_loss([rng.integers(0, 256, 100_000)], [rng.integers(0, 256, 10_000)], 256)
    assert uniform == pytest.approx(math.log(256), rel=1e-3)
    with pytest.raises(ValueError, match="validation split is empty"):
        unigram_loss([train], [np.array([], dtype=np.int64)], 4)


def test_target_epochs_follow_the_most_repeated_source():
    assert target_epochs(1000, {"main": (1.0, 100)}) == 10
    # a quarter of 1,000 tokens from 50 unique tokens is 5 epochs; three quarters of 1,000 from 1,000: 0.75
    assert target_epochs(1000, {"small": (1.0, 50), "big": (3.0, 1000)}) == 5


def test_diagnostics_name_each_reason_not_to_trust_the_extrapolation():
    runs = [{"run": "a", "loss": 6.5}, {"run": "b", "loss": 6.0}, {"run": "c", "loss": 5.0}]
    good = ladder_diagnostics(runs, unigram=6.6, epochs=1.0)
    assert good["warnings"] == [] and good["rungs_not_beating_unigram"] == []
    bad = ladder_diagnostics(runs, unigram=6.2, epochs=10.0)
    assert bad["rungs_not_beating_unigram"] == ["a"]
    assert len(bad["warnings"]) == 2
    assert "1 of 3 rungs" in bad["warnings"][0] and "10.0 times" in bad["warnings"][1]


def test_a_mixture_is_counted_block_by_block_as_if_whole(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    words = ["river", "stone", "paper", "light", "garden", "window", "market", "winter"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(20, 80)))) for _ in range(200)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tokenizer = train_tokenizer(texts, TokenizerConfig(vocab_size=300))
    (tmp_path / "cache").mkdir()
    build_cache([str(tmp_path / "docs.jsonl")], tokenizer, tmp_path / "cache", CacheConfig(), tmp_path / "w")
    cache = TokenCache(tmp_path / "cache")
    vocab = cache.info["vocab_size"]
    train, validation = np.asarray(cache.train), np.asarray(cache.validation)
    whole = unigram_loss([train], [validation], vocab)
    pooled = unigram_loss([train, train], [validation, validation], vocab)  # two sources, whole arrays
    monkeypatch.setattr(diagnostics, "BLOCK_TOKENS", 1000)  # several blocks per split
    assert len(list(diagnostics.blocks(cache.train))) > 1
    runs = [{"run": "a", "loss": whole + 1}, {"run": "b", "loss": whole - 1}]
    found = diagnostics.mixture_diagnostics(runs, {"x": (1.0, cache), "y": (3.0, cache)}, 4e4, vocab)
    assert found["unigram_loss"] == pytest.approx(pooled)
    alone = diagnostics.mixture_diagnostics(runs, {"x": (1.0, cache)}, 4e4, vocab)
    assert alone["unigram_loss"] == pytest.approx(whole)
    assert found["target_epochs"] == pytest.approx(4e4 * 0.75 / len(cache.train))
    assert found["rungs_not_beating_unigram"] == ["a"]


def test_a_source_without_training_tokens_is_a_clear_error():
    with pytest.raises(ValueError, match=r"\['empty'\] have no training tokens"):
        target_epochs(1000, {"main": (1.0, 100), "empty": (1.0, 0)})
