"""What a run reports while it trains, for a sweep's trial to judge it early (``trainer.train(reports=...)``).

Every ``every`` steps (and at the last) the trainer measures the mean loss over a fixed set of validation
batches (``ValidationBatches``: the same windows of the cache's validation split at every report, so that
reports of one run, and of every trial of a sweep, are comparable) and hands the metrics to ``on_report``.
The callback may raise ``StopTraining`` (a pruned trial): the trainer saves a checkpoint at that step, writes
``metrics.jsonl`` and the loss curve, and re-raises, so a stopped run keeps its checkpoint and its curve.
No JAX here: the trainer computes the metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from marin_pipelines.tokenize.tokenized_cache import TokenSplit

# batches of the run's batch size: enough to rank trials, a few forward passes a report
VALIDATION_BATCHES = 4
# what every report holds: the mean cross-entropy over the validation batches, and the mean training loss of
# the steps since the previous report (both nats per token)
REPORTED_METRICS = ("val_loss", "train_loss")

ReportCallback = Callable[[int, dict[str, float]], None]


class StopTraining(Exception):  # noqa: N818 (a request, not an error)
    """Raised by a report callback to stop the run at once (a pruned trial): the trainer keeps the run's
    checkpoint, metrics and curve at that step, then raises it on to the caller."""


@dataclass(frozen=True)
class Reports:
    """Report every ``every`` steps (and at the last) to ``on_report(steps done, metrics)``, the validation
    loss measured over ``batches`` fixed validation batches."""

    every: int
    on_report: ReportCallback
    batches: int = VALIDATION_BATCHES

    def __post_init__(self) -> None:
        if self.every < 1 or self.batches < 1:
            raise ValueError(f"reports every {self.every} steps on {self.batches} batches: both must be >= 1")

    def due(self, done: int, steps: int) -> bool:
        """Whether the run reports once ``done`` of its ``steps`` are done."""
        return done % self.every == 0 or done == steps


class ValidationBatches:
    """``count`` batches of ``batch_size`` windows of ``seq_len + 1`` tokens, spread evenly over a validation
    split and the same at every call (a ``trainer.BatchRows``: batch ``i``, rows ``start:stop``)."""

    def __init__(self, split: TokenSplit, seq_len: int, batch_size: int, count: int, where: str = "a cache"):
        need = seq_len + 1
        if len(split) < need:
            raise ValueError(
                f"the validation split of {where} has {len(split)} tokens, fewer than one sequence of "
                f"seq_len + 1 = {need}: the run reports its validation loss on it; give the cache more text "
                "(or a larger validation_fraction) or lower seq_len"
            )
        self.split, self.length, self.batch_size, self.count = split, need, batch_size, count
        self.starts = np.linspace(0, len(split) - need, count * batch_size).round().astype(np.int64)

    def rows(self, step: int, start: int, stop: int) -> np.ndarray:
        if not 0 <= step < self.count:
            raise IndexError(f"validation batch {step} of {self.count}")
        first = step * self.batch_size
        return self.split.windows(self.starts[first + start : first + stop], self.length)
