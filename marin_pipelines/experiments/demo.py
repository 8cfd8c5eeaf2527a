"""The demo experiment: the whole graph on the embedded crawl, sized for a laptop CPU in minutes.

Point it at real WARC files with ``MARIN_WARC_ROOT=/path/to/warcs`` (or ``--warc-root`` on the CLI).
"""

from __future__ import annotations

import os

from marin_pipelines.experiment import Experiment


def demo(warc_root: str | None = None) -> Experiment:
    return Experiment.build(
        name="demo",
        description="Embedded crawl -> curated text -> BPE -> a micro Llama, plus a 2 x 2 scaling ladder.",
        crawl={"warc_root": warc_root or os.environ.get("MARIN_WARC_ROOT") or None},
        quality={"bucket": 50_000},  # a small hashed-n-gram table: the demo corpus is small
        curation={"top_fraction": 0.9},
        tokenizer={"vocab_size": 2048},
        cache={"validation_fraction": 0.1},
        model={"size": "micro", "seq_len": 128},
        train={"steps": 384, "batch_size": 16, "learning_rate": 3e-3, "warmup_steps": 38},
        ladder={"sizes": ["nano", "micro"], "budgets": [5e11, 2e12], "batch_size": 16, "learning_rate": 3e-3},
    )
