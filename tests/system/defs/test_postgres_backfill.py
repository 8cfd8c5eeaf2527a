"""The production instance on a real Postgres: a scaling ladder backfilled through the run queue.

A real Postgres server (``postgres_server`` in tests/defs/conftest.py: pgserver's wheel, a dev
dependency) holds the run, event-log and schedule storage, configured as deploy/helm/values.yaml configures
Cloud SQL (the same ``postgres_db`` block, driver scheme included), with the production run queue: the
QueuedRunCoordinator and pools per run with a default limit of 1. Only the run launcher (the default: a
process per run) and the compute logs (local) are this machine's.

The ladder's upstream (crawl to token cache) is materialised in this process. The ladder job's backfill is
then launched as the UI launches it (the ``launchPartitionBackfill`` GraphQL mutation, on a workspace
loaded from a workspace.yaml) for the first budget's three rungs, ``dagster instance concurrency set``
raises the ``accelerator/cpu`` pool to 2 as the README tells an operator, and ``dagster-daemon run`` does
the rest: the backfill daemon submits one run per rung, the queue starts them as the pool allows (two, then
the third), and each run trains and evaluates its rung in launched children. The code location, its runs
and this test find the experiment through ``MARIN_EXPERIMENTS_PATH`` and the store through
``MARIN_STORE_ROOT``.

Afterwards: every run succeeded, never more than two at once, and the event log in Postgres and the store
agree: each output materialised once, at the version the store holds, by the run its manifest names, and
no incomplete or temporary folder is left; the execution record has the three rungs done, the others to
run. (Three rungs of one budget hold everything the other six would: the 9-rung ladder took 6 minutes.)
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.storage.tags import BACKFILL_ID_TAG, PARTITION_NAME_TAG
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster_graphql.test.utils import execute_dagster_graphql
from sqlalchemy.engine import make_url
from tiny_ladder import TINY_LADDER

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.defs.step_assets import slug
from marin_pipelines.execution_record import record_name
from marin_pipelines.experiment import PATH_VARIABLE, discover_experiments
from marin_pipelines.resources.launcher_env import launcher_from_env
from marin_pipelines.store import MANIFEST, ArtifactStore

VALUES = Path(__file__).parents[3] / "deploy" / "helm" / "values.yaml"
BIN = Path(sys.executable).parent
LOCATION = "marin_pipelines"
POOL_LIMIT = 2
TIMEOUT_SECONDS = 600  # all 9 runs took 6 minutes on 2 cores kept busy by a benchmark beside them
# the tests' tiny IsoFLOP ladder: 9 rungs of seconds each
EXPERIMENT = (
    """
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    crawl_and_text,
    isoflop_ladder,
    quality_and_curation,
    tokenizer_and_cache,
)

text = crawl_and_text(
    "pgladder", demo={"pydoc_modules": ["json", "heapq", "bisect", "textwrap", "shlex"], "n_files": 2}
)
quality = quality_and_curation("pgladder", text.deduplicated_text, quality={"bucket": 10_000, "epoch": 5})
tokens = tokenizer_and_cache("pgladder", quality.curated_text, tokenizer={"vocab_size": 512})
"""
    + f"LADDER = {TINY_LADDER!r}\n"
    + """
