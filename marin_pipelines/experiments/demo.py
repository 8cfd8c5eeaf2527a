"""The demo experiment: the whole graph on the embedded crawl, sized for a laptop CPU in minutes.

Point it at real WARC files with ``MARIN_WARC_ROOT=/path/to/warcs`` (or ``--warc-root`` on the CLI).
"""

from __future__ import annotations

import os

from marin_pipelines.experiment import Experiment


def demo(warc_root: str | None = None) -> Experiment:
    return Experiment.build(
        name="demo",
        description="Embedded crawl -> curated text -> BPE -> tiny Llama + a 2 x 2 scaling ladder.",
        crawl={"warc_root": warc_root or os.environ.get("MARIN_WARC_ROOT") or None},
    )
