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


def test_a_corpus_is_deduplicated_against_another_corpus_and_a_crawl(tiny_store: str, tmp_path: Path):
    """Corpus B holds 10 docstrings of its own, 5 of corpus A's (one re-punctuated) and a crawled page:
    its dedup, run against A's and the tiny crawl's, keeps none of those 6 (and of its own, those whose
    paragraphs A has too); A's runs first."""
    from tiny_pipeline import tiny_text

    from marin_pipelines.documents import list_shards, read_shard
    from marin_pipelines.store import ArtifactStore

    store = ArtifactStore(tiny_store)
    crawl = tiny_text().deduplicated_text
    page = next(doc for doc in read_shard(list_shards(store.get(crawl.key, crawl.version, "demo").url)[0]))
    texts = docstrings()
    off = {"enabled": False}
    filters = {"language": off, "gopher_quality": off, "c4": off, "fineweb": off, "gopher_repetition": off}
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:15]))
    copied = [*texts[:4], texts[4].replace(",", " ;"), page["text"]]
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[15:25] + copied))
    a = corpus_and_text("docs_a", [str(tmp_path / "a.jsonl")], filters=filters)
    b = corpus_and_text(
        "docs_b", [str(tmp_path / "b.jsonl")], filters=filters, dedup_against=[a.deduplicated_text, crawl]
    )
    run = materialize_experiment(Experiment("docs_ab", steps=[b.deduplicated_text]), tiny_store)
    assert run.checks_passed
    order = [m.asset for m in run.materialized if not m.reused]
    assert order.index("docs_a/deduplicated_text") < order.index("docs_b/deduplicated_text")
    out = store.get(b.deduplicated_text.key, b.deduplicated_text.version, "corpus")
    kept = {doc["text"] for shard in list_shards(out.url) for doc in read_shard(shard)}
    assert kept and kept <= set(texts[15:25])  # every copy of A's or of the crawl's removed
    assert out.metadata["funnel"]["docs_in"] == 16 and out.metadata["funnel"]["docs_out"] == len(kept)


def test_a_corpus_reads_the_files_another_step_wrote(tmp_path: Path):
    """A dump step (the standard library's docstrings as parquet, a package's docs as gzipped JSON lines, a
    task item planted) runs before the corpus steps that read it, which map their own field names."""
    from marin_pipelines.experiments.defaults import corpus, dataset_dumps

    dumps = dataset_dumps(
        "dumps/files",
        modules=["json", "textwrap"],
        distributions=["pluggy"],
        plant_tasks=["marin_python_text"],
        plant_per_task=1,
    )
    docstrings = corpus(
        "dumps/docstrings",
        files=dumps,
        globs=["docstrings/*.parquet"],
        text_field="content",
        id_field="doc_id",
    )
    docs = corpus(
        "dumps/package_docs",
        files=dumps,
        globs=["package_docs/*.jsonl.gz"],
        text_field="body",
        keep_fields=["package"],
    )
    run = materialize_experiment(Experiment("dumps", steps=[docstrings, docs]), str(tmp_path / "store"))
    assert [m.asset for m in run.materialized][0] == "dumps/files" and run.checks_passed
    from marin_pipelines.store import ArtifactStore

    store = ArtifactStore(str(tmp_path / "store"))
    written = store.get(dumps.key, dumps.version).metadata
    assert len(written["planted"]) == 1 and written["planted"][0]["id"].startswith("pluggy/")
    read = {
        step: store.get(step.key, step.version, "corpus").metadata["funnel"] for step in (docstrings, docs)
    }
    assert read[docstrings]["docs_out"] == written["docstrings"]["rows"] > 5  # json's and textwrap's objects
    assert read[docs]["docs_out"] == written["package_docs"]["rows"]
