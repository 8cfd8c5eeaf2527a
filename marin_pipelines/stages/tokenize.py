"""Tokenizer (byte-level BPE trained on the curated text) and the tokenized train/validation cache."""

from __future__ import annotations

from marin_pipelines.documents import read_documents
from marin_pipelines.engine import LocalEngine
from marin_pipelines.stages.crawl import NoDocuments, no_documents
from marin_pipelines.steps import StepContext, pending_work_dir, stage
from marin_pipelines.store import Artifact, PendingArtifact, is_local
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, build_cache
from marin_pipelines.tokenize.tokenizer import (
    TOKENIZER_FILE,
    NoText,
    TokenizerConfig,
    load_tokenizer,
    train_tokenizer,
)


@stage(TokenizerConfig, group="tokenize", kinds=("tokenizer",))
def tokenizer(
    ctx: StepContext, out: PendingArtifact, config: TokenizerConfig, curated_text: Artifact
) -> None:
    """Byte-level BPE trained with HF tokenizers on the curated text."""
    if kept(curated_text) == 0:
        raise no_documents(ctx, "train a tokenizer on")
    texts = (doc["text"] for doc in read_documents(curated_text.path, columns=["text"]))
    try:
        trained = train_tokenizer(texts, config)
    except NoText as e:
        raise NoDocuments(f"{ctx.step.name}: {e} in {curated_text.url}") from None
    trained.save(str(out.path / TOKENIZER_FILE))
    out.metadata["vocab_size"] = trained.get_vocab_size()


# revision 3: a build of >= 2 documents always has a validation document
@stage(CacheConfig, revision=3, group="tokenize", kinds=("numpy",), needs=("engine",))
def tokenized_cache(
    ctx: StepContext, out: PendingArtifact, config: CacheConfig, curated_text: Artifact, tokenizer: Artifact
) -> None:
    """Train / validation token shards (split by document hash) with O(1) random access."""
    if kept(curated_text) == 0:
        raise no_documents(ctx, "tokenize")
    # finished chunks survive a killed run here, beside the artifact, keyed by its version
    work_dir = pending_work_dir(out)
    # its chunk files are written where the work folder is: the engine's workers reach it on a local
    # store; on a bucket it is this machine's disk, so this machine's processes encode
    engine = ctx.engine if is_local(out.work) else LocalEngine()
    tok = load_tokenizer(tokenizer.path)
    build = build_cache(
        [str(curated_text.path)], tok, out.path, config, work_dir, engine, ctx.progress("chunks")
    )
    info = build.info
    out.metadata.update(vocab_size=info["vocab_size"], dtype=info["dtype"], chunks_reused=build.chunks_reused)
    for split, counts in info["splits"].items():
        out.metadata.update(
            {f"{split}_{name}": counts[name] for name in ("documents", "tokens", "text_bytes")}
        )
        out.metadata[f"{split}_shards"] = len(counts["shards"])


def kept(documents: Artifact) -> int | None:
    """The documents a document stage's output holds, from its funnel (None: it has none)."""
    return documents.metadata.get("funnel", {}).get("docs_out")
