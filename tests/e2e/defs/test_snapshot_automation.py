"""Crawl snapshots as partitions: the sensor, the refresh schedule, and dedup across snapshots."""

import shutil
from datetime import UTC, datetime

import pytest
from dagster import (
    DagsterInstance,
    RunRequest,
    SkipReason,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
    materialize,
)

from marin_pipelines.crawl.demo_crawl import DemoCrawlConfig, Page, _WarcWriter, build_demo_crawl
from marin_pipelines.defs.automation import REFRESH_CRON, partitioned_by, selection
from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.step_assets import snapshot_partitions
from marin_pipelines.documents import REMOVED_PREFIX, read_documents
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import TextSteps, crawl_and_text, quality_and_curation
from marin_pipelines.resources import default_resources
from marin_pipelines.store import ArtifactStore

SMALL_DEMO = {"pydoc_modules": ["json", "heapq", "bisect", "textwrap", "shlex"], "n_files": 2}


def _experiment(root) -> tuple[Experiment, TextSteps]:
    """A crawl of the user's snapshot folders, its text per snapshot, and curation over every snapshot."""
    text = crawl_and_text("snap", warc_root=str(root))
    curated = quality_and_curation("snap", text.deduplicated_text, curation={"top_fraction": 0.8})
    return Experiment("snap", steps=[curated.curated_text]), text


def _automation(experiment: Experiment):
    defs = experiment_definitions([experiment])
    (sensor,) = [s for s in defs.sensors if s.name.endswith("_new_snapshots")]
    (schedule,) = defs.schedules
    return sensor, schedule


def test_sensor_adds_new_snapshot_folders_as_partitions_and_requests_runs(tmp_path):
    build_demo_crawl(tmp_path / "CC-2024-10", DemoCrawlConfig(**SMALL_DEMO))
    experiment, text = _experiment(tmp_path)
    sensor, _ = _automation(experiment)
    assert sensor.name == "snap_crawl_new_snapshots" and sensor.job_name == "snap_crawl_snapshot"
    assert partitioned_by(experiment.all_steps, text.crawl) == list(text)  # what the snapshot job runs
    instance = DagsterInstance.ephemeral()
    result = sensor(build_sensor_context(instance=instance))
    assert [r.partition_key for r in result.run_requests] == ["CC-2024-10"]
    (request,) = result.dynamic_partitions_requests
    assert request.partitions_def_name == "snap_crawl_snapshot" and request.partition_keys == ["CC-2024-10"]
    assert request.partitions_def_name == snapshot_partitions(text.crawl).name
    instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))

    skipped = sensor(build_sensor_context(instance=instance))
    assert isinstance(skipped, SkipReason) and "no new snapshot" in skipped.skip_message

    shutil.copytree(tmp_path / "CC-2024-10", tmp_path / "CC-2024-18")
    (tmp_path / "CC-2024-22").mkdir()  # no WARC files yet: not a snapshot
    again = sensor(build_sensor_context(instance=instance))
    assert [r.partition_key for r in again.run_requests] == ["CC-2024-18"]
    assert list(again.dynamic_partitions_requests[0].partition_keys) == ["CC-2024-18"]


def test_sensor_skips_an_unreadable_crawl_root(tmp_path):
    sensor, _ = _automation(_experiment(tmp_path / "missing")[0])
    skipped = sensor(build_sensor_context(instance=DagsterInstance.ephemeral()))
    assert isinstance(skipped, SkipReason) and "missing" in skipped.skip_message


def test_refresh_schedule_runs_the_pipeline_once_there_are_snapshots(tmp_path):
    experiment, text = _experiment(tmp_path)
    _, schedule = _automation(experiment)
    assert schedule.name == "snap_refresh"
    assert schedule.cron_schedule == REFRESH_CRON and schedule.job_name == "snap_pipeline"
    with instance_for_test() as instance:  # a schedule's context needs an instance with a reference
        skipped = schedule.evaluate_tick(build_schedule_context(instance=instance))
        assert not skipped.run_requests and "no crawl snapshot" in skipped.skip_message
        instance.add_dynamic_partitions(snapshot_partitions(text.crawl).name, ["CC-2024-10"])
        (request,) = schedule.evaluate_tick(build_schedule_context(instance=instance)).run_requests
    assert isinstance(request, RunRequest)


