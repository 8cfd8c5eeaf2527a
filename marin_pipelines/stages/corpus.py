"""Documents from existing datasets (``crawl/corpus.py``): parquet, JSON lines, Hugging Face datasets saved to
disk. The corpus is one snapshot (its ``snapshot`` key), so the text stages take it where they take a crawl's
documents (filtered_text's ``extracted_text``, deduplicated_text's ``filtered_text``, quality's
``deduplicated_text``), and its files' names, sizes and change tokens are part of its version."""

from __future__ import annotations

from marin_pipelines.crawl.corpus import CorpusConfig, FieldMappingError, corpus_identity, write_corpus
from marin_pipelines.stages.crawl import PER_SNAPSHOT, NoDocuments
from marin_pipelines.steps import InputError, StepContext, stage
from marin_pipelines.store import Artifact, PendingArtifact

__all__ = ["CorpusConfig", "corpus"]


@stage(
    CorpusConfig,
    **{**PER_SNAPSHOT, "partition_keys": CorpusConfig.snapshots, "fingerprint": corpus_identity},
)
def corpus(
    ctx: StepContext, out: PendingArtifact, config: CorpusConfig, files: Artifact | None = None
) -> None:
    """Documents from existing datasets (parquet, JSON lines, saved Hugging Face datasets): each row's text,
    id and kept fields; rows that are no document counted per reason and kept in removed-*.parquet. The
    files are ``paths``, or the output of another step (``files``: a dump it wrote), picked by ``globs``."""
    if (files is None) == (not config.paths):
        raise InputError(f"{ctx.step.name}: name the files as paths or as a files input: one of the two")
    if files is not None:  # its version is in this step's: the files need no identity of their own
        config = config.model_copy(update={"paths": [files.url]})
    try:
        result = write_corpus(config, out.work, ctx.engine, ctx.progress("units"))
    except FieldMappingError as e:
        raise InputError(f"{ctx.step.name}: {e}") from None
    out.keep_work()
    out.metadata.update(result.as_dict())
    if result.funnel.removed:
        ctx.log(f"{ctx.step.name}: rows left out: {dict(result.funnel.removed)} (first at {result.places})")
    if not result.funnel.docs_out:
        raise NoDocuments(f"{ctx.step.name}: no document in {config.paths}: {result.funnel.as_dict()}")
