"""Steps: what experiments are made of (the Marin executor's rule), with no Dagster in sight.

A step is a stage (the function that builds an output), its validated config and its inputs (the
upstream steps it reads). Its version hashes the stage, the stage's code revision, the config, the
content the config points at (a crawl's files, held-out sets) and the inputs' versions. Its output lives
at ``{store}/{step name}/{partition}/{version}/``: named by the step, never by an experiment, so every
experiment that declares the same step shares one output (and one Dagster asset).

The graph is declared once, here: a step's inputs are what its stage function receives and what its
version hashes, so no input can go unversioned. ``after`` edges only order steps (a preregistered
prediction before the run it predicts) and version nothing.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel

from marin_pipelines.engine import Engine, LocalEngine, Progress
from marin_pipelines.lease import this_process
from marin_pipelines.store import Artifact, ArtifactStore, PendingArtifact, cache_dir, is_local, version_hash

if TYPE_CHECKING:  # the launch configs load JAX: not for every importer of steps
    from marin_pipelines.evals.launch_config import EvalLaunch
    from marin_pipelines.sweeps.launch_config import SweepLaunch
    from marin_pipelines.train.launch_config import TrainingLaunch

STEP_NAME = re.compile(r"[a-z][a-z0-9_]*(/[a-z][a-z0-9_]*)*")
PACKAGE = Path(__file__).resolve().parent
STEP_HELPERS = True  # see declared_at
Partitioning = Literal["snapshot", "ladder"]
CheckFn = Callable[[Artifact], tuple[bool, dict[str, Any]]]  # artifact -> (passed, metadata)
FUNNEL_CHECK = "funnel"  # the check of every document stage: documents in == out + removed


def versioned_config(config: BaseModel) -> dict[str, Any]:
    """The config as a step's version sees it: without the fields marked ``unversioned`` (where a run
    computes, as ``TrainConfig.mesh``, not what), at any depth."""

    def unversioned(model: BaseModel) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        for name, info in type(model).model_fields.items():
            value = getattr(model, name)
            if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("unversioned"):
                spec[name] = True
            elif isinstance(value, BaseModel) and (inner := unversioned(value)):
                spec[name] = inner
        return spec

    return config.model_dump(mode="json", exclude=unversioned(config))


class StepError(ValueError):
    """A step or an experiment that cannot be declared: the message names the step, field and place."""


class InputError(ValueError):
    """Inputs a step can never work on (no documents, too little text for one sequence): running it again
    cannot help, so the orchestrator fails it at once instead of retrying."""


@dataclass(frozen=True)
class Check:
    """A check on a step's output; ``blocking`` ones stop what is downstream when they fail."""

    fn: CheckFn
    blocking: bool = True

    @property
    def description(self) -> str:
        return (self.fn.__doc__ or "").strip()


@dataclass
class CheckOutcome:
    """A check's result on one output, as a run reports it; ``reason``: what it found, on one line."""

    asset: str
    check: str
    passed: bool
    blocking: bool = True  # False for WARN-severity checks: a result to report, not a broken pipeline
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.asset}:{self.check}"


def check_reason(found: dict[str, Any]) -> str:
    """What a check found (the metadata its function returns), on one line: its ``reason``, else its
    ``warnings``, else its figures."""
    for key in ("reason", "warnings"):
        if text := found.get(key):
            lines = text.splitlines() if isinstance(text, str) else [str(line) for line in text]
            return "; ".join(line.strip() for line in lines if line.strip())
    return ", ".join(f"{key} {value}" for key, value in found.items())


class Launcher(Protocol):
    """Where training, evaluation and sweeps run (a subprocess, a pod): the Dagster layer binds one to its
    run.

    Each gets the child's typed config (``train/launch_config.py``, ``evals/launch_config.py``,
    ``sweeps/launch_config.py``), whose paths are local paths or URLs in the store (``gs://``): a pod on
    another machine reads and writes them. Each returns the messages the child reported; a sweep's outcome
    is read from its folder (``sweeps/launched.py``).
    """

    def train(self, launch: TrainingLaunch) -> list[Any]: ...

    def evaluate(self, launch: EvalLaunch) -> list[Any]: ...

    def sweep(self, launch: SweepLaunch) -> list[Any]: ...


