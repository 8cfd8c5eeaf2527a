"""The demo experiment: the whole graph on the embedded crawl, sized for a laptop CPU in minutes.

Point it at real WARC files with ``MARIN_WARC_ROOT=/path/to/warcs`` (or ``--warc-root`` on the CLI).
"""

from __future__ import annotations

import os

from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS
from marin_pipelines.experiment import Experiment


def demo(warc_root: str | None = None) -> Experiment:
    return Experiment.build(
        name="demo",
        description="Embedded crawl -> curated text -> BPE -> a 3 x 4 scaling ladder, a preregistered "
        "prediction for a micro Llama at 10x the ladder's largest budget, that run, and the speedrun.",
        crawl={"warc_root": warc_root or os.environ.get("MARIN_WARC_ROOT") or None},
        quality={"bucket": 50_000},  # a small hashed-n-gram table: the demo corpus is small
        curation={"top_fraction": 0.9},
        tokenizer={"vocab_size": 2048},
        cache={"validation_fraction": 0.1},
        model={"size": "micro", "seq_len": 128},
        train={"steps": 384, "batch_size": 16, "learning_rate": 3e-3, "warmup_steps": 38},
        # the main run is the ladder's target: micro for 4e12 FLOPs by the ladder's rule (steps, batch, LR,
        # warmup from here; seed, decay... from train above), its loss preregistered from the ladder first
        ladder={
            "sizes": ["nano", "micro", "tiny"],
            "budgets": [5e10, 1e11, 2e11, 4e11],
            "batch_size": 8,
            "learning_rate": 3e-3,
            "target_budget": 4e12,
        },
        speedrun=["nano_baseline", "nano_hot", "shallow_wide"],
        evals={"tasks": list(SHIPPED_TASKS)},  # the shipped lm-eval suite: seconds per checkpoint on a CPU
    )
