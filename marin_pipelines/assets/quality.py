"""Quality: a fastText classifier trained in the run scores every document; the best are kept.

The classifier learns reference documents vs the crawl (DCLM), or, when the experiment declares a
Datashop config, the labels an annotator gave a sample of the crawl (``quality_labels``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import AssetsDefinition

from marin_pipelines.assets.crawl import Snapshots, snapshot_documents
from marin_pipelines.assets.stage import funnel_conserved, stage_asset
from marin_pipelines.documents import Decision, write_stage
from marin_pipelines.experiment import Experiment
from marin_pipelines.quality.annotation import (
    SIMILARITY,
    DatashopConfig,
    classifier_examples,
    label_distribution,
    label_sample,
)
from marin_pipelines.quality.curated_text import curate, examples_table, extreme_ids
from marin_pipelines.quality.quality_scores import (
    load_reference_texts,
    plot_score_histogram,
    score_documents,
    train_quality_classifier,
)
from marin_pipelines.resources.annotator import AnnotatorResource
from marin_pipelines.store import Artifact, PendingArtifact

SCORES = "scores.parquet"
MODEL = "classifier.bin"
LABELS = "labels.parquet"
HISTOGRAM = "score_histogram.png"
METRICS = ("precision", "recall", "f1", "accuracy")
N_EXAMPLES = 3
ANNOTATION_STATS = ("documents", "labelled", "unparseable", "failed", "requests", "retries", "cache_hits")


def quality_assets(experiment: Experiment) -> list[AssetsDefinition]:
    config = experiment.quality
    datashop = experiment.datashop
    labels_in = ("quality_labels",) if datashop else ()

    @stage_asset(experiment, "quality_scores", group="data", ins=("deduplicated_text", *labels_in))
    def quality_scores(
        out: PendingArtifact, deduplicated_text: Snapshots, quality_labels: Artifact | None = None
    ) -> None:
        """A fastText classifier (good examples vs the rest) and every document's score."""
        if quality_labels is None:
            positives = load_reference_texts(config.reference)
            negatives = [doc["text"] for doc in snapshot_documents(experiment, deduplicated_text, ["text"])]
        else:
            rows = pq.read_table(quality_labels.file(LABELS)).to_pylist()
            positives, negatives = classifier_examples(rows, datashop.scale)
        classifier = train_quality_classifier(positives, negatives, config, out.path / MODEL)
        ids, scores = zip(
            *score_documents(out.path / MODEL, snapshot_documents(experiment, deduplicated_text)), strict=True
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

    @stage_asset(
        experiment,
        "curated_text",
        group="data",
        ins=("deduplicated_text", "quality_scores"),
        checks={"funnel": funnel_conserved},
    )
    def curated_text(out: PendingArtifact, deduplicated_text: Snapshots, quality_scores: Artifact) -> None:
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

        kept = curate(snapshot_documents(experiment, deduplicated_text), scores, experiment.curation)
        funnel = write_stage(noting_examples(kept), out.path)
        out.metadata["funnel"] = funnel.as_dict()
        out.metadata["kept_fraction"] = funnel.docs_out / funnel.docs_in if funnel.docs_in else 0.0
        out.metadata["markdown"] = {
            f"{name}_examples": examples_table([examples[i] for i in ids if i in examples], scores)
            for name, ids in (("top", top), ("bottom", bottom))
        }

    if datashop is None:
        return [quality_scores, curated_text]
    return [_quality_labels(experiment, datashop), quality_scores, curated_text]


def _quality_labels(experiment: Experiment, datashop: DatashopConfig) -> AssetsDefinition:
    def quality_labels(
        out: PendingArtifact, deduplicated_text: Snapshots, annotator: AnnotatorResource
    ) -> None:
        labeller = annotator.annotator(datashop)
        rows, result = label_sample(snapshot_documents(experiment, deduplicated_text), datashop, labeller)
        pq.write_table(
            pa.Table.from_pylist(
                rows,
                schema=pa.schema(
                    [("id", pa.string()), ("url", pa.string()), ("text", pa.string()), ("label", pa.int64())]
                ),
            ),
            out.path / LABELS,
        )
        distribution = label_distribution(result.labels, datashop.scale)
        positives = sum(n for label, n in distribution.items() if int(label) >= datashop.scale.keep)
        table = "| label | documents |\n|---:|---:|\n" + "\n".join(
            f"| {label}{' (keep)' if int(label) >= datashop.scale.keep else ''} | {n} |"
            for label, n in distribution.items()
        )
        out.metadata.update(
            annotator=labeller.describe(),
            label_distribution=distribution,
            positives=positives,
            negatives=sum(distribution.values()) - positives,
            markdown={"labels": table},
            **{name: result.stats[name] for name in ANNOTATION_STATS},
        )

    who = (
        "the embedded SimilarityAnnotator (no language model: TF-IDF similarity to the experiment's "
        "example documents)"
        if datashop.annotator == SIMILARITY
        else f"model {datashop.annotator} through the annotator resource's chat-completions endpoint"
    )
    quality_labels.__doc__ = (
        f"Datashop: {datashop.sample_size} sampled documents labelled {datashop.scale.min}.."
        f"{datashop.scale.max} by {who}; labels >= {datashop.scale.keep} are the classifier's positives."
    )
    return stage_asset(
        experiment, "quality_labels", group="data", ins=("deduplicated_text",), resources=("annotator",)
    )(quality_labels)
