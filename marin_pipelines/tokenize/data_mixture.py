"""Data mixtures: weights over token caches, with fixed per-source counts in every batch, and weights that
may change at given steps (a run that cools down on a high-quality mixture).

As in Levanter's stable mixtures, a weight becomes a whole number of sequences per batch (largest
remainders), so batch ``k`` always holds the same share of each source and is computed directly:
each source has its own keyed-shuffled ``SequenceLoader`` (seeded by the run seed and the source's
name), and a batch is their rows stacked in source order. Each source keeps its own validation split.
With stages, a source's position at step ``k`` is the sum over the stages before ``k`` of its count times
their steps: still O(stages) for any step, deterministic across restarts, and no sequence read twice or
skipped at a stage boundary.
"""

from __future__ import annotations

import math

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field, model_validator

from marin_pipelines.tokenize.sequence_loader import SequenceLoader
from marin_pipelines.tokenize.tokenized_cache import TokenCache, TokenSplit


class MixtureSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cache: str | None = Field(
        None, description="path or URL of a built token cache; None: this experiment's tokenized_cache"
    )
    input: str | None = Field(
        None,
        description="instead of a path: the training step's input that is this source's token cache (the "
        "experiment helpers set it from a step), made a path when the run starts",
    )
    weight: float = Field(ge=0, description="relative share of each batch (0: only in later stages)")

    @model_validator(mode="after")
    def _one_place(self) -> MixtureSource:
        if self.cache is not None and self.input is not None:
            raise ValueError(f"give a source's cache ({self.cache}) or its input ({self.input}), not both")
        return self


class MixtureStage(BaseModel):
    """From training step ``start`` on, these weights; a source left out gets no rows."""

    model_config = ConfigDict(extra="forbid")

    start: int = Field(gt=0, description="the first training step of the stage")
    weights: dict[str, float] = Field(min_length=1, description="relative shares by source name (>= 0)")


