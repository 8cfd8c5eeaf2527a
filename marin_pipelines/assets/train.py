"""Training: the experiment's model, and the scaling ladder's runs as (budget x size) partitions."""

from __future__ import annotations

import math
from typing import Any

from dagster import AssetsDefinition, MultiPartitionsDefinition, StaticPartitionsDefinition

from marin_pipelines.assets.stage import stage_asset
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.tokenize.data_mixture import MixtureConfig, MixtureLoader
from marin_pipelines.train.checkpoint import TrainConfig, train
from marin_pipelines.train.model import LlamaConfig, preset


def budget_key(budget: float) -> str:
    return f"{budget:.0e}".replace("+", "")


def ladder_partitions(experiment: Experiment) -> MultiPartitionsDefinition:
    ladder = experiment.ladder
    return MultiPartitionsDefinition(
        {
            "budget": StaticPartitionsDefinition([budget_key(b) for b in ladder.budgets]),
            "size": StaticPartitionsDefinition(list(ladder.sizes)),
        }
    )


def loss_finite_and_falling(artifact: Artifact) -> tuple[bool, dict[str, Any]]:
    """The final training loss is a number and below the loss at the start."""
    first, last = artifact.metadata["initial_loss"], artifact.metadata["final_loss"]
    return math.isfinite(last) and last < first, {"initial_loss": first, "final_loss": last}


def run_training(
    out: PendingArtifact, cache: Artifact, mixture: MixtureConfig, model: LlamaConfig, config: TrainConfig
) -> None:
    batch_size, seed = config.batch_size, config.seed
    loader = MixtureLoader.from_config(mixture, str(cache.path), model.seq_len, batch_size, seed)
    summary = train(model, config, loader.batch, out.path)
    out.metadata.update(summary)
    out.metadata["plots"] = {"loss_curve": "loss_curve.png"}


def train_assets(experiment: Experiment) -> list[AssetsDefinition]:
    checks = {"loss_finite_and_falling": loss_finite_and_falling}
    seq_len = experiment.model.seq_len

    @stage_asset(experiment, "checkpoint", group="train", ins=("tokenized_cache",), checks=checks)
    def checkpoint(out: PendingArtifact, tokenized_cache: Artifact) -> None:
        """A Llama-style model trained with JAX / Flax NNX / Optax on the tokenized cache."""
        model = preset(experiment.model.size, tokenized_cache.metadata["vocab_size"], seq_len)
        run_training(out, tokenized_cache, experiment.data_mixture, model, experiment.train)

    @stage_asset(
        experiment,
        "ladder_checkpoint",
        group="scaling",
        ins=("tokenized_cache",),
        checks=checks,
        partitions_def=ladder_partitions(experiment),
    )
    def ladder_checkpoint(out: PendingArtifact, tokenized_cache: Artifact) -> None:
        """One run of the scaling ladder: model size x compute budget, tokens = budget / FLOPs per token."""
        budget_name, size = out.partition.split("|")
        budget = {budget_key(b): b for b in experiment.ladder.budgets}[budget_name]
        vocab_size = tokenized_cache.metadata["vocab_size"]
        run = experiment.ladder.run(size, budget, vocab_size, seq_len, experiment.train)
        run_training(out, tokenized_cache, experiment.data_mixture, run.model, run.train)
        out.metadata["budget_flops"] = budget

    return [checkpoint, ladder_checkpoint]
