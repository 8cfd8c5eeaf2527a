"""Data mixtures: weights over token caches, with fixed per-source counts in every batch.

As in Levanter's stable mixtures, a weight becomes a whole number of sequences per batch (largest
remainders), so batch ``k`` always holds the same share of each source and is computed directly:
each source has its own keyed-shuffled ``SequenceLoader`` (seeded by the run seed and the source's
name), and a batch is their rows stacked in source order. Each source keeps its own validation split.
"""

from __future__ import annotations

import math

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.tokenize.sequence_loader import SequenceLoader
from marin_pipelines.tokenize.tokenized_cache import TokenCache, TokenSplit


class MixtureSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cache: str | None = Field(
        None, description="path or URL of a built token cache; None: this experiment's tokenized_cache"
    )
    weight: float = Field(gt=0, description="relative share of each batch")


class MixtureConfig(BaseModel):
    """Sources by name; weights are relative (normalised over the sources)."""

    model_config = ConfigDict(extra="forbid")

    sources: dict[str, MixtureSource] = Field(
        default_factory=lambda: {"main": MixtureSource(weight=1.0)}, min_length=1
    )


def batch_counts(weights: dict[str, float], batch_size: int) -> dict[str, int]:
    """Sequences per batch for each source: shares of ``batch_size`` rounded by largest remainder."""
    total = sum(weights.values())
    exact = {name: batch_size * w / total for name, w in weights.items()}
    counts = {name: math.floor(x) for name, x in exact.items()}
    by_remainder = sorted(exact, key=lambda name: (counts[name] - exact[name], list(exact).index(name)))
    for name in by_remainder[: batch_size - sum(counts.values())]:
        counts[name] += 1
    if starved := [name for name, n in counts.items() if n == 0]:
        raise ValueError(
            f"data_mixture: sources {starved} get 0 of {batch_size} sequences per batch; "
            "raise their weight or the batch size"
        )
    return counts


def _check_one_tokenizer(caches: dict[str, TokenCache]) -> None:
    hashes = {name: cache.info["tokenizer_hash"] for name, cache in caches.items()}
    if len(set(hashes.values())) > 1:
        raise ValueError(f"data_mixture: sources were tokenized by different tokenizers: {hashes}")


class MixtureLoader:
    """``batch(step)`` -> ``(batch_size, seq_len + 1)`` int32, rows grouped by source in config order;
    ``rows(step, start, stop)`` -> a slice of it, computed without the rest."""

    def __init__(
        self,
        caches: dict[str, TokenCache],
        weights: dict[str, float],
        seq_len: int,
        batch_size: int,
        seed: int,
    ):
        _check_one_tokenizer(caches)
        self.caches = caches
        self.seq_len, self.batch_size = seq_len, batch_size
        self.counts = batch_counts(weights, batch_size)
        self.loaders = {}
        for name, cache in caches.items():
            try:
                self.loaders[name] = SequenceLoader(
                    cache.train, seq_len, self.counts[name], xxhash.xxh64_intdigest(f"{seed}:{name}".encode())
                )
            except ValueError as e:
                raise ValueError(
                    f"data source {name!r} (token cache {cache.url}), train split: {e}; "
                    "lower the model's seq_len or give it more text"
                ) from None

    @classmethod
    def from_config(
        cls, config: MixtureConfig, default_cache: str, seq_len: int, batch_size: int, seed: int
    ) -> MixtureLoader:
        """Open each source (``default_cache`` where a source names none); all share one tokenizer."""
        caches = {name: TokenCache(src.cache or default_cache) for name, src in config.sources.items()}
        _check_one_tokenizer({**caches, "(the experiment's tokenized_cache)": TokenCache(default_cache)})
        weights = {name: src.weight for name, src in config.sources.items()}
        return cls(caches, weights, seq_len, batch_size, seed)

    @property
    def validation(self) -> dict[str, TokenSplit]:
        """Each source's held-out split."""
        return {name: cache.validation for name, cache in self.caches.items()}

    def batch(self, step: int) -> np.ndarray:
        return self.rows(step, 0, self.batch_size)

    def rows(self, step: int, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of ``batch(step)``: only the sources (and their rows) that fall inside are
        read, so a process of a multi-host run reads just its share."""
        if not 0 <= start <= stop <= self.batch_size:
            raise ValueError(f"rows {start}:{stop} are outside a batch of {self.batch_size}")
        parts, offset = [], 0
        for name, loader in self.loaders.items():
            low, high = max(start, offset), min(stop, offset + self.counts[name])
            if low < high:
                parts.append(loader.rows(step, low - offset, high - offset))
            offset += self.counts[name]
        return np.concatenate(parts) if parts else np.empty((0, self.seq_len + 1), np.int32)
