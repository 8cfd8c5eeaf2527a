"""Fixed-length training sequences in a keyed shuffled order: the batch of any step in O(1).

The token stream of a split (documents joined by EOS) is cut into windows of ``seq_len + 1`` tokens
starting every ``seq_len`` tokens (inputs and shifted targets). Sample ``k`` of the endless stream is
window ``P_e(k mod n)`` of epoch ``e = k // n``, where ``P_e`` is a keyed permutation of ``range(n)``:
a Feistel network over the smallest even power of two >= n, cycle-walked back into range. Evaluating
it costs a few integer rounds per sample: no permutation is stored, no earlier step is replayed, and
the same seed gives the same batches on any machine, after any restart.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import numpy as np

ROUNDS = 6
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


class TokenStream(Protocol):
    """A split of a token cache, or anything else that reads windows of a token stream."""

    def __len__(self) -> int: ...

    def windows(self, starts: np.ndarray, length: int) -> np.ndarray: ...


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a cheap, well-mixing hash of 64-bit words (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


class KeyedPermutation:
    """A bijection of ``range(n)`` chosen by ``key``, evaluated elementwise without a table."""

    def __init__(self, n: int, key: tuple[int, ...]):
        if n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {n}")
        self.n = n
        self.half = np.uint64(max(1, ((n - 1).bit_length() + 1) // 2))
        self.mask = np.uint64((1 << int(self.half)) - 1)
        self.round_keys = np.random.SeedSequence(list(key)).generate_state(ROUNDS, np.uint64)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        x = self._feistel(np.asarray(positions, np.uint64))
        outside = x >= self.n
        while outside.any():  # cycle-walk: the domain is < 4n, so a few more rounds at most on average
            x[outside] = self._feistel(x[outside])
            outside = x >= self.n
        return x.astype(np.int64)

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self.half, x & self.mask
        for key in self.round_keys:
            left, right = right, left ^ (_mix(right ^ key) & self.mask)
        return (left << self.half) | right


@lru_cache(maxsize=64)
def _epoch_permutation(n: int, seed: int, epoch: int) -> KeyedPermutation:
    return KeyedPermutation(n, (seed, epoch))


def read_windows(tokens: TokenStream | np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    if isinstance(tokens, np.ndarray):
        return np.asarray(tokens[starts[:, None] + np.arange(length)], np.int32)
    return tokens.windows(starts, length)


class SequenceLoader:
    """Batches of ``seq_len + 1`` token windows from one stream, every window once per epoch."""

    def __init__(self, tokens: TokenStream | np.ndarray, seq_len: int, batch_size: int, seed: int):
        if seq_len < 1 or batch_size < 1:
            raise ValueError(
                f"seq_len and batch_size must be >= 1, got seq_len={seq_len} batch_size={batch_size}"
            )
        if len(tokens) < seq_len + 1:
            raise ValueError(
                f"too few tokens for one sequence: have {len(tokens)}, need seq_len + 1 = {seq_len + 1}"
            )
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.num_sequences = (len(tokens) - 1) // seq_len

    def batch(self, step: int) -> np.ndarray:
        """The ``(batch_size, seq_len + 1)`` int32 batch of training step ``step``."""
        return self.rows(step, 0, self.batch_size)

    def rows(self, step: int, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of ``batch(step)``, reading only those: each process of a multi-host run
        reads its own share of the global batch and nothing else."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if not 0 <= start <= stop <= self.batch_size:
            raise ValueError(f"rows {start}:{stop} are outside a batch of {self.batch_size}")
        return self.samples(step * self.batch_size + start, stop - start)

    def samples(self, first: int, count: int) -> np.ndarray:
        """Samples ``first`` to ``first + count`` of the stream of windows (epoch after epoch): what a
        mixture whose shares change by step reads, each source from where its earlier steps left it."""
        windows = shuffled(first, count, self.num_sequences, self.seed)
        return read_windows(self.tokens, windows * self.seq_len, self.seq_len + 1)


def shuffled(first: int, count: int, n: int, seed: int) -> np.ndarray:
    """Items ``first`` to ``first + count`` of the endless stream that visits ``range(n)`` once per epoch,
    each epoch in its own keyed order: any stretch computed alone."""
    samples = np.arange(first, first + count, dtype=np.int64)
    epochs, positions = np.divmod(samples, n)
    items = np.empty(len(samples), np.int64)
    for epoch in np.unique(epochs).tolist():
        here = epochs == epoch
        items[here] = _epoch_permutation(n, seed, epoch)(positions[here])
    return items
