"""One check that several optimiser and model tests share: a run interrupted at a step and rerun ends with
the uninterrupted run's parameters and per-step losses, bit for bit."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from marin_pipelines.train.checkpoint import load_params, params_sha256
from marin_pipelines.train.trainer import train


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def assert_resumes_bit_identically(model, config, batches, tmp_path: Path, crash_at: int = 15, **kwargs: Any):
    """Train ``whole``; train ``resumed`` until a KeyboardInterrupt at ``crash_at``, then again. Returns both
    summaries, after checking the parameters' sha256 and the losses match."""

    def crashing(step: int) -> np.ndarray:
        if step == crash_at:
            raise KeyboardInterrupt
        return batches(step)

    whole = train(model, config, batches, tmp_path / "whole", progress=False, **kwargs)
    with pytest.raises(KeyboardInterrupt):
        train(model, config, crashing, tmp_path / "resumed", progress=False, **kwargs)
    resumed = train(model, config, batches, tmp_path / "resumed", progress=False, **kwargs)
    assert 0 < resumed["resumed_from_step"] <= crash_at
    final = [params_sha256(load_params(tmp_path / name)[1]) for name in ("whole", "resumed")]
    assert final[0] == final[1]
    assert losses(tmp_path / "whole") == losses(tmp_path / "resumed")
    return whole, resumed
