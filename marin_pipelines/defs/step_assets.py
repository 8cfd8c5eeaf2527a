"""One Dagster asset per step: its key is the step's name, its code version the step's version.

The asset only binds the run to the core: it hands the step's inputs (complete artifacts, found by
version through the IO manager) to ``build_step``, which reuses a complete output of the same version or
builds it atomically. Then the output's metadata, the step's checks, and the execution records of the
experiments that use the step.
"""

import base64
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from dagster import (
    AllPartitionMapping,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    AutomationCondition,
    Backoff,
    DynamicPartitionsDefinition,
    Failure,
    Jitter,
    MetadataValue,
    MultiPartitionsDefinition,
    Output,
    PartitionsDefinition,
    RetryPolicy,
    StaticPartitionsDefinition,
    asset,
)

from marin_pipelines.documents import Funnel
from marin_pipelines.engine import LocalEngine
from marin_pipelines.evals.launch_config import EvalLaunch
from marin_pipelines.execution_record import write_record
from marin_pipelines.experiment import Experiment
from marin_pipelines.resources.store import VERSION_KEY, WHOLE_INPUT
from marin_pipelines.steps import InputError, Step, StepContext, build_step
from marin_pipelines.store import Artifact
from marin_pipelines.sweeps.launch_config import SweepLaunch
from marin_pipelines.train.launch_config import TrainingLaunch

if TYPE_CHECKING:  # the launchers bring the Kubernetes client: imported where a step runs, not here
    from marin_pipelines.resources.launcher import LauncherResource

log = logging.getLogger(__name__)
EXPERIMENT_TAG = "marin/experiment.{}"  # one tag per experiment that uses the step


def asset_key(step: Step) -> AssetKey:
    return AssetKey(step.key)


def slug(step: Step) -> str:
    """The step's name as Dagster names jobs, sensors and partition sets: ``demo/crawl`` -> ``demo_crawl``."""
    return step.name.replace("/", "_")


def snapshot_partitions(crawl: Step) -> DynamicPartitionsDefinition:
    """The snapshots of one crawl step, shared by every per-snapshot step downstream of it."""
    return DynamicPartitionsDefinition(name=f"{slug(crawl)}_snapshot")


def partitions(step: Step) -> PartitionsDefinition | None:
    source = step.partition_source
    if source is None:
        return None
    if step.partitioning == "snapshot":
        return snapshot_partitions(source)
    return ladder_grid(step.partition_keys())


def ladder_grid(keys: list[str]) -> PartitionsDefinition:
    """A ladder's rungs (``budget|size<rank>``) as two dimensions, budget and size: the UI lists each (two
    lists side by side; a drop-down each in the backfill dialog), so a backfill selects a budget's row or a
    size's column. A ladder whose budgets do not all sweep the same number of sizes (the
    recipe refused or merged a point) is no full grid: a flat list of the same keys."""
    if not keys:
        return StaticPartitionsDefinition([])
    budgets, sizes = (
        list(dict.fromkeys(values)) for values in zip(*(k.split("|") for k in keys), strict=True)
    )
    if len(keys) != len(budgets) * len(sizes):
        return StaticPartitionsDefinition(keys)
    return MultiPartitionsDefinition(
        {"budget": StaticPartitionsDefinition(budgets), "size": StaticPartitionsDefinition(sizes)}
    )


def asset_in(step: Step, name: str) -> AssetIn:
    """An input of ``step``'s asset; one of another partition source (``Step.whole_inputs``) of a partitioned
    step maps to every partition of its upstream, and is loaded so."""
    upstream = step.inputs[name]
    if step.partitioning is None or name not in step.whole_inputs:
        return AssetIn(key=asset_key(upstream))
    return AssetIn(
        key=asset_key(upstream), partition_mapping=AllPartitionMapping(), metadata={WHOLE_INPUT: True}
    )


def crawl_pool(crawl: Step) -> str:
    """The concurrency pool of everything that reads a crawl's snapshots.

    Limited to 1 with ``granularity: run`` (deploy/), the run queue starts the runs that touch a crawl one
    at a time in the order they were queued, whoever queued them: the sensor, the job, a backfill from the
    UI. Cross-snapshot dedup needs every earlier snapshot done first.
    """
    return f"crawl/{slug(crawl)}"


