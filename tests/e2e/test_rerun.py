"""A rerun over done steps: outputs complete at their versions are recognised in the store before any
Dagster run starts, their checks evaluated on the stored outputs, and only what is missing runs."""

import json
import shutil
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance
from tiny_pipeline import tiny_experiment

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.defs.step_assets import snapshot_partitions
from marin_pipelines.execution_record import record_name
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import MANIFEST, ArtifactStore
from marin_pipelines.summary import experiment_summary


def outputs(experiment: Experiment) -> list[tuple[str, str | None]]:
    """(step, partition) of every output the experiment has."""
    return [(s.name, p) for s in experiment.all_steps for p in s.partition_keys() or [None]]


def checks(experiment: Experiment) -> list[tuple[str, str]]:
    """(step, check) of every check evaluation: one per check per output."""
    steps = {s.name: s for s in experiment.all_steps}
    return sorted((name, check) for name, _ in outputs(experiment) for check in steps[name].stage.checks)


def materialised_in(instance: DagsterInstance) -> list[tuple[str, str | None]]:
    return sorted(
        (e.dagster_event.asset_key.to_user_string(), e.dagster_event.partition)
        for r in instance.get_runs()
        for e in instance.all_logs(r.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    )


def store_copy(tiny_store: str, tmp_path: Path) -> ArtifactStore:
    """The tiny experiment's outputs, copied out of the session's tiny store (which other tests write to
    meanwhile): a test that takes outputs away leaves the others theirs."""
    source, root = ArtifactStore(tiny_store), tmp_path / "store"
    for step in tiny_experiment().all_steps:
        for partition in step.partition_keys() or [None]:
            folder = Path(source.url(step.key, step.version, partition))
            shutil.copytree(folder, root / folder.relative_to(source.root))
    return ArtifactStore(root)


def test_a_rerun_over_done_steps_starts_no_run_and_summarises_every_step(tiny_store, tmp_path):
    experiment = tiny_experiment()
    store = store_copy(tiny_store, tmp_path)
    Path(store.root, record_name(experiment)).unlink(missing_ok=True)
    instance = DagsterInstance.ephemeral()
    run = materialize_experiment(experiment, store.root, instance)
    assert instance.get_runs() == [] and run.run_ids == []
    assert sorted((m.asset, m.partition) for m in run.materialized) == sorted(outputs(experiment))
    assert run.reused == len(run.materialized)
    assert sorted((c.asset, c.check) for c in run.checks) == checks(experiment) and run.checks_passed
    evaluation = next(m.metadata for m in run.materialized if m.asset == "tiny/eval")
    assert evaluation["reused"] and 0 < evaluation["bits_per_byte"] < 10  # what the run's event would say
    # the snapshots are still the crawl's partitions in the instance, as the UI shows them
    crawl = experiment.step("tiny/crawl")
    assert instance.get_dynamic_partitions(snapshot_partitions(crawl).name) == crawl.partition_keys()
    record = json.loads(store.read_text(record_name(experiment)))
    assert {s["name"]: s["status"] for s in record["steps"]} == {s.name: "done" for s in experiment.all_steps}
    text = experiment_summary(experiment, store.root, run, seconds=1.0)
    assert (
        f"{len(run.materialized)} assets materialised in 1.0 s (nothing recomputed, every output reused)"
        in text
    )
    for step in experiment.all_steps:
        if step.stage.documents:
            assert f"  {step.name} " in text
    assert "tiny/run: " in text and f"asset checks: {len(checks(experiment))} passed" in text


def test_a_partly_done_rerun_runs_only_what_is_missing(tiny_store, tmp_path):
    experiment = tiny_experiment()
    store = store_copy(tiny_store, tmp_path)
    filtered, curated = experiment.step("tiny/filtered_text"), experiment.step("tiny/curated_text")
    missing = [("tiny/filtered_text", filtered.partition_keys()[0]), ("tiny/curated_text", None)]
    for step, (_, partition) in zip((filtered, curated), missing, strict=True):
        Path(store.url(step.key, step.version, partition), MANIFEST).unlink()  # incomplete: never read
    instance = DagsterInstance.ephemeral()
    run = materialize_experiment(experiment, store.root, instance)
    assert sorted((m.asset, m.partition) for m in run.materialized if not m.reused) == sorted(missing)
    assert sorted((m.asset, m.partition) for m in run.materialized) == sorted(outputs(experiment))
    assert len(instance.get_runs()) == len(run.run_ids) == 2  # the snapshot's run, then the rest's
    assert materialised_in(instance) == sorted(missing)
    assert sorted((c.asset, c.check) for c in run.checks) == checks(experiment) and run.checks_passed


def test_a_done_output_that_fails_a_blocking_check_goes_through_its_run(tiny_store, tmp_path):
    """Its run fails on it, as a run over it did before: the instance shows the failed check."""
    experiment = tiny_experiment()
    store = store_copy(tiny_store, tmp_path)
    curated = experiment.step("tiny/curated_text")
    manifest = Path(store.url(curated.key, curated.version), MANIFEST)
    written = json.loads(manifest.read_text())
    written["metadata"]["funnel"]["docs_in"] += 1  # in != out + removed
    manifest.write_text(json.dumps(written))
    instance = DagsterInstance.ephemeral()
    with pytest.raises(Exception, match="blocking asset check failed.*\n.*tiny/curated_text: funnel"):
        materialize_experiment(experiment, store.root, instance)
    assert materialised_in(instance) == [("tiny/curated_text", None)]  # reused, then checked
