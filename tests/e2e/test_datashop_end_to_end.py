"""The Datashop variant's data part in process on a tiny crawl: labels -> classifier -> curated text."""

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import datashop as datashop_module
from marin_pipelines.experiments.datashop import datashop
from marin_pipelines.experiments.defaults import crawl_and_text, quality_and_curation
from marin_pipelines.store import ArtifactStore

TINY_CRAWL = {"pydoc_modules": ["json", "heapq", "bisect", "textwrap", "shlex"], "n_files": 2}
TEXT_STAGES = ["crawl", "web_documents", "extracted_text", "filtered_text", "deduplicated_text"]
# the Datashop experiment's own settings, as it declares them
DATASHOP = datashop_module.quality.quality_labels.config_json
QUALITY = datashop_module.quality.quality_scores.config_json
CURATION = datashop_module.quality.curated_text.config_json


def tiny(
    name: str = "tiny_datashop",
    crawl: dict = TINY_CRAWL,
    datashop: dict | None = None,
    curation: dict | None = None,
) -> Experiment:
    """The Datashop experiment's data part (crawl to curated text) on a tiny crawl of its own."""
    text = crawl_and_text(name, demo=crawl)
    quality = quality_and_curation(
        name,
        text.deduplicated_text,
        datashop=datashop or DATASHOP,
        quality={**QUALITY, "bucket": 10_000},
        curation=curation or CURATION,
    )
    return Experiment(name, steps=[quality.curated_text])


def versions(experiment: Experiment) -> dict[str, str]:
    """Step versions by stage (one step per stage in these experiments)."""
    out = {step.stage.name: step.version for step in experiment.all_steps}
    assert len(out) == len(experiment.all_steps)
    return out


def materialize_data_part(
    experiment: Experiment,
    root: str,
    instance: DagsterInstance,
    resources: dict | None = None,
    through: str = "curated_text",
) -> dict[str, dict]:
    """Each crawl snapshot to deduplicated_text, then corpus stages up to ``through``; metadata by stage."""
    run = materialize_experiment(
        experiment, root, instance, through=f"{experiment.name}/{through}", resources=resources
    )
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
    assert [step.stage.name for step in experiment.all_steps] == [
        *TEXT_STAGES,
        "quality_labels",
        "quality_scores",
        "curated_text",
    ]
    assert set(meta) == set(versions(experiment))
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
        # the UI shows a number to 4 significant digits, in the JSON beside it too
        assert 0 <= scores[name] <= 1 and scores[name] == pytest.approx(classifier[name], rel=1e-3)
    assert scores["f1"] > 0.5
    assert "data:image/png;base64," in scores["score_histogram"]

    curated = meta["curated_text"]
    assert curated["kept_fraction"] == pytest.approx(curated["docs_out"] / curated["docs_in"])
    assert 0.4 < curated["kept_fraction"] < 0.6  # top_fraction 0.5
    assert curated["top_examples"].startswith("| score | url | text |")
    assert curated["top_examples"].count("\n| ") == 3 and curated["bottom_examples"].count("\n| ") == 3

    store = ArtifactStore(root)
    scores_step = experiment.step(f"{experiment.name}/quality_scores")
    labels_step = experiment.step(f"{experiment.name}/quality_labels")
    scores_file = store.get(scores_step.key, scores_step.version).file("scores.parquet")
    scored = pq.read_table(scores_file).column("score")
    assert max(scored.to_pylist()) - min(scored.to_pylist()) > 0.5  # the classifier tells documents apart
    label_rows = pq.read_table(store.get(labels_step.key, labels_step.version).file("labels.parquet"))
    assert label_rows.num_rows == labels["documents"] and set(label_rows.column_names) >= {
        "id",
        "text",
        "label",
    }


def test_a_new_curation_rule_recomputes_only_curated_text(data_part):
    experiment, root, instance, _ = data_part
    changed = tiny(curation={"threshold": 0.5})
    before, after = versions(experiment), versions(changed)
    different = {stage for stage in after if after[stage] != before[stage]}
    assert different >= {"curated_text"} and not different & {"quality_labels", "quality_scores"}
    meta = materialize_data_part(changed, root, instance)
    reused = {stage for stage, m in meta.items() if m["reused"]}
    assert reused == {*TEXT_STAGES, "quality_labels", "quality_scores"}
    assert not meta["curated_text"]["reused"]


def test_a_new_keep_threshold_relabels_and_retrains(data_part):
    experiment, *_ = data_part
    changed = tiny(datashop={**DATASHOP, "scale": {"min": 0, "max": 5, "keep": 4}})
    before, after = versions(experiment), versions(changed)
    different = {stage for stage in after if after[stage] != before[stage]}
    assert {"quality_labels", "quality_scores", "curated_text"} <= different
    assert not different & set(TEXT_STAGES)


def test_the_tiny_variant_keeps_the_datashop_experiments_settings():
    (labels,) = [s for s in datashop.all_steps if s.stage.name == "quality_labels"]
    tiny_labels = tiny().step("tiny_datashop/quality_labels")
    assert tiny_labels.config == labels.config  # rubric, sample, scale, annotator and examples
    assert CURATION == {"threshold": None, "top_fraction": 0.5}
    assert tiny().step("tiny_datashop/curated_text").config_json == CURATION


def test_the_demo_graph_has_no_labelling_stage():
    from marin_pipelines.definitions import defs
    from marin_pipelines.experiments.demo import demo

    assert "quality_labels" not in {step.stage.name for step in demo.all_steps}
    keys = {key.to_user_string() for key in defs().resolve_asset_graph().get_all_asset_keys()}
    assert "datashop/quality_labels" in keys and "demo/quality_labels" not in keys
    assert {step.name for step in datashop.all_steps} <= keys