def _near_copy_warc(path, docs: list[dict]) -> list[str]:
    """Pages of an earlier snapshot served again at new URLs with a sentence added, as mirrors do."""
    note = "<p>Mirror number {}: this page was copied from the original documentation site.</p></body>"
    pages = []
    for n, doc in enumerate(docs):
        assert b"</body>" in doc["html"]
        pages.append(
            Page(
                "near",
                f"https://elsewhere.example/{n}",
                doc["html"].replace(b"</body>", note.format(n).encode()),
            )
        )
    writer = _WarcWriter(path.name, 0, datetime(2024, 5, 1, tzinfo=UTC))
    path.write_bytes(writer.warcinfo() + b"".join(writer.response(page) for page in pages))
    return [page.url for page in pages]


def test_a_later_snapshot_loses_the_documents_an_earlier_one_had(tmp_path):
    """Snapshot 2 repeats a WARC file of snapshot 1 (exact) and re-serves some pages with an edit (near)."""
    root, store_root = tmp_path / "crawl", str(tmp_path / "store")
    build_demo_crawl(root / "s1", DemoCrawlConfig(**SMALL_DEMO))
    _, text = _experiment(root)
    instance = DagsterInstance.ephemeral()
    store, resources = ArtifactStore(store_root), default_resources(store_root)

    def run(snapshot: str) -> None:
        # Each Dagster run loads the code anew (its run worker), so its steps read the crawl root then.
        experiment, steps = _experiment(root)
        assert [s.version for s in steps] == [s.version for s in text]  # a new snapshot recomputes none
        assert steps.deduplicated_text.snapshots == text.crawl.config.snapshots()
        instance.add_dynamic_partitions(snapshot_partitions(steps.crawl).name, [snapshot])
        result = materialize(
            experiment_definitions([experiment]).assets,
            selection=selection(steps),
            partition_key=snapshot,
            instance=instance,
            resources=resources,
        )
        assert result.success and all(c.passed for c in result.get_asset_check_evaluations())

    def output(stage: str, snapshot: str):
        step = getattr(text, stage)
        return store.get(step.key, step.version, snapshot)

    run("s1")
    kept_s1 = list(read_documents(output("deduplicated_text", "s1").path, columns=["url"]))
    web_s1 = {doc["url"]: doc for doc in read_documents(output("web_documents", "s1").path)}
    prose = [web_s1[doc["url"]] for doc in kept_s1 if "/reference/" in doc["url"]][:4]
    assert len(prose) == 4
    (root / "s2").mkdir()
    first_file = sorted((root / "s1").glob("*.warc.gz"))[0]
    shutil.copy(first_file, root / "s2" / first_file.name)
    near_urls = _near_copy_warc(root / "s2" / "near.warc.gz", prose)
    assert text.crawl.config.snapshots() == ["s1", "s2"]
    run("s2")

    dedup = output("deduplicated_text", "s2")
    funnel = dedup.metadata["funnel"]
    assert funnel["docs_in"] == funnel["docs_out"] + sum(funnel["removed"].values())
    assert dedup.metadata["earlier_snapshots"] == 1
    removed = {doc["url"]: doc for doc in read_documents(dedup.path, prefix=REMOVED_PREFIX)}
    for url in near_urls:
        assert removed[url]["reason"] == "near_duplicate", url
        assert "earlier snapshot" in removed[url]["detail"]
    repeated = {doc["url"] for doc in read_documents(output("filtered_text", "s2").path, columns=["url"])}
    repeated -= set(near_urls)
    assert repeated and all(
        removed[url]["reason"] in ("exact_duplicate", "near_duplicate") for url in repeated
    )
    assert funnel["docs_out"] == 0  # everything in s2 was already in s1
    for stage in ("web_documents", "extracted_text", "filtered_text", "deduplicated_text"):
        for snapshot in ("s1", "s2"):
            f = output(stage, snapshot).metadata["funnel"]
            assert f["docs_in"] == f["docs_out"] + sum(f["removed"].values()), (stage, snapshot)
    assert output("deduplicated_text", "s1").metadata["funnel"]["docs_out"] == len(kept_s1)


def test_dedup_of_a_snapshot_before_its_predecessor_is_a_clear_error(tmp_path):
    root = tmp_path / "crawl"
    build_demo_crawl(root / "a", DemoCrawlConfig(**SMALL_DEMO))
    shutil.copytree(root / "a", root / "b")
    experiment, text = _experiment(root)
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(snapshot_partitions(text.crawl).name, ["a", "b"])
    with pytest.raises(Exception, match="process the snapshots in order"):
        materialize(
            experiment_definitions([experiment]).assets,
            selection=selection(text),
            partition_key="b",
            instance=instance,
            resources=default_resources(str(tmp_path / "store")),
        )
