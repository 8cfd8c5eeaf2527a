"""Keyed permutation and loader: bijective, seed-determined, any step computed directly (seek == iterate)."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from marin_pipelines.tokenize.sequence_loader import KeyedPermutation, SequenceLoader
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, TokenCache, build_cache


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 65, 1000, 4097])
def test_keyed_permutation_is_a_bijection(n: int) -> None:
    perm = KeyedPermutation(n, (0, 0))
    values = perm(np.arange(n))
    assert sorted(values.tolist()) == list(range(n))
    np.testing.assert_array_equal(perm(np.arange(n)[::-1]), values[::-1])  # elementwise, any order
    if n >= 64:
        assert not np.array_equal(values, np.arange(n))
        assert not np.array_equal(values, KeyedPermutation(n, (0, 1))(np.arange(n)))


def test_seek_equals_iterate_and_epochs() -> None:
    tokens = np.arange(1001, dtype=np.uint16)
    loader = SequenceLoader(tokens, seq_len=10, batch_size=7, seed=3)
    assert loader.num_sequences == 100
    sequential = [loader.batch(step) for step in range(43)]  # 3 epochs; some batches straddle two
    fresh = SequenceLoader(tokens, seq_len=10, batch_size=7, seed=3)  # a restarted run
    for step in (42, 0, 14, 15, 28):
        np.testing.assert_array_equal(fresh.batch(step), sequential[step])
    assert sequential[0].shape == (7, 11) and sequential[0].dtype == np.int32
    assert (np.diff(sequential[0], axis=1) == 1).all() and (sequential[0][:, 0] % 10 == 0).all()
    starts = np.concatenate(sequential)[:, 0]
    for epoch in range(3):  # every window exactly once per epoch, in a new order each epoch
        assert sorted(starts[epoch * 100 : (epoch + 1) * 100].tolist()) == list(range(0, 1000, 10))
    assert not np.array_equal(starts[:100], starts[100:200])
    assert not np.array_equal(SequenceLoader(tokens, 10, 7, seed=4).batch(0), sequential[0])


def test_far_step_is_direct() -> None:
    """Step 10^12 of a stream is one batch's work, and stable: same seed, same batch."""
    loader = SequenceLoader(np.arange(100_001, dtype=np.uint32), seq_len=100, batch_size=4, seed=9)
    far = loader.batch(10**12)
    np.testing.assert_array_equal(far, SequenceLoader(loader.tokens, 100, 4, 9).batch(10**12))
    assert far.shape == (4, 101) and (far[:, 0] % 100 == 0).all()


def test_loader_over_a_sharded_cache(
    tokenizer: Tokenizer, tmp_path: Path, make_docs: Callable, write_parquet: Callable
) -> None:
    inputs = write_parquet(make_docs(300), tmp_path / "in", files=3)
    (tmp_path / "cache").mkdir()
    build_cache([str(inputs)], tokenizer, tmp_path / "cache", CacheConfig(), tmp_path / ".work")
    split = TokenCache(tmp_path / "cache").train
    over_cache = SequenceLoader(split, seq_len=32, batch_size=8, seed=1)
    over_array = SequenceLoader(np.asarray(split), seq_len=32, batch_size=8, seed=1)
    for step in (0, 5, 1000):
        np.testing.assert_array_equal(over_cache.batch(step), over_array.batch(step))


def test_loader_errors() -> None:
    with pytest.raises(ValueError, match="too few tokens for one sequence: have 10, need seq_len \\+ 1 = 11"):
        SequenceLoader(np.arange(10), seq_len=10, batch_size=1, seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        SequenceLoader(np.arange(100), seq_len=10, batch_size=0, seed=0)
    with pytest.raises(ValueError, match="step"):
        SequenceLoader(np.arange(100), seq_len=10, batch_size=2, seed=0).batch(-1)
    with pytest.raises(ValueError, match="n >= 1"):
        KeyedPermutation(0, (0,))
