"""Tokenizer (byte-level BPE trained on the curated text) and the tokenized train/validation cache."""

from __future__ import annotations

import os

from dagster import AssetsDefinition

from marin_pipelines.assets.stage import stage_asset
from marin_pipelines.documents import read_documents
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.tokenize.tokenized_cache import build_cache
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, load_tokenizer, train_tokenizer


def tokenize_assets(experiment: Experiment) -> list[AssetsDefinition]:
    @stage_asset(experiment, "tokenizer", group="tokenize", ins=("curated_text",))
    def tokenizer(out: PendingArtifact, curated_text: Artifact) -> None:
        """Byte-level BPE trained with HF tokenizers on the curated text."""
        texts = (doc["text"] for doc in read_documents(curated_text.path, columns=["text"]))
        trained = train_tokenizer(texts, experiment.tokenizer)
        trained.save(str(out.path / TOKENIZER_FILE))
        out.metadata["vocab_size"] = trained.get_vocab_size()

    @stage_asset(experiment, "tokenized_cache", group="tokenize", ins=("curated_text", "tokenizer"))
    def tokenized_cache(out: PendingArtifact, curated_text: Artifact, tokenizer: Artifact) -> None:
        """Train / validation token shards (split by document hash) with O(1) random access."""
        # finished chunks survive a killed run here, beside the artifact, keyed by its version
        work_dir = out.path.with_name(f".{experiment.versions['tokenized_cache']}.work")
        tok = load_tokenizer(tokenizer.path)
        build = build_cache(
            [str(curated_text.path)], tok, out.path, experiment.cache, work_dir, os.cpu_count() or 1
        )
        info = build.info
        out.metadata.update(
            vocab_size=info["vocab_size"], dtype=info["dtype"], chunks_reused=build.chunks_reused
        )
        for split, counts in info["splits"].items():
            out.metadata.update(
                {f"{split}_{name}": counts[name] for name in ("documents", "tokens", "text_bytes")}
            )
            out.metadata[f"{split}_shards"] = len(counts["shards"])

    return [tokenizer, tokenized_cache]