class MixtureConfig(BaseModel):
    """Sources by name; weights are relative (normalised over the sources). ``stages`` change them from
    a step on (Levanter's ``train_weights`` as a list of (step, weights))."""

    model_config = ConfigDict(extra="forbid")

    sources: dict[str, MixtureSource] = Field(
        default_factory=lambda: {"main": MixtureSource(weight=1.0)},
        min_length=1,
        description="token caches by name, each with its relative weight in every batch",
    )
    stages: list[MixtureStage] = Field(
        default_factory=list,
        description="later stages of the run, by first step; until the first, the sources' own weights",
    )

    @model_validator(mode="after")
    def _stages_name_sources_in_order(self) -> MixtureConfig:
        if not any(source.weight for source in self.sources.values()):
            raise ValueError("sources: one weight must be > 0 (those of weight 0 join in later stages)")
        starts = [stage.start for stage in self.stages]
        if starts != sorted(set(starts)):
            raise ValueError(f"stages: their start steps must increase, got {starts}")
        for stage in self.stages:
            if unknown := sorted(set(stage.weights) - set(self.sources)):
                raise ValueError(
                    f"stages (start {stage.start}): {unknown} are not sources: {sorted(self.sources)}"
                )
            if any(w < 0 for w in stage.weights.values()) or not any(stage.weights.values()):
                raise ValueError(f"stages (start {stage.start}): weights must be >= 0, one of them > 0")
        return self

    def with_inputs(self, urls: dict[str, str]) -> MixtureConfig:
        """Each source given as a step input, as the URL of that input's cache (``urls`` by input name)."""
        sources = {}
        for name, source in self.sources.items():
            if source.input is not None:
                if source.input not in urls:
                    raise ValueError(f"data_mixture.sources.{name}: the step has no input {source.input!r}")
                source = source.model_copy(update={"cache": urls[source.input], "input": None})
            sources[name] = source
        return self.model_copy(update={"sources": sources})

    def cache_urls(self, default: str) -> dict[str, str]:
        """Each source's cache URL, by name; a source that names no cache reads ``default`` (the step's)."""
        return {name: source.cache or default for name, source in self.sources.items()}

    def schedule(self) -> list[tuple[int, dict[str, float]]]:
        """(first step, weight of every source) for each stage, the first from step 0."""
        first = (0, {name: source.weight for name, source in self.sources.items()})
        later = [(s.start, {name: s.weights.get(name, 0.0) for name in self.sources}) for s in self.stages]
        return [first, *later]

    def batch_counts(self, batch_size: int) -> list[tuple[int, dict[str, int]]]:
        """(first step, sequences per batch of every source) for each stage; an error names a source that
        a stage weighs but that would get no row."""
        return [(start, batch_counts(weights, batch_size)) for start, weights in self.schedule()]

    def epochs(
        self, batch_size: int, steps: int, seq_len: int, train_tokens: dict[str, int]
    ) -> dict[str, float]:
        """How many times a run of ``steps`` reads each source's training split (``train_tokens`` by source):
        its sequences read over the sequences the split holds."""
        read = sequences_before(self.batch_counts(batch_size), steps)
        return {name: read[name] / max(1, (train_tokens[name] - 1) // seq_len) for name in self.sources}


def sequences_before(stages: list[tuple[int, dict[str, int]]], step: int) -> dict[str, int]:
    """Sequences of each source in the batches before ``step``, by the stages' (first step, counts)."""
    total = dict.fromkeys(stages[0][1], 0)
    for (start, counts), (end, _) in zip(stages, [*stages[1:], (step, None)], strict=True):
        for name, count in counts.items():
            total[name] += count * max(0, min(step, end) - start)
    return total


def batch_counts(weights: dict[str, float], batch_size: int) -> dict[str, int]:
    """Sequences per batch for each source: shares of ``batch_size`` rounded by largest remainder (a source
    of weight 0 gets none)."""
    total = sum(weights.values())
    exact = {name: batch_size * w / total for name, w in weights.items()}
    counts = {name: math.floor(x) for name, x in exact.items()}
    by_remainder = sorted(exact, key=lambda name: (counts[name] - exact[name], list(exact).index(name)))
    for name in by_remainder[: batch_size - sum(counts.values())]:
        counts[name] += 1
    if starved := [name for name, n in counts.items() if n == 0 and weights[name] > 0]:
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
        weights: dict[str, float] | list[tuple[int, dict[str, float]]],
        seq_len: int,
        batch_size: int,
        seed: int,
    ):
        """``weights`` by source, or a schedule of them: (first step, weights) per stage, the first at 0."""
        _check_one_tokenizer(caches)
        self.caches = caches
        self.seq_len, self.batch_size = seq_len, batch_size
        schedule = [(0, weights)] if isinstance(weights, dict) else weights
        self.stages = [(start, batch_counts(w, batch_size)) for start, w in schedule]
        self.loaders = {}
        for name, cache in caches.items():
            try:
                self.loaders[name] = SequenceLoader(
                    cache.train, seq_len, batch_size, xxhash.xxh64_intdigest(f"{seed}:{name}".encode())
                )
            except ValueError as e:
                raise ValueError(
                    f"data source {name!r} (token cache {cache.url}), train split: {e}; "
                    "lower the model's seq_len or give it more text"
                ) from None

    def counts(self, step: int) -> dict[str, int]:
        """Sequences of each source in ``batch(step)``."""
        return next(counts for start, counts in reversed(self.stages) if start <= step)

    def consumed(self, name: str, step: int) -> int:
        """Sequences of source ``name`` in the batches before ``step``: where its rows of ``step`` start."""
        return sequences_before(self.stages, step)[name]

    @classmethod
    def from_config(
        cls, config: MixtureConfig, default_cache: str, seq_len: int, batch_size: int, seed: int
    ) -> MixtureLoader:
        """Open each source (``default_cache`` where a source names none); all share one tokenizer."""
        caches = {name: TokenCache(url) for name, url in config.cache_urls(default_cache).items()}
        _check_one_tokenizer({**caches, "(the experiment's tokenized_cache)": TokenCache(default_cache)})
        return cls(caches, config.schedule(), seq_len, batch_size, seed)

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
        for name, count in self.counts(step).items():
            low, high = max(start, offset), min(stop, offset + count)
            if low < high:
                first = self.consumed(name, step) + low - offset
                parts.append(self.loaders[name].samples(first, high - low))
            offset += count
        return np.concatenate(parts) if parts else np.empty((0, self.seq_len + 1), np.int32)
