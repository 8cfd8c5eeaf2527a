"""Training: the experiment's model, and the scaling ladder's runs as (budget x size) partitions.

Each run goes through the ``launcher`` resource (a subprocess here, a pod on Kubernetes) with Dagster
Pipes; the child writes the checkpoint straight into the pending output directory.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
)

from marin_pipelines.assets.stage import stage_asset
from marin_pipelines.experiment import Experiment
from marin_pipelines.resources.launcher import LauncherResource
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.train.checkpoint import LOSS_CURVE_FILE, TRAIN_FILE, TrainConfig
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.run_config import RunConfig

RUN_CONFIG_FILE = "run.yaml"


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


def launch_training(
    run_dir: Path,
    cache: Artifact,
    launcher: LauncherResource,
    mixture: MixtureConfig,
    model: LlamaConfig,
    config: TrainConfig,
) -> dict[str, Any]:
    """Write the run's YAML into ``run_dir``, train it there through the launcher; its summary."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config_file = run_dir / RUN_CONFIG_FILE
    RunConfig(model=model.model_dump(), train=config, data=mixture).dump(config_file)
    launcher.train(AssetExecutionContext.get(), config_file, cache.path, run_dir)
    return json.loads((run_dir / TRAIN_FILE).read_text())["summary"]


def run_training(
    out: PendingArtifact,
    cache: Artifact,
    launcher: LauncherResource,
    mixture: MixtureConfig,
    model: LlamaConfig,
    config: TrainConfig,
) -> None:
    """Train into the pending output; the run's summary and loss curve become its metadata."""
    out.metadata.update(launch_training(out.path, cache, launcher, mixture, model, config))
    out.metadata["plots"] = {"loss_curve": LOSS_CURVE_FILE}


def train_assets(experiment: Experiment) -> list[AssetsDefinition]:
    checks = {"loss_finite_and_falling": loss_finite_and_falling}
    seq_len = experiment.model.seq_len

    @stage_asset(
        experiment,
        "checkpoint",
        group="train",
        ins=("tokenized_cache",),
        checks=checks,
        resources=("launcher",),
    )
    def checkpoint(out: PendingArtifact, tokenized_cache: Artifact, launcher: LauncherResource) -> None:
        """A Llama-style model trained with JAX / Flax NNX / Optax on the tokenized cache."""
        model, config = experiment.main_run(tokenized_cache.metadata["vocab_size"])  # a ladder target or not
        run_training(out, tokenized_cache, launcher, experiment.data_mixture, model, config)

    @stage_asset(
        experiment,
        "ladder_checkpoint",
        group="scaling",
        ins=("tokenized_cache",),
        checks=checks,
        partitions_def=ladder_partitions(experiment),
        resources=("launcher",),
    )
    def ladder_checkpoint(
        out: PendingArtifact, tokenized_cache: Artifact, launcher: LauncherResource
    ) -> None:
        """One run of the scaling ladder: model size x compute budget, tokens = budget / FLOPs per token."""
        budget_name, size = out.partition.split("|")
        budget = {budget_key(b): b for b in experiment.ladder.budgets}[budget_name]
        vocab_size = tokenized_cache.metadata["vocab_size"]
        run = experiment.ladder.run(size, budget, vocab_size, seq_len, experiment.train)
        run_training(out, tokenized_cache, launcher, experiment.data_mixture, run.model, run.train)
        out.metadata["budget_flops"] = budget

    return [checkpoint, ladder_checkpoint]
