"""Decontamination as a step of an experiment and as a command: the tiny pipeline's curated text with a
few evaluation items planted into a second document step, against the evaluation steps' own tasks."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import DagsterInstance
from tiny_pipeline import tiny_run, tiny_text, tiny_tokens

from marin_pipelines.cli import main
from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.documents import list_shards, read_shard
from marin_pipelines.evals.evaluation_items import evaluation_items
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import decontaminate, evaluate, step
from marin_pipelines.stages.text_files import text_files
from marin_pipelines.store import ArtifactStore

TASKS = ["marin_python_mc", "marin_python_text"]


def test_a_step_removes_the_planted_items_against_the_experiments_tasks(tiny_store, tmp_path):
    items = evaluation_items(TASKS)
    mc, text = (next(i for i in items if i.suite == task) for task in TASKS)
    (tmp_path / "notes.jsonl").write_text(
        "".join(
            json.dumps({"id": name, "text": body}) + "\n"
            for name, body in (
                ("quiz", f"A quiz seen online. {mc.text} Easy."),
                ("copied", text.text.replace(",", ";").upper()),
                ("clean", "Nothing from any benchmark is in this note about gardens and rivers at all."),
            )
        )
    )
    planted = step("tiny_decon/notes", text_files, {"paths": [str(tmp_path / "notes.jsonl")]}, {})
    evaluation = evaluate("tiny_decon/eval", tiny_run(tiny_tokens()), evals={"tasks": TASKS})
    clean = decontaminate("tiny_decon/decontaminated_text", planted, evaluations=[evaluation])
    assert clean.config.against == TASKS  # the evaluation step's tasks
    crawl = decontaminate(
        "tiny_decon/crawl_text", tiny_text().deduplicated_text, against=TASKS
    )  # per snapshot
    experiment = Experiment("tiny_decon", steps=[clean, crawl])
    run = materialize_experiment(experiment, tiny_store, DagsterInstance.ephemeral())
    assert run.checks_passed  # the funnels: in == out + removed
    store = ArtifactStore(tiny_store)
    deduplicated = tiny_text().deduplicated_text
    snapshot = store.get(deduplicated.key, deduplicated.version, "demo").metadata["funnel"]["docs_out"]
    assert (
        store.get(crawl.key, crawl.version).metadata["funnel"]["docs_in"] == snapshot
    )  # every snapshot read
    out = store.get(clean.key, clean.version)
    meta = out.metadata
    assert meta["funnel"]["docs_in"] == 3 and meta["funnel"]["removed"] == {"contaminated": 2}
    assert meta["contaminated_documents"] == 2
    assert meta["contamination"]["marin_python_mc"]["documents"] == 1
    assert meta["items_in_training_data"] == {"marin_python_mc": [mc.item], "marin_python_text": [text.item]}
    assert "| marin_python_mc | 1 | 1 of 16 |" in meta["markdown"]["contamination"]
    kept = [doc["id"] for shard in list_shards(out.url) for doc in read_shard(shard)]
    assert kept == ["clean"]


def test_the_command_writes_kept_and_removed_shards_and_prints_the_report(tmp_path, capsys):
    items = evaluation_items(["marin_python_text"])
    docs = tmp_path / "docs"
    docs.mkdir()
    rows = [{"id": "a", "text": f"Intro. {items[1].text}"}, {"id": "b", "text": "a plain sentence " * 5}]
    pq.write_table(pa.Table.from_pylist(rows), docs / "documents-00000.parquet")
    (tmp_path / "items.txt").write_text("a plain sentence a plain sentence a plain sentence\n")
    out = tmp_path / "out"
    argv = [
        "decontaminate",
        "--input",
        str(docs),
        "--against",
        "marin_python_text",
        str(tmp_path / "items.txt"),
    ]
    assert main([*argv, "--out", str(out), "--workers", "1"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["funnel"]["docs_in"] == 2 and printed["funnel"]["removed"] == {"contaminated": 2}
    assert printed["per_set"]["items.txt"]["documents"] == 1
    assert printed["items_in_training_data"]["marin_python_text"] == [items[1].item]
    removed = [doc for shard in list_shards(str(out), "removed") for doc in read_shard(shard)]
    assert {d["id"]: d["matched_sets"] for d in removed} == {"a": ["marin_python_text"], "b": ["items.txt"]}
    assert main(["decontaminate", "--input", str(tmp_path), "--against", "x", "--out", str(out)]) == 2
    assert "no documents-*.parquet there" in capsys.readouterr().err
    # other items into the same --out would mix two runs' shards: a new folder is asked for
    assert main([*argv[:-1], "--out", str(out), "--workers", "1"]) == 2
    assert f"--out {out} already exists" in capsys.readouterr().err
