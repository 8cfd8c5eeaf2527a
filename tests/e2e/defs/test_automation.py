"""Declarative automation: once a ladder's backfill is complete, its prediction and the target run it
predicts are requested (together: in one run, the graph's edge orders the prediction first), never the
target while the ladder is incomplete; the chain goes on as each step lands."""

from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    Definitions,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    evaluate_automation_conditions,
)

from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.step_assets import ladder_grid
from marin_pipelines.experiments import demo
from marin_pipelines.resources import default_resources


def requested(defs: Definitions, instance: DagsterInstance, cursor=None) -> tuple[set[str], object]:
    """The step names the automation would materialise now, and the cursor for the next evaluation."""
    result = evaluate_automation_conditions(defs, instance, cursor=cursor)
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    return {key.to_user_string() for key in keys if result.get_num_requested(key)}, result.cursor


def materialized(instance: DagsterInstance, step, partitions=(None,)) -> None:
    for partition in partitions:
        instance.report_runless_asset_event(AssetMaterialization(AssetKey(step.key), partition=partition))


def test_the_chain_after_a_ladder_rolls_forward_in_order():
    defs = Definitions.merge(experiment_definitions([demo.demo]), Definitions(resources=default_resources()))
    assert "after_ladders" in {s.name for s in defs.sensors}
    instance = DagsterInstance.ephemeral()
    rungs = defs.resolve_asset_graph().get(AssetKey(demo.ladder.evaluations.key)).partitions_def
    assert isinstance(rungs, MultiPartitionsDefinition)  # the UI's budget x size matrix
    dimensions = {d.name: d.partitions_def.get_partition_keys() for d in rungs.partitions_defs}
    assert dimensions == {"budget": ["1e11", "2e11", "4e11"], "size": ["size1", "size2", "size3", "size4"]}
    keys = rungs.get_partition_keys()
    assert sorted(keys) == sorted(demo.ladder.checkpoints.partition_keys())
    materialized(instance, demo.tokens.cache)
    materialized(instance, demo.code_tokens.cache)  # the mixture's other cache
    materialized(instance, demo.ladder.evaluations, keys[:-1])  # the backfill is not complete yet

    asked, cursor = requested(defs, instance)
    assert demo.target.prediction.name not in asked and demo.target.checkpoint.name not in asked

    materialized(instance, demo.ladder.evaluations, keys[-1:])
    asked, cursor = requested(defs, instance, cursor)
    assert {demo.target.prediction.name, demo.target.checkpoint.name} <= asked

    materialized(instance, demo.target.prediction)
    materialized(instance, demo.target.checkpoint)
    materialized(instance, demo.tokens.tokenizer)
    asked, cursor = requested(defs, instance, cursor)
    assert demo.target.evaluation.name in asked and demo.target.scaling_law.name in asked
    assert demo.target.checkpoint.name not in asked  # done: not asked again


def test_a_ladder_whose_budgets_sweep_different_numbers_of_sizes_is_a_flat_list():
    ragged = ["1e10|size1", "1e10|size2", "1e10|size3", "2e10|size1", "2e10|size2"]
    assert isinstance(ladder_grid(ragged), StaticPartitionsDefinition)
    assert ladder_grid(ragged).get_partition_keys() == ragged