@dataclass
class StepContext:
    """What a stage function may use besides its config and inputs while it builds one output."""

    step: Step
    store: ArtifactStore
    partition: str | None = None
    resources: dict[str, Any] = field(default_factory=dict)  # the stage's `needs`: launcher, annotator
    log: Callable[[str], None] = lambda message: None
    engine: Engine = field(default_factory=LocalEngine)  # not versioned: outputs do not depend on it
    made_by: dict[str, str] = field(default_factory=dict)  # the run that builds it (a Dagster run id)
    # what the stage tells its orchestrator as it goes, beyond its log: (event, data), e.g. a sweep's trials
    events: Callable[[str, dict[str, Any]], None] = lambda event, data: None

    @property
    def launcher(self) -> Launcher:
        return self.resources["launcher"]

    def progress(self, what: str) -> Progress:
        """Tells the log how many of a map's units are done: at the start, every tenth, and at the end."""
        told = [-1]

        def report(done: int, total: int) -> None:
            tenth = done * 10 // max(total, 1)
            if tenth > told[0]:
                told[0] = tenth
                self.log(f"{self.step.name}: {what} {done}/{total} done")

        return report


@dataclass(frozen=True)
class Stage:
    """A kind of step: ``run(ctx, out, config, **inputs)`` builds the output into ``out``."""

    name: str
    run: Callable[..., None]
    config: type[BaseModel]
    revision: int = 1  # bump when the logic changes, so that older outputs are not reused
    group: str = "data"
    kinds: tuple[str, ...] = ()
    partitioning: Partitioning | None = None  # the partition of an input of the same partitioning is read
    checks: Mapping[str, Check] = field(default_factory=dict)
    needs: tuple[str, ...] = ()  # resources the stage uses: "launcher", "annotator"
    fingerprint: Callable[[Any], Any] | None = None  # content the config points at, versioned too
    headline: tuple[str, ...] = ()  # the metadata a researcher looks at first: the UI shows these first
    # metadata keys -> the names the UI shows them under, where a stored key alone would not say enough
    # (``params``: counted with embeddings or without?); the manifest keeps the key
    labels: Mapping[str, str] = field(default_factory=dict)
    # a stage that defines partitions: (config, strict) -> keys; strict raises on a source it cannot read
    partition_keys: Callable[[Any, bool], list[str]] | None = None

    @property
    def description(self) -> str:
        return inspect.getdoc(self.run) or ""

    @property
    def documents(self) -> bool:
        """A document stage: it writes document shards and their funnel (in, out, removed per reason), which
        its funnel check holds to account."""
        return FUNNEL_CHECK in self.checks

    @cached_property
    def inputs(self) -> tuple[dict[str, bool], bool]:
        """Input names (-> required) from ``run``'s signature, and whether it takes any others (``**``)."""
        params = list(inspect.signature(self.run).parameters.values())[3:]  # after ctx, out, config
        named = {
            p.name: p.default is inspect.Parameter.empty
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }
        return named, any(p.kind == p.VAR_KEYWORD for p in params)


def stage(config: type[BaseModel], **options: Any) -> Callable[[Callable[..., None]], Stage]:
    """Declare a stage function: ``@stage(ExtractConfig, revision=2)`` over ``def extracted_text(...)``."""

    def wrap(run: Callable[..., None]) -> Stage:
        return Stage(name=run.__name__, run=run, config=config, **options)

    return wrap


def declared_at() -> str:
    """``file:line`` of the first caller outside the step machinery: where a step was declared. The machinery
    is this module, the modules of helpers that declare steps for their caller (they set ``STEP_HELPERS``),
    and the ``__init__`` that dataclasses generate."""
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_globals.get("STEP_HELPERS") or frame.f_code.co_filename == "<string>"
    ):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}"


def _short(filename: str) -> str:
    path = Path(filename)
    try:
        return str(path.relative_to(PACKAGE.parent))
    except ValueError:
        return str(path)


