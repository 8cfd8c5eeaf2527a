"""The demo: the whole graph on the embedded crawl, sized for a laptop CPU in minutes.

Embedded crawl -> curated text -> BPE -> an IsoFLOP ladder by the delphi recipe (3 budgets x 4 sizes, on
the crawl mixed with a few packages' code) -> a forecast, written before it starts, for the recipe's run at
5x the ladder's largest budget -> that run and its evaluation against the forecast; and the speedrun.
(``scaling_forecast`` forecasts 10x and more; here the demo's time decides.)
Point it at real WARC files with ``MARIN_WARC_ROOT=/path/to/warcs`` (or ``--warc-root``).
Other experiments import the steps below and share their outputs."""

from __future__ import annotations

import os

from marin_pipelines.evals.lm_eval_tasks import QUICK_TASKS
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    crawl_and_text,
    forecast_target,
    isoflop_ladder,
    package_text,
    quality_and_curation,
    speedrun,
    tokenizer_and_cache,
)

# a plain run on the curated crawl, as the data ablations declare theirs
MODEL = {"size": "micro", "seq_len": 128}
TRAIN = {"steps": 384, "batch_size": 16, "learning_rate": 3e-3, "warmup_steps": 38}
LADDER = {
    # 8 rows a batch: one can be the crawl's
    "recipe": {"name": "delphi", "head_dim": 8, "min_batch_size": 8},
    "budgets": [1e11, 2e11, 4e11],  # below 1e11 the optimum is smaller than the smallest shape (d8)
    "points_per_budget": 4,
    "vocab_size": 2048,
    "seq_len": 128,
    "target_budget": 2e12,  # 5x: the z-loss and SFT experiments build on this run, in make demo's time
}
LADDER_TRAIN = {"max_epochs": 4.0, "log_every": 50}  # what the recipe leaves
CODE_DISTRIBUTIONS = ("alembic", "click", "jinja2", "markdown", "numpy", "requests")  # pinned by the lock
EVALS = {"tasks": list(QUICK_TASKS)}  # the shipped lm-eval tasks that take seconds per checkpoint on a CPU

text = crawl_and_text("demo", warc_root=os.environ.get("MARIN_WARC_ROOT") or None)
quality = quality_and_curation(
    "demo",
    text.deduplicated_text,
    quality={"bucket": 50_000},  # a small hashed-n-gram table: the demo corpus is small
    curation={"top_fraction": 0.9},
)
tokens = tokenizer_and_cache(
    "demo", quality.curated_text, tokenizer={"vocab_size": 2048}, cache={"validation_fraction": 0.1}
)
# The ladder's text: the crawl is ~100k tokens, and a target at 2e12 FLOPs reads 1.5M, so the rungs and the
# target train on a mixture: one row in eight from the crawl (read at most ~1.9 times) and seven from the
# source and documents of a few pinned packages (3.5M tokens in the crawl's BPE; no row read twice). A
# 4e12 target on the crawl alone read it 24.5 times and overfit (validation 5.48 where it trained to 2.06).
code = package_text("demo/package_text", distributions=CODE_DISTRIBUTIONS, include_stdlib=False)
code_tokens = tokenizer_and_cache(
    "demo/package", code, tokenizer=tokens.tokenizer, cache={"validation_fraction": 0.05}
)
MIXTURE = {"sources": {"main": {"weight": 1}, "code": {"cache": code_tokens, "weight": 7}}}
# an IsoFLOP ladder by the delphi recipe: per budget, 4 sizes around its compute-optimal one (3 would fit the
# parabola exactly, leaving the bootstrap nothing to resample: no interval); scored on bits-per-byte only
ladder = isoflop_ladder("demo", tokens, ladder=LADDER, train=LADDER_TRAIN, data_mixture=MIXTURE)
# the main run is the recipe's run at the target budget (d56l2 on 1.5M tokens), its loss and the crawl's
# bits-per-byte forecast from the ladder before it starts
target = forecast_target("demo", ladder, downstream=["bpb/main"], evals=EVALS)
leaderboard = speedrun(
    "demo/speedrun_leaderboard",
    tokens,
    ["nano_baseline", "nano_hot", "shallow_wide", "nano_moe", "nano_muon"],
)

demo = Experiment(
    "demo",
    steps=[target.scaling_law, leaderboard],
    description="Embedded crawl -> curated text -> BPE -> an IsoFLOP ladder (3 budgets x 4 sizes) by the "
    "delphi recipe, a forecast for the recipe's run at 5x its largest budget written before that run "
    "starts, that run, and the speedrun.",
)
