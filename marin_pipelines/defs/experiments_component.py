"""The experiments Component: every experiment found in code becomes assets, jobs and automation.

A sweep step is two assets: its own (the summary) and its trials, a dynamic partition each
(``sweep_assets.py``).

A step shared by several experiments is one asset, tagged with each experiment that uses it. Which
experiments exist is found by ``discover_experiments``: a new module under ``marin_pipelines/experiments/``
(or a folder in ``paths`` / ``MARIN_EXPERIMENTS_PATH``) appears with no other edit.
"""

from __future__ import annotations

from dagster import (
    AutomationCondition,
    AutomationConditionSensorDefinition,
    ComponentLoadContext,
    DefaultSensorStatus,
    Definitions,
)
from dagster.components import Component, Model, Resolvable

from marin_pipelines.defs.automation import after_ladders, automation
from marin_pipelines.defs.leaderboard import leaderboard_definitions
from marin_pipelines.defs.step_assets import step_asset
from marin_pipelines.defs.sweep_assets import sweep_events, trials_asset
from marin_pipelines.experiment import Experiment, discover_experiments
from marin_pipelines.resources.launcher_env import data_run_tags, launcher_from_env
from marin_pipelines.stages.sweep import sweep
from marin_pipelines.steps import topological, unique_steps


def experiment_definitions(experiments: list[Experiment]) -> Definitions:
    """Assets (one per step), jobs, sensors and schedules of ``experiments``. Training and evaluation go
    into the pool of the accelerator that ``MARIN_LAUNCHER`` / ``MARIN_K8S_*`` select; the jobs that process
    documents get run pods of the size ``MARIN_K8S_DATA_*`` sets."""
    steps = list(unique_steps(topological(s for e in experiments for s in e.all_steps)).values())
    users = {step.name: [e for e in experiments if step in e.all_steps] for step in steps}
    automated = after_ladders(steps)
    pool = launcher_from_env().pool()
    assets = [
        step_asset(
            step,
            users[step.name],
            AutomationCondition.eager() if id(step) in automated else None,
            pool,
            events=sweep_events(step) if step.stage is sweep else None,
        )
        for step in steps
    ]
    trials = [trials_asset(step, users[step.name], pool) for step in steps if step.stage is sweep]
    parts = automation(experiments, steps, data_run_tags())
    if automated:  # the prediction, the target it predicts, its evaluation, the law: once a ladder is done
        parts["sensors"].append(
            AutomationConditionSensorDefinition(
                "after_ladders",
                target=[asset for asset, step in zip(assets, steps, strict=True) if id(step) in automated],
                default_status=DefaultSensorStatus.RUNNING,
                description="Rolls what follows a scaling ladder forward once its backfill is complete.",
            )
        )
    board = leaderboard_definitions(steps, pool)
    parts["jobs"] += board["jobs"]
    parts["sensors"] += board["sensors"]
    return Definitions(assets=[*assets, *trials, *board["assets"]], **parts)


class ExperimentsComponent(Component, Model, Resolvable):
    """Every experiment declared in code, as Dagster definitions."""

    paths: list[str] | None = None  # further folders of experiment modules, besides MARIN_EXPERIMENTS_PATH

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        return experiment_definitions(list(discover_experiments(self.paths).values()))
