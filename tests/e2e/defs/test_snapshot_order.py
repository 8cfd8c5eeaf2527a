"""Snapshot order whoever starts the run: the crawl's pool is on the steps, not on a sensor's run tags.

Runs are created as the UI creates them (the snapshot job, or a bare asset selection as an asset backfill
makes, with no tags) in an instance whose pools apply per run with a default limit of 1, as deploy/ sets
it; Dagster's own queue counter then decides what the run queue may start.
"""

from dagster import Definitions, instance_for_test
from dagster._core.instance.config import PoolGranularity
from dagster._core.op_concurrency_limits_counter import GlobalOpConcurrencyLimitsCounter

from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.step_assets import asset_key, crawl_pool, snapshot_partitions
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    crawl_and_text,
    quality_and_curation,
    tokenizer_and_cache,
    train,
)
from marin_pipelines.resources import default_resources

POOLS = {"concurrency": {"pools": {"granularity": "run", "default_limit": 1}}}


def _experiment(root):
    text = crawl_and_text("order", warc_root=str(root))
    curated = quality_and_curation("order", text.deduplicated_text)
    tokens = tokenizer_and_cache("order", curated.curated_text)
    return Experiment("order", steps=[train("order/run", tokens)]), text, curated


def test_every_step_over_a_crawls_snapshots_is_in_its_pool(tmp_path):
    experiment, text, curated = _experiment(tmp_path)
    defs = Definitions.merge(
        experiment_definitions([experiment]), Definitions(resources=default_resources(str(tmp_path)))
    )
    graph = defs.resolve_asset_graph()
    pool = crawl_pool(text.crawl)
    for step in [*text, curated.quality_scores, curated.curated_text]:
        assert graph.get(asset_key(step)).pools == {pool}, step.name
    assert graph.get(asset_key(experiment.step("order/run"))).pools != {pool}


def test_the_queue_starts_snapshot_runs_one_at_a_time_in_order_whoever_made_them(tmp_path):
    experiment, text, _ = _experiment(tmp_path)
    defs = Definitions.merge(
        experiment_definitions([experiment]), Definitions(resources=default_resources(str(tmp_path)))
    )
    snapshot_job = defs.resolve_job_def("order_crawl_snapshot")
    backfill_job = defs.resolve_implicit_global_asset_job_def()
    with instance_for_test(overrides=POOLS) as instance:
        instance.add_dynamic_partitions(snapshot_partitions(text.crawl).name, ["CC-1", "CC-2", "CC-3"])
        by_job = instance.create_run_for_job(snapshot_job, tags={"dagster/partition": "CC-1"})
        selection = [asset_key(step) for step in text]
        by_backfill = instance.create_run_for_job(  # no tags at all: what an asset backfill's run carries
            backfill_job.get_subset(asset_selection=set(selection)), asset_selection=frozenset(selection)
        )
        later = instance.create_run_for_job(snapshot_job, tags={"dagster/partition": "CC-3"})
        queued = [by_job, by_backfill, later]
        for run in queued:
            assert crawl_pool(text.crawl) in run.run_op_concurrency.all_pools
        # what the queue daemon does when it first meets a pool: give it the default limit
        instance.event_log_storage.initialize_concurrency_limit_to_default(crawl_pool(text.crawl))

        def startable(runs):
            """What the queue starts from ``runs`` in order, none in progress: Dagster's own counter."""
            keys = instance.event_log_storage.get_concurrency_keys()
            limits = instance.event_log_storage.get_pool_limits()
            counter = GlobalOpConcurrencyLimitsCounter(
                instance, runs, [], keys, limits, pool_granularity=PoolGranularity.RUN
            )
            started = []
            for run in runs:
                if not counter.is_blocked(run):
                    counter.update_counters_with_launched_item(run)
                    started.append(run)
            return started

        assert startable(queued) == [by_job]  # the first queued; the others wait for its slot
        assert startable(queued[1:]) == [by_backfill]  # once it is done, the next in line
        assert startable(queued[2:]) == [later]