@dataclass(frozen=True, eq=False)
class Step:
    """One node of an experiment's graph. Build them with the helpers in ``experiments/defaults.py``."""

    name: str
    stage: Stage
    config: BaseModel
    inputs: Mapping[str, Step] = field(default_factory=dict)
    after: tuple[Step, ...] = ()
    declared_at: str = field(default_factory=declared_at)

    def __post_init__(self) -> None:
        where = f"step {self.name!r} ({self.declared_at})"
        if not STEP_NAME.fullmatch(self.name):
            raise StepError(
                f"{where}: a step name is lowercase words joined by '/' and '_' (e.g. demo/crawl)"
            )
        if not isinstance(self.config, self.stage.config):
            raise StepError(f"{where}: config must be a {self.stage.config.__name__}")
        named, more = self.stage.inputs
        missing = [name for name, required in named.items() if required and name not in self.inputs]
        unknown = [name for name in self.inputs if name not in named and not more]
        if missing or unknown:
            raise StepError(
                f"{where}: stage {self.stage.name} takes inputs {sorted(named)}; "
                f"missing {missing}, unknown {unknown}"
            )
        for name, upstream in self.inputs.items():
            if not isinstance(upstream, Step):
                raise StepError(f"{where}: input {name!r} must be a Step, not {type(upstream).__name__}")

    def __repr__(self) -> str:
        return f"Step({self.name!r}, version={self.version})"

    @property
    def key(self) -> list[str]:
        """The asset key's path and the store path under the root."""
        return self.name.split("/")

    @cached_property
    def config_json(self) -> dict[str, Any]:
        return self.config.model_dump(mode="json")

    @cached_property
    def version(self) -> str:
        payload: dict[str, Any] = {
            "stage": self.stage.name,
            "revision": self.stage.revision,
            "config": versioned_config(self.config),
            "inputs": {name: step.version for name, step in sorted(self.inputs.items())},
        }
        if self.stage.fingerprint is not None:
            payload["content"] = self.stage.fingerprint(self.config)
        if self.reads_snapshots:  # a new snapshot recomputes the stages over all of them, not the others
            payload["snapshots"] = self.snapshots
        return version_hash(payload)

    @property
    def partitioning(self) -> Partitioning | None:
        """'snapshot': one partition per crawl snapshot; 'ladder': one per (budget, size) rung."""
        return self.stage.partitioning

    @cached_property
    def partition_source(self) -> Step | None:
        """The step that defines this step's partitions: its crawl, or its ladder's checkpoints."""
        if self.partitioning is None:
            return None
        same = [s for s in self.inputs.values() if s.partitioning == self.partitioning]
        return same[0].partition_source if same else self

    @cached_property
    def whole_inputs(self) -> frozenset[str]:
        """Inputs read with every partition (a dict by key): the partitioned inputs of an unpartitioned step,
        and those of another partition source (another crawl's or corpus's dedup, which a dedup is run
        against). The first input partitioned alike defines the step's partitions."""
        return frozenset(
            name
            for name, upstream in self.inputs.items()
            if upstream.partitioning is not None
            and (self.partitioning is None or upstream.partition_source is not self.partition_source)
        )

    @property
    def reads_snapshots(self) -> bool:
        """An unpartitioned step that reads every snapshot of a crawl."""
        return self.partitioning is None and any(s.partitioning == "snapshot" for s in self.inputs.values())

    def partition_keys(self, strict: bool = False) -> list[str]:
        """This step's partitions now, from the step that defines them (a crawl's snapshots, a ladder's
        rungs); [] for an unpartitioned step. Read afresh each time: snapshots arrive while definitions
        stay loaded. Not ``strict``, a source that cannot be read gives [] (loading definitions never
        fails on it; the step raises the clear error when it runs)."""
        source = self.partition_source
        if source is None or source.stage.partition_keys is None:
            return []
        return source.stage.partition_keys(source.config, strict)

    @property
    def snapshots(self) -> list[str]:
        """The crawl snapshots this step covers: its own partitions, or those of the crawls it reads."""
        sources = [self] if self.partitioning == "snapshot" else list(self.inputs.values())
        crawls = {s.partition_source.name: s for s in sources if s.partitioning == "snapshot"}  # type: ignore[union-attr]
        return [key for _, step in sorted(crawls.items()) for key in step.partition_keys()]

    def upstream(self) -> list[Step]:
        """Every step this one needs, itself last, in an order that runs each after its inputs."""
        return topological([self])

    def describe(self) -> dict[str, Any]:
        """What the execution record and the dry-run show of the step."""
        return {
            "name": self.name,
            "stage": self.stage.name,
            "version": self.version,
            "config": self.config_json,
            "inputs": {name: step.name for name, step in self.inputs.items()},
            "after": [step.name for step in self.after],
            "declared_at": self.declared_at,
        }


def topological(roots: Iterable[Step]) -> list[Step]:
    """The steps reachable from ``roots`` (inputs and ``after`` edges), each after its upstreams; a cycle
    is a ``StepError`` naming its steps (no order could run them, and no version could be computed)."""
    order: list[Step] = []
    seen: set[int] = set()
    path: list[Step] = []  # the steps being visited, each an upstream of the one before it

    def visit(step: Step) -> None:
        if any(step is on for on in path):
            cycle = [*path[next(i for i, on in enumerate(path) if on is step) :], step]
            raise StepError(
                "steps form a cycle through their inputs and after edges: "
                + " <- ".join(f"{s.name} ({s.declared_at})" for s in cycle)
            )
        if id(step) in seen:
            return
        path.append(step)
        for upstream in (*step.inputs.values(), *step.after):
            visit(upstream)
        path.pop()
        seen.add(id(step))
        order.append(step)

    for root in roots:
        visit(root)
    return order


