"""A launched training run's work, wherever it runs: the child of a launcher (``cli/train.py``, one process
per host) or the step runner's own process (``step_runner.InProcessLauncher``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from marin_pipelines.store import local_copy, read_url, write_url
from marin_pipelines.tokenize.data_mixture import MixtureConfig, MixtureLoader
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE
from marin_pipelines.train.distributed import is_primary
from marin_pipelines.train.launch_config import TrainLaunch
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.run_inputs import check_inputs, file_sha256, given
from marin_pipelines.train.trainer import train

Reporters = Callable[[LlamaConfig], Sequence[Callable[[dict[str, Any]], None]]]


def train_launched(launch: TrainLaunch, reporters: Reporters = lambda model: ()) -> dict[str, Any]:
    """Train ``launch``'s run into its folder (resuming from the last checkpoint there); its summary.

    ``reporters(model)`` gives where each step's record goes (Dagster Pipes, wandb), knowing the model the
    run resolved to. Process 0 copies the cache's tokenizer beside the checkpoints: evaluation needs no
    other input."""
    run, out = launch.run, launch.out
    data = local_copy(launch.data)  # the batches read a few windows per step: from local disk
    cache, sources = TokenCache(data), local_sources(run.data)
    model = run.llama(cache.info["vocab_size"])
    check_inputs(out, train_inputs(launch, cache, sources), record=is_primary())
    if is_primary():  # after the check: a refused rerun leaves the run's tokenizer as it was
        write_url(f"{out.rstrip('/')}/{TOKENIZER_FILE}", read_url(str(data / TOKENIZER_FILE)))
    # batch(step) is a pure function of the step: resuming needs no replay of the data, and each
    # process computes its own rows of it.
    loader = MixtureLoader.from_config(
        sources, str(data), model.seq_len, run.train.batch_size, run.train.seed
    )
    summary = train(model, run.train, loader, out, progress=launch.progress_bar, on_step=reporters(model))
    # what the loader reads from, mapped a few shards at a time (tokenized_cache.OPEN_MAPS)
    return {**summary, "train_shards": {name: len(c.train.shards) for name, c in loader.caches.items()}}


def train_inputs(launch: TrainLaunch, cache: TokenCache, sources: MixtureConfig) -> dict[str, dict[str, Any]]:
    """What a training run is made from: its cache, the cache's tokenizer and each mixture source's cache."""
    tokenizer = f"{launch.data.rstrip('/')}/{TOKENIZER_FILE}"
    inputs = {
        "data": given(cache.identity, launch.data),
        "tokenizer": given(file_sha256(str(Path(cache.url) / TOKENIZER_FILE)), tokenizer),
    }
    for name, source in sources.sources.items():
        if source.cache:
            inputs[f"mixture.{name}"] = given(
                TokenCache(source.cache).identity, launch.run.data.sources[name].cache
            )
    return inputs


def local_sources(mixture: MixtureConfig) -> MixtureConfig:
    """The mixture with each source's cache read from a local copy (``store.local_copy``)."""
    sources = {
        name: source.model_copy(update={"cache": str(local_copy(source.cache))}) if source.cache else source
        for name, source in mixture.sources.items()
    }
    return mixture.model_copy(update={"sources": sources})
