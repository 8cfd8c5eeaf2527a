"""Evaluation of every checkpoint: bits-per-byte on each mixture source's validation split and the held-out
sets, lm-eval tasks, a results table with the change against the previous version, and a check.

Evaluation goes through the ``launcher`` resource, as training does (a subprocess here, a pod with an
accelerator on Kubernetes): the child writes ``results.json`` into the pending output directory and
reports where it ran through Dagster Pipes.
"""

from __future__ import annotations

import json
from typing import Any

from dagster import AssetExecutionContext, AssetKey, AssetRecordsFilter, AssetsDefinition

from marin_pipelines.assets.stage import stage_asset
from marin_pipelines.assets.train import ladder_partitions
from marin_pipelines.evals.checkpoint_eval import missing_tasks, results_table, scores
from marin_pipelines.evals.eval_results import combine_bpb
from marin_pipelines.experiment import Experiment
from marin_pipelines.resources.launcher import LauncherResource
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE

RESULTS = "results.json"
HISTORY = 50  # materialisations searched back for the previous version


def previous_scores(key: list[str], version: str) -> dict[str, Any] | None:
    """The scores of the latest materialisation of this asset (and partition) of another version."""
    context = AssetExecutionContext.get()
    partition = context.partition_key if context.has_partition_key else None
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(AssetKey(key), asset_partitions=[partition] if partition else None), limit=HISTORY
    ).records
    for record in records:
        materialization = record.asset_materialization
        metadata = materialization.metadata if materialization else {}
        if "scores" in metadata and metadata.get("version") and metadata["version"].value != version:
            return metadata["scores"].value
    return None


def evaluate(
    experiment: Experiment,
    stage: str,
    out: PendingArtifact,
    checkpoint: Artifact,
    cache: Artifact,
    tokenizer: Artifact,
    launcher: LauncherResource,
) -> None:
    validation = {
        name: [source.cache or str(cache.path)] for name, source in experiment.data_mixture.sources.items()
    }
    context = AssetExecutionContext.get()
    messages = launcher.evaluate(
        context,
        checkpoint.path,
        tokenizer.path / TOKENIZER_FILE,
        validation,
        experiment.evals,
        experiment.eval_batch_size,
        out.path / RESULTS,
    )
    results = json.loads((out.path / RESULTS).read_text())
    reported = [m["evaluated_on"] for m in messages if isinstance(m, dict) and "evaluated_on" in m]
    if not reported:  # the results are in the file; only where they were computed is unknown
        context.log.warning("the evaluation sent no summary message: evaluated_on is not reported")
    flat = scores(results)
    mixture = combine_bpb([results["bpb"][name] for name in validation])
    trained = checkpoint.metadata  # N is non-embedding params: at these sizes embeddings dominate the count
    out.metadata.update(
        loss=mixture["loss"],  # what the scaling law fits and predicts: the training mixture's held-out loss
        bits_per_byte=mixture["bits_per_byte"],
        params=trained["non_embedding_params"],
        train_tokens=trained["tokens_seen"],
        flops=trained["flops"],
        scores=flat,
        tasks=experiment.evals.tasks,
        evaluated_on=reported[-1] if reported else "not reported",
    )
    previous = previous_scores([experiment.name, stage], experiment.versions[stage])
    table = {"results": results_table(flat)}
    if previous is not None:
        table["change against the previous version"] = results_table(flat, previous)
    out.metadata["markdown"] = table


def eval_assets(experiment: Experiment) -> list[AssetsDefinition]:
    ins = ("tokenized_cache", "tokenizer")
    requested = experiment.evals.tasks

    def tasks_scored(artifact: Artifact) -> tuple[bool, dict[str, Any]]:
        """Every requested lm-eval task produced a number."""
        missing = missing_tasks(requested, artifact.metadata["scores"])
        return not missing, {"requested": len(requested), "missing": ", ".join(missing) or "none"}

    checks = {"tasks_scored": tasks_scored}

    @stage_asset(
        experiment,
        "eval_results",
        group="evals",
        ins=("checkpoint", *ins),
        checks=checks,
        resources=("launcher",),
    )
    def eval_results(
        out: PendingArtifact,
        checkpoint: Artifact,
        tokenized_cache: Artifact,
        tokenizer: Artifact,
        launcher: LauncherResource,
    ) -> None:
        """Loss and bits-per-byte per validation source and held-out set, and lm-eval task scores."""
        evaluate(experiment, "eval_results", out, checkpoint, tokenized_cache, tokenizer, launcher)

    @stage_asset(
        experiment,
        "ladder_eval_results",
        group="scaling",
        ins=("ladder_checkpoint", *ins),
        partitions_def=ladder_partitions(experiment),
        checks=checks,
        resources=("launcher",),
    )
    def ladder_eval_results(
        out: PendingArtifact,
        ladder_checkpoint: Artifact,
        tokenized_cache: Artifact,
        tokenizer: Artifact,
        launcher: LauncherResource,
    ) -> None:
        """The same evaluation for one ladder run."""
        evaluate(
            experiment, "ladder_eval_results", out, ladder_checkpoint, tokenized_cache, tokenizer, launcher
        )

    return [eval_results, ladder_eval_results]
