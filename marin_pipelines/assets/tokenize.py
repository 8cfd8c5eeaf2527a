"""Tokenizer (byte-level BPE trained on the curated text) and the tokenized train/validation cache."""

from __future__ import annotations

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
        """Train / validation token streams (split by document hash), memory-mapped for O(1) access."""
        tok = load_tokenizer(tokenizer.path)
        summary = build_cache(read_documents(curated_text.path), tok, out.path, experiment.cache)
        out.metadata.update(vocab_size=summary["vocab_size"], dtype=summary["dtype"])
        for split, counts in summary["splits"].items():
            out.metadata.update({f"{split}_{name}": n for name, n in counts.items()})

    return [tokenizer, tokenized_cache]
