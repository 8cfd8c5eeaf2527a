"""The corpus step as Dagster assets: a saved dataset and a JSON-lines dump materialise as the corpus asset
(one snapshot partition, its funnel checked) and the text stages after it; a second run reuses them all."""

import json
from pathlib import Path

from dagster import DagsterInstance

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import corpus_and_text


def docstrings() -> list[str]:
    import collections
    import inspect

    return [d for name in sorted(dir(collections)) if (d := inspect.getdoc(getattr(collections, name)))][:30]


def test_a_corpus_materialises_with_the_text_stages_and_is_reused(tmp_path: Path):
    import datasets

    texts = docstrings()
    datasets.Dataset.from_dict({"text": texts[:20], "source": ["collections"] * 20}).save_to_disk(
        str(tmp_path / "saved")
    )
    (tmp_path / "dump.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in texts[20:]) + "not json\n"
    )
    off = {"enabled": False}
    text = corpus_and_text(
        "docs",
        [str(tmp_path / "saved"), str(tmp_path / "dump.jsonl")],
        filters={"language": off, "gopher_quality": off, "c4": off, "fineweb": off},
    )
    experiment = Experiment("corpus_docs", steps=[text.deduplicated_text])
    instance = DagsterInstance.ephemeral()
    run = materialize_experiment(experiment, str(tmp_path / "store"), instance)
    assert run.checks_passed and {c.check for c in run.checks} >= {"funnel"}
    corpus = next(m for m in run.materialized if m.asset == "docs/corpus")
    assert corpus.partition == "corpus" and not corpus.reused
    assert [m.asset for m in run.materialized] == [
        "docs/corpus",
        "docs/filtered_text",
        "docs/deduplicated_text",
    ]
    again = materialize_experiment(experiment, str(tmp_path / "store"), instance)
    assert again.reused == len(again.materialized) == 3
