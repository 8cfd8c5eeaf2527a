"""Steps run in this process, without Dagster: what ``process-crawl`` and ``forecast`` run (and bench/ and
the tests), while experiments in the UI run the same steps as assets.

Each step goes through the same ``build_step`` as its asset, so the same store, versions, leases and reuse:
a complete output of the step's version is reused, a missing one is built by the one holder of its lease.
Steps run after their inputs and their ``after`` edges (a preregistered forecast before its target), a
partitioned step once per partition in key order (a crawl's snapshots, a ladder's rungs), and a blocking
check that fails stops the run before anything downstream reads the output, as it does in Dagster.
Training, evaluation and sweeps go to the launcher given; by default to this process (``InProcessLauncher``),
which leaves no child behind when the run is killed and compiles each shape once for all the runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marin_pipelines.engine import Engine, LocalEngine
from marin_pipelines.steps import Launcher, Step, StepContext, build_step, topological
from marin_pipelines.store import Artifact, ArtifactStore

if TYPE_CHECKING:
    from marin_pipelines.evals.launch_config import EvalLaunch
    from marin_pipelines.sweeps.launch_config import SweepLaunch
    from marin_pipelines.train.launch_config import TrainingLaunch

Log = Callable[[str], None]


class CheckFailed(ValueError):
    """A blocking check failed on a step's output: nothing downstream of it runs."""


@dataclass
class StepRun:
    """What a run of steps found or made: each step's output (by partition key for a partitioned step), and
    which of them this run built (the others were complete already, made meanwhile by another run, or
    another step's output of the same version: an alias, even of an output this run built)."""

    outputs: dict[str, Any] = field(default_factory=dict)  # name -> Artifact, or partition -> Artifact
    built: set[tuple[str, str | None]] = field(default_factory=set)

    def output(self, step: Step) -> Artifact:
        return self.outputs[step.name]

    def partitions(self, step: Step) -> dict[str, Artifact]:
        return self.outputs[step.name]

    def was_built(self, step: Step, partition: str | None = None) -> bool:
        return (step.name, partition) in self.built


class InProcessLauncher:
    """The core's ``Launcher`` for runs without Dagster: each training run, evaluation and sweep in this
    process, exactly as a launched child runs it (``train/launched.py``, ``evals/launched.py``,
    ``sweeps/launched.py``)."""

    def __init__(self, log: Log = lambda _: None):
        self.log = log

    def train(self, launch: TrainingLaunch) -> list[Any]:
        from marin_pipelines.train.launch_config import TrainLaunch
        from marin_pipelines.train.launched import train_launched

        if not isinstance(launch, TrainLaunch):
            raise TypeError(
                f"{type(launch).__name__} runs in a launched child only (`marin-pipelines sft`, or the "
                "experiment's assets): the in-process launcher trains pretraining runs"
            )
        train_launched(launch)
        return []

    def evaluate(self, launch: EvalLaunch) -> list[Any]:
        from marin_pipelines.evals.launched import evaluate_launched, summary_message

        return [summary_message(evaluate_launched(launch, self.log))]

    def sweep(self, launch: SweepLaunch) -> list[Any]:
        from marin_pipelines.sweeps.launched import sweep_launched

        sweep_launched(launch)
        return []


def run_steps(
    steps: Iterable[Step],
    store: ArtifactStore,
    *,
    launcher: Launcher | None = None,
    engine: Engine | None = None,
    resources: dict[str, Any] | None = None,
    log: Log = lambda _: None,
    found: StepRun | None = None,
) -> StepRun:
    """Every step ``steps`` need, in order, each reused when complete or built; see the module docstring.

    ``engine`` runs the data stages' units (one process when None); ``resources`` are the stages' other
    needs (an annotator). ``found``: an earlier call's run, whose steps are taken as they are and which
    this call adds to. Raises the step's own error, or ``CheckFailed``, at the first step that fails; a
    check that only warns is told to ``log``."""
    run = found or StepRun()
    made_by = {"step_run": uuid.uuid4().hex[:12]}  # tells this run's outputs from those it found
    needs = {"launcher": launcher or InProcessLauncher(log), **(resources or {})}
    with (engine or LocalEngine(1)).session() as running:  # one pool (or connection) for every step
        for step in topological(steps):
            if step.name in run.outputs:
                continue
            keys = step.partition_keys(strict=True) if step.partitioning else [None]
            outputs = {}
            for key in keys:
                ctx = StepContext(step, store, key, needs, log, running, made_by)
                artifact = build_step(ctx, step_inputs(step, key, run.outputs))
                if artifact.same_as is None and artifact.manifest.get("made_by") == made_by:  # not an alias
                    run.built.add((step.name, key))
                check(step, key, artifact, log)
                outputs[key] = artifact
            run.outputs[step.name] = outputs if step.partitioning else outputs[None]
    return run


def step_inputs(step: Step, partition: str | None, outputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs ``build_step`` hands the stage, as the assets' IO manager loads them: an unpartitioned
    upstream's output; the same partition of an upstream of the same partition source; every partition of
    another (``Step.whole_inputs``)."""
    inputs = {}
    for name, upstream in step.inputs.items():
        found = outputs[upstream.name]
        same = upstream.partitioning is not None and name not in step.whole_inputs
        inputs[name] = found[partition] if same else found
    return inputs


def check(step: Step, partition: str | None, artifact: Artifact, log: Log) -> None:
    """The step's checks on its output: ``CheckFailed`` for a blocking one that fails, a warning in the log
    for one that only warns (a missed forecast is a result, not a broken pipeline)."""
    where = step.name + (f" [{partition}]" if partition else "")
    for name, spec in step.stage.checks.items():
        passed, metadata = spec.fn(artifact)
        if passed:
            continue
        said = f"{where}: check {name} did not pass ({spec.description}): {metadata}"
        if spec.blocking:
            raise CheckFailed(said)
        log(f"warning: {said}")