def unique_steps(steps: Iterable[Step]) -> dict[str, Step]:
    """Steps by name. One name declared twice must be one step: same stage, config and inputs.

    Declaring it again identically is how experiments share it; a second config under the same name is an
    error naming both places, since the two would otherwise silently share (or fight over) one output.
    """
    by_name: dict[str, Step] = {}
    for step in steps:
        seen = by_name.setdefault(step.name, step)
        if seen is not step and seen.version != step.version:
            raise StepError(
                f"step {step.name!r} is declared twice with different configs or inputs: at "
                f"{seen.declared_at} and at {step.declared_at}{_difference(seen, step)}; give one of them "
                "another name"
            )
    return by_name


def _difference(a: Step, b: Step) -> str:
    fields = changed_fields(a.config_json, b.config_json)
    inputs = sorted(
        k for k in {*a.inputs, *b.inputs} if _version(a.inputs.get(k)) != _version(b.inputs.get(k))
    )
    parts = ([f"config fields {', '.join(fields)}"] if fields else []) + (
        [f"inputs {', '.join(inputs)}"] if inputs else []
    )
    if a.stage.name != b.stage.name:
        parts.insert(0, f"stages {a.stage.name} and {b.stage.name}")
    return f" (they differ in {'; '.join(parts)})" if parts else ""


def _version(step: Step | None) -> str | None:
    return step.version if step is not None else None


def changed_fields(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the fields that differ between two JSON configs (why did my hash fork?)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted({*before, *after}, key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in before or key not in after:
                out.append(path)
            else:
                out += changed_fields(before[key], after[key], path)
        return out
    return [] if before == after else [prefix or "(config)"]


def build_step(ctx: StepContext, inputs: Mapping[str, Any]) -> Artifact:
    """The output for ``ctx.partition``: reused when complete at this version, else built atomically by
    the one run that holds the version's lease (others wait for it and reuse its output).

    A version is one output whatever step names it (the name is not versioned): when another step's output
    of this version is complete, the step gets an alias of it rather than computing the same bytes again.
    """
    step = ctx.step
    artifact = ctx.store.get(step.key, step.version, ctx.partition)
    label = step.name + (f" [{ctx.partition}]" if ctx.partition else "")
    if artifact is not None:
        of = f" of {artifact.same_as}" if artifact.same_as else ""
        ctx.log(f"{label}: reused version {step.version}{of} ({artifact.url})")
        return artifact
    owner = this_process(**ctx.made_by)
    claim = ctx.store.claim(step.key, step.version, ctx.partition, owner, lambda m: ctx.log(f"{label}: {m}"))
    record = (step.key, step.version, ctx.partition, step.config_json, upstream_versions(step), ctx.made_by)
    with claim as lease:
        if lease is None:
            artifact = ctx.store.get(step.key, step.version, ctx.partition)
            assert artifact is not None
            ctx.log(f"{label}: reused version {step.version}, made meanwhile by another run ({artifact.url})")
            return artifact
        original = ctx.store.same_version(step.version, ctx.partition)
        if original is not None and original.manifest["asset"] != step.name:
            with ctx.store.write(*record, same_as=original):
                pass
            artifact = ctx.store.get(step.key, step.version, ctx.partition)
            if artifact is not None:  # else the original went meanwhile: built here, over the alias
                ctx.log(f"{label}: reused version {step.version} of {artifact.same_as} ({artifact.url})")
                return artifact
        ctx.log(f"{label}: computing version {step.version}")
        with ctx.store.write(*record) as out:
            try:
                step.stage.run(ctx, out, step.config, **inputs)
            finally:  # taken over by another run (which cleared this one's files): nothing is committed
                lease.check()
    artifact = ctx.store.get(step.key, step.version, ctx.partition)
    assert artifact is not None
    ctx.log(f"{label}: done in {artifact.manifest['wall_seconds']:.1f} s ({artifact.url})")
    return artifact


def upstream_versions(step: Step) -> dict[str, str]:
    """Input -> ``step@version``: what the manifest records of the inputs, to say later what changed."""
    return {name: f"{upstream.name}@{upstream.version}" for name, upstream in step.inputs.items()}


def pending_work_dir(out: PendingArtifact) -> Path:
    """Local scratch keyed by the output's version that survives a failed attempt (resumable work): the
    store's work folder beside the output on a local store, else a folder in the local cache."""
    return local_work_dir(out.work)


def local_work_dir(work: str) -> Path:
    """``pending_work_dir`` of the output whose work folder (``PendingArtifact.work``) is ``work``."""
    if is_local(work):
        return Path(work)
    return cache_dir() / "work" / hashlib.sha256(work.encode()).hexdigest()[:24]
