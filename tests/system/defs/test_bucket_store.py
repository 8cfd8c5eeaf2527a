"""The whole graph with the store on gs://: every stage, training (orbax writes its checkpoints to the
bucket itself) and evaluation (it reads them there), through a real Cloud Storage API (the emulator)."""

import json

import fsspec
import pytest
from dagster import DagsterInstance

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.execution_record import record_name
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    crawl_and_text,
    evaluate,
    quality_and_curation,
    tokenizer_and_cache,
    train,
)
from marin_pipelines.store import MANIFEST, ArtifactStore

SMALL_CRAWL = {"pydoc_modules": ["json", "heapq", "bisect", "textwrap", "shlex"], "n_files": 2}
TRAIN = {"steps": 20, "batch_size": 8, "warmup_steps": 2, "log_every": 5, "checkpoint_every": 10}


@pytest.fixture(scope="module")
def on_bucket(gcs_emulator, tmp_path_factory):
    root = f"gs://marin-test/{tmp_path_factory.mktemp('bucket').name}"
    mp = pytest.MonkeyPatch()
    mp.setenv("MARIN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    text = crawl_and_text("gcs", demo=SMALL_CRAWL)
    quality = quality_and_curation("gcs", text.deduplicated_text, quality={"bucket": 10_000, "epoch": 5})
    tokens = tokenizer_and_cache("gcs", quality.curated_text, tokenizer={"vocab_size": 512})
    run = train("gcs/run", tokens, model={"size": "nano", "seq_len": 32}, train=TRAIN)
    experiment = Experiment("gcs", steps=[evaluate("gcs/eval", run, batch_size=8)])
    try:
        result = materialize_experiment(experiment, root, DagsterInstance.ephemeral())
    finally:
        mp.undo()
    return root, experiment, result


def test_every_step_is_complete_on_the_bucket(on_bucket):
    root, experiment, result = on_bucket
    assert result.checks_passed and not result.reused
    store = ArtifactStore(root)
    fs, _ = fsspec.url_to_fs(root)
    for step in experiment.all_steps:
        for partition in step.partition_keys() or [None]:
            artifact = store.get(step.key, step.version, partition)
            assert artifact is not None and artifact.url.startswith(root), step.name
            for entry in artifact.manifest["files"]:  # every file the manifest lists is there
                assert fs.info(f"{artifact.url}/{entry['name']}")["size"] == entry["bytes"]
    assert not [p for p in fs.find(root) if "/." in p]  # no work folder or staging left behind
    record = json.loads(store.read_text(record_name(experiment)))
    assert {s["status"] for s in record["steps"]} == {"done"} and record["store"] == root


def test_checkpoints_are_written_and_read_on_the_bucket(on_bucket):
    root, experiment, _ = on_bucket
    store = ArtifactStore(root)
    run, evaluation = experiment.step("gcs/run"), experiment.step("gcs/eval")
    checkpoint = store.get(run.key, run.version)
    names = {entry["name"] for entry in checkpoint.manifest["files"]}
    assert {"train.json", "metrics.jsonl", "train_launch.json", "tokenizer.json"} <= names
    assert any(name.startswith("checkpoints/20/") for name in names)  # orbax's last step, on gs://
    assert checkpoint.metadata["resumed_from_step"] == 0
    scores = store.get(evaluation.key, evaluation.version).metadata
    assert scores["bits_per_byte"] > 0 and scores["loss"] > 0
    assert MANIFEST not in names
