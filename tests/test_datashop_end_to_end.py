"""The Datashop variant's data part in process on a tiny crawl: labels -> classifier -> curated text."""

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance

from marin_pipelines.experiment import STAGES, Experiment
from marin_pipelines.experiments.datashop import datashop
from marin_pipelines.jobs.local import materialize_experiment
from marin_pipelines.store import ArtifactStore

TINY_CRAWL = {"demo": {"pydoc_modules": ["json", "heapq", "bisect", "textwrap", "shlex"], "n_files": 2}}


def tiny(**changes) -> Experiment:
    fields = datashop().model_dump()
    fields.update(
        name="tiny_datashop", crawl=TINY_CRAWL, quality={**fields["quality"], "bucket": 10_000}, **changes
    )
    return Experiment.build(**fields)


def materialize_data_part(
    experiment: Experiment,
    root: str,
    instance: DagsterInstance,
    resources: dict | None = None,
    through: str = "curated_text",
) -> dict[str, dict]:
    """Each crawl snapshot to deduplicated_text, then corpus stages up to ``through``; metadata by stage."""
    run = materialize_experiment(experiment, root, instance, through=through, resources=resources)
    assert not run.failed_checks
    return {m.asset.split("/")[1]: m.metadata for m in run.materialized}


@pytest.fixture(scope="module")
def data_part(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("store"))
    instance = DagsterInstance.ephemeral()
    experiment = tiny()
    return experiment, root, instance, materialize_data_part(experiment, root, instance)


def test_labels_train_the_classifier_that_curates(data_part):
    experiment, root, _, meta = data_part
    assert list(experiment.stages)[:8] == [
        *list(STAGES)[:5],
        "quality_labels",
        "quality_scores",
        "curated_text",
    ]
    labels = meta["quality_labels"]
    assert "SimilarityAnnotator" in labels["annotator"] and "no language model" in labels["annotator"]
    distribution = labels["label_distribution"]
    assert set(distribution) == {str(n) for n in range(6)}
    assert sum(distribution.values()) == labels["labelled"] == labels["documents"] > 10
    assert labels["positives"] >= 2 and labels["negatives"] >= 2
    assert labels["requests"] == 0 and labels["unparseable"] == 0  # no server behind the embedded annotator
    assert "| label | documents |" in labels["labels"]

    scores = meta["quality_scores"]
    classifier = scores["classifier"]
    assert classifier["positives"] == labels["positives"]  # positives are exactly the labels >= keep
    for name in ("precision", "recall", "f1"):
        assert 0 <= scores[name] <= 1 and scores[name] == classifier[name]
    assert scores["f1"] > 0.5
    assert "data:image/png;base64," in scores["score_histogram"]

    curated = meta["curated_text"]
    assert curated["kept_fraction"] == pytest.approx(curated["docs_out"] / curated["docs_in"])
    assert 0.4 < curated["kept_fraction"] < 0.6  # top_fraction 0.5
    assert curated["top_examples"].startswith("| score | url | text |")
    assert curated["top_examples"].count("\n| ") == 3 and curated["bottom_examples"].count("\n| ") == 3

    store = ArtifactStore(root)
    scored = pq.read_table(
        store.get([experiment.name, "quality_scores"], experiment.versions["quality_scores"]).file(
            "scores.parquet"
        )
    ).column("score")
    assert max(scored.to_pylist()) - min(scored.to_pylist()) > 0.5  # the classifier tells documents apart
    label_rows = pq.read_table(
        store.get([experiment.name, "quality_labels"], experiment.versions["quality_labels"]).file(
            "labels.parquet"
        )
    )
    assert label_rows.num_rows == labels["documents"] and set(label_rows.column_names) >= {
        "id",
        "text",
        "label",
    }


def test_a_new_curation_rule_recomputes_only_curated_text(data_part):
    experiment, root, instance, _ = data_part
    changed = tiny(curation={"threshold": 0.5})
    different = {stage for stage in changed.versions if changed.versions[stage] != experiment.versions[stage]}
    assert different >= {"curated_text"} and not different & {"quality_labels", "quality_scores"}
    meta = materialize_data_part(changed, root, instance)
    reused = {stage for stage, m in meta.items() if m["reused"]}
    assert reused == {*list(STAGES)[:5], "quality_labels", "quality_scores"}
    assert not meta["curated_text"]["reused"]


def test_a_new_keep_threshold_relabels_and_retrains(data_part):
    experiment, *_ = data_part
    fields = experiment.model_dump()
    changed = tiny(datashop={**fields["datashop"], "scale": {"min": 0, "max": 5, "keep": 4}})
    different = {stage for stage in changed.versions if changed.versions[stage] != experiment.versions[stage]}
    assert {"quality_labels", "quality_scores", "curated_text"} <= different
    assert not different & set(list(STAGES)[:5])


def test_the_demo_graph_has_no_labelling_stage():
    from marin_pipelines.definitions import defs
    from marin_pipelines.experiments.demo import demo

    assert demo().stages is STAGES
    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert "datashop/quality_labels" in keys and "demo/quality_labels" not in keys
    assert {f"datashop/{stage}" for stage in datashop().stages} <= keys
