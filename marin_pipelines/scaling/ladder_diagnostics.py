"""Whether a ladder can support its extrapolation: rungs past the unigram phase, a target not repeating data.

A power law in N and D describes training once a model has learnt more than token frequencies. Before
that, loss falls from log(vocab) towards the unigram entropy in a phase of its own, and a law fitted to
rungs still in it extrapolates that phase, not scaling. And a target that repeats its data many times is
outside what any rung saw: Muennighoff et al. (2023) find up to ~4 epochs nearly as good as unique data,
and diminishing returns beyond. Both are cheap to see from the cache, so the prediction states them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any

import numpy as np

from marin_pipelines.tokenize.tokenized_cache import TokenCache, TokenSplit

MAX_TARGET_EPOCHS = 4.0  # Muennighoff et al. (2023): repeated data is close to unique up to ~4 epochs
BLOCK_TOKENS = 1 << 24  # counted at a time: a cache of billions of tokens in bounded memory


def blocks(split: TokenSplit) -> Iterator[np.ndarray]:
    """A split's tokens, ``BLOCK_TOKENS`` at a time."""
    for start in range(0, len(split), BLOCK_TOKENS):
        yield split.windows(np.array([start]), min(BLOCK_TOKENS, len(split) - start))[0]


def unigram_loss(train: Iterable[np.ndarray], validation: Iterable[np.ndarray], vocab_size: int) -> float:
    """Validation cross-entropy (nats per token) of train's token frequencies, add-1/2 smoothed.

    ``train`` and ``validation`` are blocks of tokens: several sources are pooled, as the mixture's
    validation loss pools them (nats over tokens).
    """
    counts = np.zeros(vocab_size, np.int64)
    for block in train:
        counts += np.bincount(np.asarray(block, dtype=np.int64), minlength=vocab_size)
    log_p = np.log(counts + 0.5) - np.log(counts.sum() + 0.5 * vocab_size)
    nats, tokens = 0.0, 0
    for block in validation:
        nats += float(-log_p[np.asarray(block, dtype=np.int64)].sum())
        tokens += len(block)
    if tokens == 0:
        raise ValueError("the validation split is empty: no baseline loss to compare the ladder with")
    return nats / tokens


def target_epochs(target_tokens: float, sources: dict[str, tuple[float, int]]) -> float:
    """How many times the target run reads its most repeated source: ``sources`` maps a name to
    (weight, unique training tokens); weights are shares of every batch."""
    empty = [name for name, (_, unique) in sources.items() if unique == 0]
    if empty:
        raise ValueError(f"mixture sources {empty} have no training tokens")
    total = sum(weight for weight, _ in sources.values())
    return max(target_tokens * weight / total / unique for weight, unique in sources.values())


def mixture_diagnostics(
    runs: Sequence[dict[str, Any]],
    sources: dict[str, tuple[float, TokenCache]],
    target_tokens: float,
    vocab_size: int,
) -> dict[str, Any]:
    """``ladder_diagnostics`` against a training mixture: ``sources`` maps a name to (weight, cache)."""
    caches = [cache for _, cache in sources.values()]
    unigram = unigram_loss(
        chain.from_iterable(blocks(c.train) for c in caches),
        chain.from_iterable(blocks(c.validation) for c in caches),
        vocab_size,
    )
    epochs = target_epochs(target_tokens, {name: (w, len(c.train)) for name, (w, c) in sources.items()})
    return ladder_diagnostics(runs, unigram, epochs)


def ladder_diagnostics(runs: Sequence[dict[str, Any]], unigram: float, epochs: float) -> dict[str, Any]:
    """The rungs that do not beat the unigram loss, the target's epochs, and a warning for each reason
    not to trust the extrapolation (none: the ladder is informative)."""
    stuck = [r["run"] for r in runs if r["loss"] >= unigram]
    warnings = []
    if stuck:
        warnings.append(
            f"{len(stuck)} of {len(runs)} rungs do not beat a unigram model (validation loss {unigram:.3f}): "
            "they are still learning token frequencies, so the law extrapolates that phase, not scaling; "
            "give the rungs larger budgets"
        )
    if epochs > MAX_TARGET_EPOCHS:
        warnings.append(
            f"the target reads its training data {epochs:.1f} times (more than {MAX_TARGET_EPOCHS:g} "
            "epochs), far more repetition than the rungs saw: add data or lower the target budget"
        )
    return {
        "unigram_loss": unigram,
        "rungs_not_beating_unigram": stuck,
        "target_epochs": epochs,
        "warnings": warnings,
    }
