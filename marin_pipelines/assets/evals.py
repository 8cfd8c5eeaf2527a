"""Evaluation: bits-per-byte on the held-out validation split, for every checkpoint."""

from __future__ import annotations

import json

from dagster import AssetsDefinition

from marin_pipelines.assets.stage import stage_asset
from marin_pipelines.assets.train import ladder_partitions
from marin_pipelines.evals.eval_results import evaluate_bpb
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.tokenize.tokenizer import load_tokenizer, token_byte_lengths
from marin_pipelines.train.checkpoint import load_checkpoint

RESULTS = "results.json"


def evaluate(
    out: PendingArtifact, checkpoint: Artifact, cache: Artifact, tokenizer: Artifact, batch: int
) -> None:
    model, config = load_checkpoint(checkpoint.path)
    token_bytes = token_byte_lengths(load_tokenizer(tokenizer.path))
    results = evaluate_bpb(model, TokenCache(cache.path).validation, token_bytes, config.seq_len, batch)
    trained = checkpoint.metadata  # N is non-embedding params: at these sizes embeddings dominate the count
    results.update(
        params=trained["non_embedding_params"], train_tokens=trained["tokens_seen"], flops=trained["flops"]
    )
    (out.path / RESULTS).write_text(json.dumps(results, indent=2))
    out.metadata.update(results)


def eval_assets(experiment: Experiment) -> list[AssetsDefinition]:
    ins = ("tokenized_cache", "tokenizer")
    batch = experiment.eval_batch_size

    @stage_asset(experiment, "eval_results", group="evals", ins=("checkpoint", *ins))
    def eval_results(
        out: PendingArtifact, checkpoint: Artifact, tokenized_cache: Artifact, tokenizer: Artifact
    ):
        """Loss and bits-per-byte of the checkpoint on the held-out validation split."""
        evaluate(out, checkpoint, tokenized_cache, tokenizer, batch)

    @stage_asset(
        experiment,
        "ladder_eval_results",
        group="scaling",
        ins=("ladder_checkpoint", *ins),
        partitions_def=ladder_partitions(experiment),
    )
    def ladder_eval_results(
        out: PendingArtifact, ladder_checkpoint: Artifact, tokenized_cache: Artifact, tokenizer: Artifact
    ) -> None:
        """Validation loss and bits-per-byte of one ladder run."""
        evaluate(out, ladder_checkpoint, tokenized_cache, tokenizer, batch)

    return [eval_results, ladder_eval_results]