ladder = isoflop_ladder("pgladder", tokens, ladder=LADDER, train={"log_every": 50}, batch_size=8)
pgladder = Experiment("pgladder", steps=[ladder.evaluations])
"""
)
LAUNCH_BACKFILL = """
mutation ($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on PartitionSetNotFoundError { message }
  }
}
"""


def snake(section: dict) -> dict:
    """The chart's values keys as the instance's: maxConcurrentRuns -> max_concurrent_runs."""
    return {
        "".join(f"_{c.lower()}" if c.isupper() else c for c in key): value for key, value in section.items()
    }


def production_instance(database_url: str, home: Path) -> dict:
    """deploy/helm/values.yaml's instance on this machine: its storage block pointed at ``database_url``
    (a unix socket, given as libpq's ``host`` parameter), its run queue and pools; the default run
    launcher and local compute logs instead of Kubernetes and the bucket."""
    values = yaml.safe_load(VALUES.read_text())
    pg, server = values["postgresql"], make_url(database_url)
    postgres_db = {
        "username": server.username,
        "password": server.password or "",
        "hostname": server.host or "",
        "db_name": server.database,
        "port": server.port or pg["service"]["port"],
        "params": {**pg["postgresqlParams"], **server.query},
        "scheme": pg["postgresqlScheme"],
    }
    queued = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    return {
        "storage": {"postgres": {"postgres_db": postgres_db}},
        "run_coordinator": {
            "module": "dagster._core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {**snake(queued), "dequeue_interval_seconds": 1},  # seconds count here
        },
        "concurrency": {key: snake(values["concurrency"][key]) for key in ("pools", "runs")},
        "local_artifact_storage": {
            "module": "dagster._core.storage.root",
            "class": "LocalArtifactStorage",
            "config": {"base_dir": str(home / "storage")},
        },
        "compute_logs": {
            "module": "dagster._core.storage.local_compute_log_manager",
            "class": "LocalComputeLogManager",
            "config": {"base_dir": str(home / "logs")},
        },
        "telemetry": {"enabled": False},
    }


def most_at_once(records) -> int:
    """The most runs started and not yet ended at one moment (an end before a start at a tie)."""
    moments = sorted([(r.start_time, 1) for r in records] + [(r.end_time, -1) for r in records])
    running = most = 0
    for _, change in moments:
        running += change
        most = max(most, running)
    return most


def stop(daemon: subprocess.Popen) -> None:
    """End the daemon and what it started (its code server, their runs): its own process group."""
    if daemon.poll() is None:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=10)


def launch_backfill(instance: DagsterInstance, workspace: Path, job: str, partitions: list[str]) -> str:
    """The ``partitions`` of ``job``, as the UI's "Launch backfill" asks for them; the backfill's id."""
    params = {
        "selector": {
            "repositorySelector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"},
            "partitionSetName": f"{job}_partition_set",
        },
        "partitionNames": partitions,
    }
    with WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(workspace)])) as context:
        result = execute_dagster_graphql(
            context.create_request_context(), LAUNCH_BACKFILL, {"backfillParams": params}
        )
    launched = result.data["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"]


@pytest.fixture(scope="module")
def backfill(tmp_path_factory, postgres_server):
    started = time.monotonic()
    tmp = tmp_path_factory.mktemp("pg_backfill")
    home, folder, store_root = tmp / "dagster_home", tmp / "experiments", tmp / "store"
    for path in (home, folder, store_root):
        path.mkdir()
    (folder / "pgladder.py").write_text(EXPERIMENT)
    url = postgres_server.database("ladder_backfill")
    (home / "dagster.yaml").write_text(yaml.safe_dump(production_instance(url, home)))
    workspace = home / "workspace.yaml"
    location = {"module_name": "marin_pipelines.definitions", "location_name": LOCATION}
    workspace.write_text(yaml.safe_dump({"load_from": [{"python_module": location}]}))
    env = {
        "DAGSTER_HOME": str(home),
        PATH_VARIABLE: str(folder),
        "MARIN_STORE_ROOT": str(store_root),
        "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
    }
    mp = pytest.MonkeyPatch()
    for name, value in env.items():  # this process's code server (the backfill's workspace) reads them too
        mp.setenv(name, value)
    daemon = instance = None
    try:
        instance = DagsterInstance.get()  # DAGSTER_HOME's: Postgres (its tables are made here)
        experiment = discover_experiments([str(folder)])["pgladder"]
        ladder = [s for s in experiment.all_steps if s.partitioning == "ladder"]
        pool = launcher_from_env().pool()
        subprocess.run(  # as an operator raises an accelerator pool (README, "On GKE")
            [str(BIN / "dagster"), "instance", "concurrency", "set", pool, str(POOL_LIMIT)],
            check=True,
            capture_output=True,
        )
        upstream_started = time.monotonic()
        upstream = materialize_experiment(
            experiment, str(store_root), instance, through=ladder[0].inputs["tokenized_cache"].name
        )
        upstream_seconds = time.monotonic() - upstream_started
        first_budget = ladder[0].partition_keys()[0].split("|")[0]
        rungs = [key for key in ladder[0].partition_keys() if key.startswith(f"{first_budget}|")]
        job = f"{slug(ladder[0].partition_source)}_runs"
        backfill_id = launch_backfill(instance, workspace, job, rungs)
        # the daemon after the backfill exists: its backfill loop looks at once, then every 30 s
        with open(tmp / "daemon.log", "w") as log:
            daemon_started = time.time()
            daemon = subprocess.Popen(
                [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
                cwd=home,  # the launcher's JAX compilation cache goes under .marin/ here
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            runs = RunsFilter(tags={BACKFILL_ID_TAG: backfill_id})
            deadline = time.monotonic() + TIMEOUT_SECONDS
            while time.monotonic() < deadline and daemon.poll() is None:
                records = instance.get_run_records(runs)
                if len(records) >= len(rungs) and all(r.dagster_run.is_finished for r in records):
                    break
                time.sleep(2)
            stop(daemon)
        records = instance.get_run_records(runs)
        if records and all(r.start_time and r.end_time for r in records):
            first, last = min(r.start_time for r in records), max(r.end_time for r in records)
            times = ", ".join(f"{r.start_time - first:.0f}-{r.end_time - first:.0f} s" for r in records)
            print(
                f"\nupstream in process {upstream_seconds:.0f} s; daemon start to first run "
                f"{first - daemon_started:.0f} s; runs {times}, {last - first:.0f} s in all; "
                f"{time.monotonic() - started:.0f} s from the start"
            )
        yield {
            "instance": instance,
            "experiment": experiment,
            "ladder": ladder,
            "rungs": rungs,
            "store": ArtifactStore(store_root),
            "records": records,
            "upstream": upstream,
            "daemon_log": (tmp / "daemon.log").read_text(),
        }
    finally:
        if daemon is not None:
            stop(daemon)
        if instance is not None:
            instance.dispose()  # its connections, before the server stops
        mp.undo()


def partitions_made(step, rungs: list[str]) -> list[str | None]:
    """The partitions of ``step`` the test made: the backfilled rungs of the ladder, every snapshot."""
    if step.partitioning == "ladder":
        return rungs
    return step.partition_keys() if step.partitioning else [None]


def test_every_rung_runs_once_and_succeeds_two_at_once(backfill):
    records, rungs = backfill["records"], backfill["rungs"]
    log = backfill["daemon_log"][-5000:]
    assert len(rungs) == 3 and len({key.split("|")[0] for key in rungs}) == 1
    assert sorted(r.dagster_run.tags[PARTITION_NAME_TAG] for r in records) == sorted(rungs), log
    assert all(r.dagster_run.status == DagsterRunStatus.SUCCESS for r in records), log
    assert most_at_once(records) == POOL_LIMIT


def test_the_event_log_and_the_store_agree(backfill):
    instance, store, experiment = backfill["instance"], backfill["store"], backfill["experiment"]
    backfill_runs = {r.dagster_run.run_id for r in backfill["records"]}
    upstream_runs = set(backfill["upstream"].run_ids)
    for step in experiment.all_steps:
        events = instance.fetch_materializations(AssetKey(step.key), limit=1000).records
        partitions = [e.partition_key for e in events]
        expected = partitions_made(step, backfill["rungs"])
        assert sorted(partitions, key=str) == sorted(expected, key=str), f"{step.name}: once each"
        for event in events:
            assert event.run_id in (backfill_runs if step in backfill["ladder"] else upstream_runs)
            artifact = store.get(step.key, step.version, event.partition_key)
            assert artifact is not None, f"{step.name} {event.partition_key}: no complete output"
            metadata = event.asset_materialization.metadata
            assert metadata["version"].value == artifact.version == step.version
            assert metadata["reused"].value is False
            assert artifact.manifest["made_by"]["dagster_run_id"] == event.run_id
    for run_id in backfill_runs:  # each run's own events: its rung trained and evaluated, nothing else
        materialized = instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
        assert sorted(e.dagster_event.asset_key.to_user_string() for e in materialized) == sorted(
            s.name for s in backfill["ladder"]
        )


def test_every_output_is_complete_and_nothing_is_left_half_written(backfill):
    store, experiment, rungs = backfill["store"], backfill["experiment"], backfill["rungs"]
    root = Path(store.root)
    assert not [p for p in root.rglob(".*") if ".tmp-" in p.name or p.name.endswith(".work")]
    for step in experiment.all_steps:
        for partition in partitions_made(step, rungs):
            folder = Path(store.url(step.key, step.version, partition)).parent
            assert [p.name for p in folder.iterdir()] == [step.version]
            assert (folder / step.version / MANIFEST).is_file()
    record = json.loads(store.read_text(record_name(experiment)))
    statuses = {s["name"]: (s["status"], s.get("partitions")) for s in record["steps"]}
    for step in experiment.all_steps:
        if step.partitioning == "ladder":  # the backfilled rungs done, the rest of the ladder still to run
            every = {key: "done" if key in rungs else "to_run" for key in step.partition_keys()}
            assert statuses[step.name] == ("to_run", every) and len(every) == 9
        else:
            assert statuses[step.name][0] == "done", step.name
