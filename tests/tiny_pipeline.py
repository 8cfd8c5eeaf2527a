"""The tiny pipeline the end-to-end tests share: one declaration of its data steps (a demo crawl of five
modules' pages through text, quality, curation, a tokenizer and a token cache), a training run and its
evaluation. Declared the same way everywhere, its steps have the same versions everywhere, so a test that
builds on the session's store (``tiny_store`` in conftest.py) reuses them instead of rebuilding them."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    TextSteps,
    TokenSteps,
    crawl_and_text,
    evaluate,
    quality_and_curation,
    tokenizer_and_cache,
    train,
)
from marin_pipelines.steps import Step

CRAWL = {"pydoc_modules": ["json", "heapq", "bisect", "textwrap", "shlex"], "n_files": 2}
MODEL = {"size": "nano", "seq_len": 32}
TRAIN = {"steps": 20, "batch_size": 8, "warmup_steps": 2, "log_every": 5, "checkpoint_every": 10}


def tiny_text(prefix: str = "tiny") -> TextSteps:
    return crawl_and_text(prefix, demo=CRAWL)


def tiny_tokens(prefix: str = "tiny") -> TokenSteps:
    text = tiny_text(prefix)
    quality = quality_and_curation(
        prefix, text.deduplicated_text, quality={"bucket": 10_000, "epoch": 5}, curation={"top_fraction": 0.9}
    )
    return tokenizer_and_cache(
        prefix, quality.curated_text, tokenizer={"vocab_size": 512}, cache={"validation_fraction": 0.1}
    )


def tiny_run(tokens: TokenSteps, name: str = "tiny/run", **train_fields) -> Step:
    return train(name, tokens, model=MODEL, train={**TRAIN, **train_fields})


def tiny_experiment(prefix: str = "tiny") -> Experiment:
    """Crawl to evaluation: every kind of stage once."""
    run = tiny_run(tiny_tokens(prefix), f"{prefix}/run")
    return Experiment(prefix, steps=[evaluate(f"{prefix}/eval", run, batch_size=8)])