def step_pool(step: Step, launcher_pool: str | None) -> str | None:
    """A per-snapshot step, or a step over all snapshots: its crawl's pool; training and evaluation: the
    pool of the launcher's accelerator (a backfill never asks for more chips than the cluster has)."""
    if step.partitioning == "snapshot":
        return crawl_pool(step.partition_source)  # type: ignore[arg-type]
    if step.reads_snapshots:
        crawls = [s.partition_source for s in step.inputs.values() if s.partitioning == "snapshot"]
        return crawl_pool(crawls[0])  # type: ignore[arg-type]
    if "launcher" in step.stage.needs:
        return launcher_pool
    return None


class BoundLauncher:
    """The launcher resource bound to this run's context: the core's ``Launcher``."""

    def __init__(self, resource: "LauncherResource", context: AssetExecutionContext):
        self.resource, self.context = resource, context

    def train(self, launch: TrainingLaunch) -> list[Any]:
        return self.resource.train(self.context, launch)

    def evaluate(self, launch: EvalLaunch) -> list[Any]:
        return self.resource.evaluate(self.context, launch)

    def sweep(self, launch: SweepLaunch) -> list[Any]:
        return self.resource.sweep(self.context, launch)


def launch_retry_policy() -> RetryPolicy:
    """Training and evaluation run in pods that get preempted and nodes that get lost: each retry resumes
    from the last checkpoint in the step's work folder. ``MARIN_RETRIES`` and ``MARIN_RETRY_DELAY_SECONDS``
    (doubled per retry) tune it."""
    return RetryPolicy(
        max_retries=int(os.environ.get("MARIN_RETRIES", "3")),
        delay=float(os.environ.get("MARIN_RETRY_DELAY_SECONDS", "60")),
        backoff=Backoff.EXPONENTIAL,
        jitter=Jitter.PLUS_MINUS,
    )


def step_asset(
    step: Step,
    users: list[Experiment],
    automation: AutomationCondition | None = None,
    launcher_pool: str | None = None,
    per_partition: tuple[PartitionsDefinition, Callable[[str, str], Step]] | None = None,
    events: Callable[[AssetExecutionContext], Callable[[str, dict[str, Any]], None]] | None = None,
) -> AssetsDefinition:
    """The asset of ``step``; ``users`` are the experiments that declare it (tags, execution records);
    ``launcher_pool`` the concurrency pool of the accelerator that training and evaluation run on.
    ``per_partition``: partitions that each are a step of their own, ``(partitions, (key, store root) ->
    step)``, as the standard evaluation of each run in the store; ``step`` is then any one of them.
    ``events(context)``: what hears the stage's events as it runs (``StepContext.events``), and then
    ``("built", {"artifact", "reused"})`` (a sweep's trials: ``sweep_assets.py``)."""
    key = asset_key(step)
    stage = step.stage

    @asset(
        key=key,
        group_name=step.key[0],
        description=f"{stage.description}\n\nDeclared at {step.declared_at}.",
        code_version=None if per_partition else step.version,
        metadata={"stage": stage.name, "declared_at": step.declared_at}
        if per_partition
        else {VERSION_KEY: step.version, "stage": stage.name, "declared_at": step.declared_at},
        ins={name: asset_in(step, name) for name in step.inputs},
        deps=[asset_key(before) for before in step.after],
        partitions_def=per_partition[0] if per_partition else partitions(step),
        required_resource_keys={"store", *stage.needs},
        kinds=set(stage.kinds) or None,
        tags={EXPERIMENT_TAG.format(e.name): "" for e in users},
        automation_condition=automation,
        retry_policy=launch_retry_policy() if "launcher" in stage.needs else None,
        pool=step_pool(step, launcher_pool),
        check_specs=[
            AssetCheckSpec(name, asset=key, description=check.description, blocking=check.blocking)
            for name, check in stage.checks.items()
        ],
    )
    def compute(context: AssetExecutionContext, **inputs: Any) -> Iterator[Any]:
        from marin_pipelines.resources.engine import engine_of  # dagster-ray: only where a step runs

        store = context.resources.store.store()
        partition = context.partition_key if context.has_partition_key else None
        built = per_partition[1](partition, store.root) if per_partition and partition else step
        resources = {name: getattr(context.resources, name) for name in stage.needs}
        if "launcher" in resources:
            resources["launcher"] = BoundLauncher(resources["launcher"], context)
        engine = engine_of(resources.pop("engine")) if "engine" in resources else LocalEngine()

        def say(message: str) -> None:  # to the run's event log (UI) and the terminal of `make demo`
            context.log.info(message)
            log.info(message)

        made_by = {"dagster_run_id": context.run.run_id}
        ctx = StepContext(built, store, partition, resources, say, engine, made_by=made_by)
        if events is not None:
            ctx.events = events(context)
        try:
            artifact = build_step(ctx, inputs)
        except InputError as e:  # no retry can help (the retry policy is for preempted pods)
            raise Failure(description=str(e), allow_retries=False) from e
        # made earlier, by another run meanwhile, or under another step name (an alias, even in this run)
        reused = artifact.same_as is not None or artifact.manifest["made_by"] != ctx.made_by
        ctx.events("built", {"artifact": artifact, "reused": reused})
        yield Output(
            artifact, metadata=dagster_metadata(artifact, reused, step.stage.headline, step.stage.labels)
        )
        for name, check in stage.checks.items():
            passed, metadata = check.fn(artifact)
            severity = AssetCheckSeverity.ERROR if check.blocking else AssetCheckSeverity.WARN
            yield AssetCheckResult(
                asset_key=key, check_name=name, passed=passed, metadata=metadata, severity=severity
            )
        for experiment in users:
            write_record(store, experiment)

    return compute


