"""Quality: a fastText classifier trained in the run scores every document; the best are kept.

The classifier learns reference documents vs the crawl (DCLM), or, when the step is given Datashop
labels (``quality_labels``), the labels an annotator gave a sample of the crawl.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from marin_pipelines.documents import Decision, write_stage
from marin_pipelines.quality.annotation import (
    SIMILARITY,
    DatashopConfig,
    classifier_examples,
    label_distribution,
    label_sample,
)
from marin_pipelines.quality.curated_text import CurationConfig, curate, examples_table, extreme_ids
from marin_pipelines.quality.quality_scores import (
    QualityConfig,
    load_reference_texts,
    plot_score_histogram,
    score_documents,
    train_quality_classifier,
)
from marin_pipelines.stages.crawl import FUNNEL, Snapshots, no_documents, snapshot_documents
from marin_pipelines.steps import StepContext, stage
from marin_pipelines.store import Artifact, PendingArtifact

SCORES = "scores.parquet"
MODEL = "classifier.bin"
LABELS = "labels.parquet"
HISTOGRAM = "score_histogram.png"
METRICS = ("precision", "recall", "f1", "accuracy")
N_EXAMPLES = 3
ANNOTATION_STATS = ("documents", "labelled", "unparseable", "failed", "requests", "retries", "cache_hits")


@stage(DatashopConfig, needs=("annotator",), kinds=("parquet",))
def quality_labels(
    ctx: StepContext, out: PendingArtifact, config: DatashopConfig, deduplicated_text: Snapshots
) -> None:
    """Datashop: a seeded sample of the crawl labelled by an annotator (the embedded SimilarityAnnotator,
    which is no language model, or a model behind a chat-completions endpoint); labels >= keep are the
    classifier's positives."""
    labeller = ctx.resources["annotator"].annotator(config)
    rows, result = label_sample(snapshot_documents(ctx, deduplicated_text), config, labeller)
    if not rows:
        raise no_documents(ctx, "label")
    schema = pa.schema(
        [("id", pa.string()), ("url", pa.string()), ("text", pa.string()), ("label", pa.int64())]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out.path / LABELS)
    distribution = label_distribution(result.labels, config.scale)
    positives = sum(n for label, n in distribution.items() if int(label) >= config.scale.keep)
    table = "| label | documents |\n|---:|---:|\n" + "\n".join(
        f"| {label}{' (keep)' if int(label) >= config.scale.keep else ''} | {n} |"
        for label, n in distribution.items()
    )
    out.metadata.update(
        annotator=labeller.describe(),
        embedded_annotator=config.annotator == SIMILARITY,
        label_distribution=distribution,
        positives=positives,
        negatives=sum(distribution.values()) - positives,
        markdown={"labels": table},
        **{name: result.stats[name] for name in ANNOTATION_STATS},
    )


@stage(QualityConfig, revision=2, kinds=("fasttext",))
def quality_scores(
    ctx: StepContext,
    out: PendingArtifact,
    config: QualityConfig,
    deduplicated_text: Snapshots,
    quality_labels: Artifact | None = None,
) -> None:
    """A fastText classifier (good examples vs the rest) and every document's score."""
    if quality_labels is None:
        positives = load_reference_texts(config.reference)
        negatives = [doc["text"] for doc in snapshot_documents(ctx, deduplicated_text, ["text"])]
        if not negatives:
            raise no_documents(ctx, "score")
    else:
        rows = pq.read_table(quality_labels.file(LABELS)).to_pylist()
        scale = DatashopConfig.model_validate(quality_labels.manifest["config"]).scale  # what labelled it
        positives, negatives = classifier_examples(rows, scale)
    classifier = train_quality_classifier(positives, negatives, config, out.path / MODEL)
    ids, scores = zip(
        *score_documents(out.path / MODEL, snapshot_documents(ctx, deduplicated_text)), strict=True
    )
    pq.write_table(pa.table({"id": list(ids), "score": list(scores)}), out.path / SCORES)
    plot_score_histogram(
        list(scores), out.path / HISTOGRAM, f"{len(ids)} documents, held-out F1 {classifier['f1']:.2f}"
    )
    out.metadata.update({name: classifier[name] for name in METRICS})
    out.metadata.update(
        classifier=classifier,
        documents_scored=len(ids),
        mean_score=sum(scores) / len(ids),
        plots={"score_histogram": HISTOGRAM},
    )


@stage(CurationConfig, revision=2, checks=FUNNEL, kinds=("parquet",))
def curated_text(
    ctx: StepContext,
    out: PendingArtifact,
    config: CurationConfig,
    deduplicated_text: Snapshots,
    quality_scores: Artifact,
) -> None:
    """Documents kept by quality threshold or top fraction: the training text."""
    table = pq.read_table(quality_scores.file(SCORES))
    scores = dict(zip(table["id"].to_pylist(), table["score"].to_pylist(), strict=True))
    top, bottom = extreme_ids(scores, N_EXAMPLES)
    examples = {}

    def noting_examples(decisions: Iterable[Decision]) -> Iterator[Decision]:
        for doc, reason in decisions:
            if doc["id"] in top or doc["id"] in bottom:
                examples[doc["id"]] = doc
            yield doc, reason

    kept = curate(snapshot_documents(ctx, deduplicated_text), scores, config)
    funnel = write_stage(noting_examples(kept), out.path)
    out.metadata["funnel"] = funnel.as_dict()
    out.metadata["kept_fraction"] = funnel.docs_out / funnel.docs_in if funnel.docs_in else 0.0
    out.metadata["markdown"] = {
        f"{name}_examples": examples_table([examples[i] for i in ids if i in examples], scores)
        for name, ids in (("top", top), ("bottom", bottom))
    }
