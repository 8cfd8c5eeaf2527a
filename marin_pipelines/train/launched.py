"""A launched training run's work, wherever it runs: the child of a launcher (``cli/train.py``, one process
per host) or the step runner's own process (``step_runner.InProcessLauncher``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from marin_pipelines.store import local_copy, read_url, write_url
from marin_pipelines.tokenize.data_mixture import MixtureConfig, MixtureLoader
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE
from marin_pipelines.train.distributed import is_primary
from marin_pipelines.train.fp8 import check_fp8
from marin_pipelines.train.launch_config import TrainLaunch
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.reporting import Reports, ValidationBatches
from marin_pipelines.train.run_inputs import (
    base_identity,
    check_inputs,
    given,
    text_sha256,
    warm_start_tokenizer,
)
from marin_pipelines.train.sharding import check_layout
from marin_pipelines.train.trainer import train
from marin_pipelines.train.warm_start import check_base

Reporters = Callable[[LlamaConfig], Sequence[Callable[[dict[str, Any]], None]]]


def train_launched(
    launch: TrainLaunch, reporters: Reporters = lambda model: (), reports: Reports | None = None
) -> dict[str, Any]:
    """Train ``launch``'s run into its folder (resuming from the last checkpoint there); its summary.

    ``reporters(model)`` gives where each step's record goes (Dagster Pipes, wandb), knowing the model the
    run resolved to. ``reports`` (a sweep's trial) measures the validation loss on fixed windows of the
    cache's validation split (``launch.data``'s, whatever the mixture) and reports it. Process 0 copies the
    cache's tokenizer beside the checkpoints: evaluation needs no other input. A warm start's base on another
    tokenizer is refused unless the launch allows it."""
    run, out = launch.run, launch.out
    data = local_copy(launch.data)  # the batches read a few windows per step: from local disk
    cache = TokenCache(data)
    model = run.llama(cache.info["vocab_size"])
    # batch(step) is a pure function of the step: resuming needs no replay of the data, and each
    # process computes its own rows of it.
    loader = MixtureLoader.from_config(
        local_sources(run.data), str(data), model.seq_len, run.train.batch_size, run.train.seed
    )
    validation = (
        ValidationBatches(cache.validation, model.seq_len, run.train.batch_size, reports.batches, launch.data)
        if reports is not None
        else None
    )
    check_layout(run.train, model, jax.device_count())  # a config error records nothing in the folder
    if model.fp8:
        check_fp8(jax.devices()[0].platform)
    tokenizer, notes = read_url(str(data / TOKENIZER_FILE)), {}
    if launch.warm_start is not None:  # a base it cannot start from is refused before anything is recorded
        check_base(launch.warm_start, model, run.train, launch.warm_start_optimizer)
        notes = warm_start_tokenizer(
            launch.warm_start, tokenizer, tokenizer_source(launch), launch.warm_start_other_tokenizer
        )
    check_inputs(out, train_inputs(launch, cache, tokenizer, loader), record=is_primary())
    if is_primary():  # after the check: a refused rerun leaves the run's tokenizer as it was
        write_url(f"{out.rstrip('/')}/{TOKENIZER_FILE}", tokenizer)
    summary = train(
        model,
        run.train,
        loader,
        out,
        progress=launch.progress_bar,
        on_step=reporters(model),
        warm_start=launch.warm_start,
        warm_start_optimizer=launch.warm_start_optimizer,
        warm_start_notes=notes,
        validation=validation,
        reports=reports,
    )
    # what the loader reads from, mapped a few shards at a time (tokenized_cache.OPEN_MAPS)
    return {**summary, "train_shards": {name: len(c.train.shards) for name, c in loader.caches.items()}}


def train_inputs(
    launch: TrainLaunch, cache: TokenCache, tokenizer: str, loader: MixtureLoader
) -> dict[str, dict[str, Any]]:
    """What a training run is made from: its cache, the cache's tokenizer and each mixture source that
    names a cache of its own (as the loader opened it; recorded by the place the run config gives)."""
    inputs = {
        "data": given(cache.identity, launch.data),
        "tokenizer": given(text_sha256(tokenizer), tokenizer_source(launch)),
    }
    for name, source in launch.run.data.sources.items():
        if source.cache:
            inputs[f"mixture.{name}"] = given(loader.caches[name].identity, source.cache)
    if launch.warm_start is not None:
        inputs["warm_start"] = given(base_identity(launch.warm_start), launch.warm_start)
    return inputs


def tokenizer_source(launch: TrainLaunch) -> str:
    """Where the run's tokenizer is read from: its cache's."""
    return f"{launch.data.rstrip('/')}/{TOKENIZER_FILE}"


def local_sources(mixture: MixtureConfig) -> MixtureConfig:
    """The mixture with each source's cache read from a local copy (``store.local_copy``)."""
    sources = {
        name: source.model_copy(update={"cache": str(local_copy(source.cache))}) if source.cache else source
        for name, source in mixture.sources.items()
    }
    return mixture.model_copy(update={"sources": sources})