def dagster_metadata(
    artifact: Artifact,
    reused: bool,
    headline: tuple[str, ...] = (),
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Manifest -> UI metadata, which Dagster shows in insertion order. First what a reader looks for: the
    stage's ``headline`` entries and the funnel, then what is read rather than scanned (tables, verdicts,
    pictures) in the stage's order, then the other figures, then the large JSON blocks (a run's mesh and
    layouts), then where the output is and its size; for an alias, ``same_as`` names the step whose output
    it is (the path is that output's). Numbers are rounded for reading (``readable``): the manifest keeps
    every digit. ``labels``: the names some keys are shown under (the stage's), e.g. ``params`` as
    "params, total with embeddings"."""
    files = artifact.manifest["files"]
    read: dict[str, Any] = {}  # markdown and pictures
    figures: dict[str, Any] = {}
    blocks: dict[str, Any] = {}
    for name, value in artifact.metadata.items():
        if name == "funnel":
            read.update(funnel_metadata(Funnel.from_dict(value)))
        elif name == "plots":
            read.update({title: png_markdown(artifact, title, file) for title, file in value.items()})
        elif name == "markdown":
            read.update({title: MetadataValue.md(text) for title, text in value.items()})
        elif isinstance(value, bool | int | float | str):
            figures[name] = readable(value, name)  # a number: plotted over time
        else:
            blocks[name] = MetadataValue.json(readable(value, name))
    out = {**read, **figures, **blocks}
    first = [key for key in (*headline, *FUNNEL_ENTRIES) if key in out]
    shown = {**{key: out[key] for key in first}, **out}
    labels = labels or {}
    return {
        **{labels.get(key, key): value for key, value in shown.items()},
        "path": MetadataValue.path(artifact.url),
        "version": artifact.version,
        "reused": reused,
        **({"same_as": artifact.same_as} if artifact.same_as else {}),
        "files": len(files),
        "bytes": sum(f["bytes"] for f in files),
        "wall_seconds": round(artifact.manifest["wall_seconds"], 1),
    }


def readable(value: Any, name: str = "") -> Any:
    """``value`` as people read it, at any depth: a float to 4 significant digits (a loss needs no more), a
    FLOPs count (a name holding ``flops``, or a ladder's ``budget``) to 3, e.g. 1.23e+17; the rest as is."""
    if isinstance(value, dict):
        return {key: readable(item, str(key)) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [readable(item, name) for item in value]
    flops = "flops" in name.lower() or name.lower().startswith("budget")
    if isinstance(value, float) or (flops and isinstance(value, int) and not isinstance(value, bool)):
        return float(f"{value:.{3 if flops else 4}g}")
    return value


FUNNEL_ENTRIES = ("docs_out", "docs_in", "docs_removed", "funnel")


def funnel_metadata(funnel: Funnel) -> dict[str, Any]:
    rows = [("in", funnel.docs_in), ("kept", funnel.docs_out)]
    rows += [(f"removed: {reason}", n) for reason, n in funnel.removed.most_common()]
    table = "| documents | count |\n|---|---:|\n" + "\n".join(f"| {label} | {n} |" for label, n in rows)
    return {
        "docs_in": funnel.docs_in,
        "docs_out": funnel.docs_out,
        "docs_removed": sum(funnel.removed.values()),
        "funnel": MetadataValue.md(table),
    }


def png_markdown(artifact: Artifact, title: str, filename: str) -> MetadataValue:
    data = base64.b64encode(artifact.read_bytes(filename)).decode()
    return MetadataValue.md(f"![{title}](data:image/png;base64,{data})")
