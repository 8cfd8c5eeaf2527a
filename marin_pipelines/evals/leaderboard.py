"""The lab's leaderboard: every evaluation in the store, a row per model, the newest valid result per task.

Built from what is stored, not from one experiment's graph, so it gathers every experiment's runs, the
command line's and the checkpoints the sensor evaluated:
- a **model** is a finished run folder (``train.json`` and ``model.json``): a step's output, keyed by its
  place in the store (one version, one row, whatever step names reuse it), or a command-line run under the
  store root;
- an **evaluation** is a folder with ``eval_launch.json``: complete (with ``results.json`` and a manifest),
  or a work folder an evaluation left without results (still ``running`` while its lease is held, else
  ``failed``).

A column is one task metric at one few-shot count and prompt form (plain, or through the model's chat
template), or one bits-per-byte / chat-loss set of given files. For each model and column the newest
*valid* result is shown; a result that failed, was cut short (lm-eval's ``limit``: ``partial``) or ran
another version of the task than the current one (``other version``) never replaces a valid one, and is
shown as such only where no valid one exists. The average covers named tasks and appears only for the
models that have every one of them.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from marin_pipelines.evals.lm_eval_tasks import QUICK_TASKS, SHIPPED_TASKS, SHIPPED_TASKS_DIR, task_scores
from marin_pipelines.lease import ended_here, read_lease
from marin_pipelines.store import (
    MANIFEST,
    RECORDS,
    SAME_AS,
    VERSIONS,
    Artifact,
    ArtifactStore,
    partition_folder,
    version_hash,
)

VALID, PARTIAL, FAILED, RUNNING, OTHER_VERSION = "valid", "partial", "failed", "running", "other version"
COMMAND_LINE = "command line"  # the experiment of a run made by `marin-pipelines train` / `sft` / `import-hf`
# the tasks whose headline metric the average covers unless told otherwise: what every evaluated model is
# asked (every experiment's evaluations run the quick tasks, ``demo.EVALS``; the standard suite too), less
# marin_python_text (perplexities, not a score in [0, 1]). A task only some experiments run (the SFT
# experiment's marin_python_doc) would leave every other model without an average.
AVERAGE_TASKS = tuple(task for task in QUICK_TASKS if task != "marin_python_text")
SKIPPED_DIRS = (RECORDS, VERSIONS)


@dataclass
class Model:
    """One evaluated model: a run folder, with what the leaderboard says of it."""

    key: str  # the run folder under the store root (a step's output: name/partition/version)
    names: list[str]  # the steps that name this output (several when one version is reused), or the folder
    experiments: list[str]
    run: str  # where it lives
    partition: str | None = None  # a ladder's rung: budget|size
    version: str | None = None  # a step's output: the version its folder is named by (none for a command's)
    # parameters on the bases the project uses: the total with embeddings (a run's summary: ``params``),
    # those one token uses with embeddings (``active_params``; less for MoE only), and the non-embedding
    # count that forecasts and comparisons use
    total_params: int | None = None
    total_active_params: int | None = None
    non_embedding_params: int | None = None
    tokens: int | None = None
    flops: float | None = None  # its own training
    base: str | None = None  # the model it was fine-tuned (or warm-started) from, by key
    total_flops: float | None = None  # with its base's (and the base's base's)
    chat: bool = False  # fine-tuned for chat: its tasks are asked through its template
    created: str = ""

    @property
    def experiment(self) -> str:
        """The experiment it belongs to: the one its step is named under, else the first that uses it."""
        owner = self.names[0].split("/", 1)[0]
        return owner if owner in self.experiments else (self.experiments or ["?"])[0]


@dataclass(frozen=True)
class Column:
    """What one number measures: a task metric at a few-shot count and prompt form, or a set of files."""

    metric: str  # TASK/METRIC, or bpb / chat for a set, which its files (not its name) tell apart
    n_shot: int | None = None
    prompt: str = "plain"  # or "chat": the prompts through the model's chat template
    data: str | None = None  # a bits-per-byte or chat set: its files (store-relative)

    @property
    def task(self) -> str | None:
        kind = self.metric.split("/", 1)[0]
        return None if kind in ("bpb", "chat") else kind

    @property
    def label(self) -> str:
        if self.task is None:
            return f"{self.metric} [{self.data.replace('/_/', '@') if self.data else ''}]"
        return (
            self.metric
            + (f" {self.n_shot}-shot" if self.n_shot else "")
            + (" (chat)" if self.prompt == "chat" else "")
        )


@dataclass
class Score:
    """One evaluation's number (or its failure) for one model and column."""

    model: str
    column: Column
    value: float | None
    status: str
    created: str
    evaluation: str  # the evaluation folder, store-relative
    version: str | None = None  # the task's version as lm-eval reports it
    higher_is_better: bool | None = None


@dataclass
class Leaderboard:
    models: list[Model]  # best first
    columns: list[Column]
    cells: dict[tuple[str, Column], Score]
    versions: dict[str, str]  # task -> the current version
    higher: dict[Column, bool]
    average_of: list[Column] = field(default_factory=list)  # the plain-prompt columns averaged
    average_tasks: list[str] = field(default_factory=list)  # every task the average requires
    averages: dict[str, float] = field(default_factory=dict)  # model key -> average
    lacking: dict[str, list[str]] = field(default_factory=dict)  # model key -> average tasks it lacks
    sorted_by: str = "average"
    skipped: dict[str, str] = field(default_factory=dict)  # evaluation folder -> why it was not read
    names: dict[str, str] = field(default_factory=dict)  # every run's key -> its first name (a base's too)


# --- reading the store ---------------------------------------------------------------------------------


def _walk(store: ArtifactStore) -> Iterator[tuple[str, list[str]]]:
    """(store-relative folder, its files) for every folder that may be a run or an evaluation; nothing
    below a complete artifact or a run folder is visited (checkpoints, token shards)."""
    base = store.fs_root
    for root, dirs, files in store.fs.walk(base, topdown=True, detail=False):
        relative = root[len(base) :].strip("/")
        names = [posixpath.basename(f) for f in files]
        if MANIFEST in names or "train.json" in names or relative.endswith(".work"):
            dirs[:] = []
        else:
            dirs[:] = [
                d
                for d in dirs
                if not (relative == "" and posixpath.basename(d) in SKIPPED_DIRS)
                and not (posixpath.basename(d).startswith(".") and ".tmp-" in posixpath.basename(d))
            ]
        yield relative, names


def _read_json(store: ArtifactStore, relative: str) -> Any:
    text = store.read_text(relative)
    return json.loads(text) if text is not None else None


def _relative(store: ArtifactStore, url: str) -> str:
    """A path under the store root as store-relative; anything else as it is."""
    root = store.root.rstrip("/") + "/"
    return url[len(root) :].rstrip("/") if url.startswith(root) else url.rstrip("/")


def _step_experiments(store: ArtifactStore) -> dict[tuple[str, str], list[str]]:
    """(step name, version) -> the experiments whose execution records declare it."""
    out: dict[tuple[str, str], list[str]] = {}
    try:
        records = store.fs.ls(f"{store.fs_root}/{RECORDS}", detail=False)
    except FileNotFoundError:
        return out
    for path in sorted(records):
        if not path.endswith(".json"):
            continue
        record = _read_json(store, f"{RECORDS}/{posixpath.basename(path)}") or {}
        for step in record.get("steps", []):
            out.setdefault((step["name"], step["version"]), []).append(record.get("experiment", "?"))
    return out


def _model(store: ArtifactStore, relative: str, manifest: dict[str, Any] | None) -> Model | None:
    trained = _read_json(store, f"{relative}/train.json") or {}
    summary = trained.get("summary") or {}
    if not summary and "imported" not in trained:
        return None  # a run still training (or killed before its end): not a model yet
    inputs = _read_json(store, f"{relative}/inputs.json") or {}
    base = (inputs.get("base") or {}).get("from") or (summary.get("warm_start") or {}).get("dir")
    files = [posixpath.basename(p) for p in store.fs.ls(f"{store.fs_root}/{relative}", detail=False)]
    name = manifest["asset"] if manifest else relative
    return Model(
        key=relative,
        names=[name],
        experiments=[],
        run=f"{store.root}/{relative}",
        partition=(manifest or {}).get("partition"),
        version=(manifest or {}).get("version"),
        total_params=summary.get("params"),
        total_active_params=summary.get("active_params"),
        non_embedding_params=summary.get("non_embedding_params"),
        tokens=summary.get("tokens_seen"),
        flops=summary.get("flops"),
        base=_relative(store, base) if base else None,
        chat="sft_launch.json" in files or "chat_template.jinja" in files,
        created=(manifest or {}).get("created") or summary.get("started_at", ""),
    )


def _model_key(store: ArtifactStore, manifest: dict[str, Any] | None, launch: dict[str, Any]) -> str:
    """The evaluated run's key: from the evaluation's record of its checkpoint input (name@version, the
    same partition), which holds wherever the store was made; else from the launched path."""
    upstream = (manifest or {}).get("upstream", {}).get("checkpoint")
    if upstream:
        name, _, version = upstream.rpartition("@")
        partition = (manifest or {}).get("partition")
        return f"{name}/{partition_folder(partition)}/{version}"
    return _relative(store, launch["checkpoint"])


def current_versions() -> dict[str, str]:
    """The shipped tasks' versions as their YAML files declare them now."""
    out = {}
    for task in SHIPPED_TASKS:
        config = yaml.safe_load((SHIPPED_TASKS_DIR / f"{task}.yaml").read_text().replace("!function", ""))
        out[task] = str((config.get("metadata") or {}).get("version"))
    return out


def _scores(
    store: ArtifactStore,
    relative: str,
    model: str,
    launch: dict[str, Any],
    results: dict[str, Any] | None,
    created: str,
    lease_held: bool,
) -> list[Score]:
    """The numbers of one evaluation; for one without results, a failure (or ``running``) per part."""
    evals = launch.get("evals", {})
    bpb_sets = {**launch.get("bpb", {}), **evals.get("heldout", {})}
    chat_sets = evals.get("chat", {})
    files = lambda paths: ",".join(_relative(store, p) for p in paths)  # noqa: E731
    prompt = "chat" if evals.get("chat_tasks") else "plain"
    out: list[Score] = []

    def add(column: Column, value: float | None, status: str, **more: Any) -> None:
        out.append(Score(model, column, value, status, created, relative, **more))

    if results is None:
        status = RUNNING if lease_held else FAILED
        for paths in bpb_sets.values():
            add(Column("bpb", data=files(paths)), None, status, higher_is_better=False)
        for paths in chat_sets.values():
            add(Column("chat", data=files(paths)), None, status, higher_is_better=False)
        for task in evals.get("tasks", []):
            add(Column(f"{task}/*", None, prompt), None, status)
        return out
    for name, result in results.get("bpb", {}).items():
        if name in bpb_sets:
            add(
                Column("bpb", data=files(bpb_sets[name])),
                result["bits_per_byte"],
                VALID,
                higher_is_better=False,
            )
    for name, result in results.get("chat", {}).items():
        if name in chat_sets and result.get("loss") is not None:
            add(
                Column("chat", data=files(chat_sets[name])),
                result["loss"],
                VALID,
                higher_is_better=False,
            )
    scored = task_scores(results)
    for task in evals.get("tasks", []):
        metrics = {m: v for m, v in scored.get(task, {}).items() if math.isfinite(v)}
        n_shot = (results.get("n-shot") or {}).get(task)
        if not metrics:
            add(Column(f"{task}/*", None, prompt), None, FAILED)
            continue
        samples = (results.get("n-samples") or {}).get(task, {})
        partial = samples.get("effective", 0) < samples.get("original", 0)
        version = str((results.get("versions") or {}).get(task))
        better = (results.get("higher_is_better") or {}).get(task, {})
        for metric, value in metrics.items():
            add(
                Column(f"{task}/{metric}", n_shot, prompt),
                value,
                PARTIAL if partial else VALID,
                version=version,
                higher_is_better=better.get(metric),
            )
    return out


UNREADABLE = (ValueError, KeyError, TypeError, AttributeError)  # a record that is not JSON, or not its shape


def _scan(
    store: ArtifactStore, evaluations: list[tuple[str, dict[str, Any] | None]] | None = None
) -> tuple[dict[str, Model], dict[str, str]]:
    """Every finished run in the store with its names and experiments, and each alias folder's original;
    with ``evaluations``, the evaluation folders found are appended to it (their results not read)."""
    models: dict[str, Model] = {}
    aliases: dict[str, list[str]] = {}  # model key -> further step names (one version reused)
    alias_of: dict[str, str] = {}  # an alias folder -> the key of the output it names
    for relative, files in _walk(store):
        if relative.endswith(".work"):
            if "eval_launch.json" in files and evaluations is not None:
                evaluations.append((relative, None))
            continue
        if evaluations is None and "eval_launch.json" in files:
            continue  # an evaluation: not even its manifest read
        manifest = _read_json(store, f"{relative}/{MANIFEST}") if MANIFEST in files else None
        if manifest and manifest.get(SAME_AS):
            folder = relative.rsplit("/", 2)[-2]  # by name, not url: a copied store reads its own copy
            original = f"{manifest[SAME_AS]['asset']}/{folder}/{manifest['version']}"
            aliases.setdefault(original, []).append(manifest["asset"])
            alias_of[relative] = original
        elif "train.json" in files and "model.json" in files:
            if (model := _model(store, relative, manifest)) is not None:
                models[relative] = model
        elif evaluations is not None and manifest and {"eval_launch.json", "results.json"} <= set(files):
            evaluations.append((relative, manifest))
    experiments = _step_experiments(store)
    for key, model in models.items():
        model.names += aliases.get(key, [])
        version = key.rsplit("/", 1)[-1]
        found = [e for name in model.names for e in experiments.get((name, version), [])]
        model.experiments = sorted(set(found)) or _named_experiments(model)
    for model in models.values():
        model.total_flops = _total_flops(model, models)
    return models, alias_of


def _named_experiments(model: Model) -> list[str]:
    """The experiments of a run no stored execution record declares (made before records were kept, or
    their records lost): those its step names are under (a step is named ``experiment/step``); a folder no
    step made (no manifest: its name is its place) is the command line's."""
    steps = [] if model.names == [model.key] else model.names
    return sorted({name.split("/", 1)[0] for name in steps if "/" in name}) or [COMMAND_LINE]


def finished_runs(store: ArtifactStore) -> dict[str, Model]:
    """Every finished run in the store, by key, with its names and experiments: what the sensor needs, at
    the cost of a walk and each run's records, no evaluation's results read (``read_store`` reads every
    ``results.json``, which on a bucket is a request each)."""
    return _scan(store)[0]


def read_store(store: ArtifactStore) -> tuple[dict[str, Model], list[Score], dict[str, str]]:
    """Every finished run and every evaluation's scores in the store, and the evaluations skipped (folder ->
    why: a record that is not JSON or lacks what an evaluation records), which the table counts."""
    evaluations: list[tuple[str, dict[str, Any] | None]] = []
    models, alias_of = _scan(store, evaluations)
    scores: list[Score] = []
    skipped: dict[str, str] = {}
    for relative, manifest in evaluations:
        try:
            scores += _evaluation_scores(store, relative, manifest, alias_of)
        except UNREADABLE as e:
            skipped[relative] = f"{type(e).__name__}: {e}"
    return models, scores, skipped


def _evaluation_scores(
    store: ArtifactStore, relative: str, manifest: dict[str, Any] | None, alias_of: dict[str, str]
) -> list[Score]:
    """One evaluation's scores, under the key of the run it evaluated (an alias's original)."""
    launch = _read_json(store, f"{relative}/eval_launch.json")
    key = _model_key(store, manifest, launch)
    key = alias_of.get(key, key)
    if manifest is None:
        folder, _, work = relative.rpartition("/")
        lease = read_lease(store.fs, f"{store.fs_root}/{folder}/{work.removesuffix('.work')}.lease")
        held = lease is not None and not ended_here(lease.get("owner", {}))
        return _scores(store, relative, key, launch, None, "", held)
    results = _read_json(store, f"{relative}/results.json")
    return _scores(store, relative, key, launch, results, manifest.get("created", ""), False)


def _total_flops(model: Model, models: dict[str, Model]) -> float | None:
    """Its training FLOPs with its base's (and the base's base's); None where one is unknown (a base not in
    the store, or without a count): its own alone would understate what it cost."""
    total, seen, at = 0.0, set(), model
    while at is not None and at.key not in seen:
        if at.flops is None or (at.base and at.base not in models):
            return None
        total, seen = total + at.flops, seen | {at.key}
        at = models.get(at.base) if at.base else None
    return total


# --- the newest valid result ---------------------------------------------------------------------------


def newest_valid(candidates: Sequence[Score], current: str | None) -> Score:
    """The result a cell shows: the newest valid one of the current task version; where there is none, the
    newest of the others, saying why it is not valid (a task version not current is ``other version``)."""

    def judged(score: Score) -> Score:
        if score.status == VALID and current is not None and score.version not in (None, current):
            return replace(score, status=OTHER_VERSION)
        return score

    ranked = sorted((judged(s) for s in candidates), key=lambda s: s.created, reverse=True)
    valid = [s for s in ranked if s.status == VALID]
    return valid[0] if valid else ranked[0]


def build(
    models: dict[str, Model],
    scores: list[Score],
    *,
    average: Sequence[str] = AVERAGE_TASKS,
    sort: str | None = None,
    versions: dict[str, str] | None = None,
) -> Leaderboard:
    """The table: a row per evaluated model, a column per measured thing, each cell ``newest_valid``.

    ``average``: tasks whose headline metric (the first that is higher-better and within [0, 1]) is averaged,
    for the models that have a valid result of every one of them at their prompt (chat models through their
    template). ``sort``: a column label or ``average`` (default: the average where any model has one, else
    the first column); best first."""
    versions = dict(versions if versions is not None else current_versions())
    for score in sorted(scores, key=lambda s: s.created):  # a task not shipped: its newest version
        task = score.column.task
        if task and score.version and task not in SHIPPED_TASKS:
            versions[task] = score.version
    evaluated = {s.model for s in scores}
    for key in evaluated - models.keys():  # evaluated, but its run folder is gone or not a run
        models[key] = Model(key=key, names=[key], experiments=[], run="")
    failures = [s for s in scores if s.column.metric.endswith("/*")]
    measured = {s.column for s in scores if s not in failures}
    tried = {(c.task, c.prompt) for c in measured}
    # a task no evaluation scored at that prompt still gets a column, to show its failures
    columns = sorted(
        measured | {s.column for s in failures if (s.column.task, s.column.prompt) not in tried},
        key=_column_order,
    )
    higher = {
        c: next(
            (s.higher_is_better for s in scores if s.column == c and s.higher_is_better is not None), True
        )
        for c in columns
    }
    cells: dict[tuple[str, Column], Score] = {}
    for column in columns:
        for key in evaluated:
            candidates = [s for s in scores if s.model == key and s.column == column]
            if column.task is not None and not column.metric.endswith("/*"):  # the task's failures too
                failed = Column(f"{column.task}/*", None, column.prompt)
                candidates += [s for s in failures if s.model == key and s.column == failed]
            if candidates:
                cells[(key, column)] = newest_valid(candidates, versions.get(column.task or ""))
    board = Leaderboard(
        [], columns, cells, versions, higher, names={k: m.names[0] for k, m in models.items()}
    )
    _average(board, models, evaluated, average)
    board.models = _ranked(board, [models[k] for k in evaluated], sort)
    return board


def headline(column: Column, higher: bool, value: float) -> bool:
    """Whether a column can be its task's headline: a score where higher is better, within [0, 1]."""
    return column.task is not None and higher and 0.0 <= value <= 1.0


def _average(board: Leaderboard, models: dict[str, Model], evaluated: set[str], tasks: Sequence[str]) -> None:
    chosen: dict[tuple[str, str], Column] = {}  # (task, prompt) -> its headline column (fewest shots)
    for column in board.columns:
        values = [s.value for (k, c), s in board.cells.items() if c == column and s.value is not None]
        if column.task in tasks and values and all(headline(column, board.higher[column], v) for v in values):
            known = chosen.get((column.task, column.prompt))
            if known is None or (column.n_shot or 0, column.metric) < (known.n_shot or 0, known.metric):
                chosen[(column.task, column.prompt)] = column
    board.average_tasks = list(tasks)
    board.average_of = [chosen[(t, "plain")] for t in tasks if (t, "plain") in chosen]
    for key in evaluated:
        prompt = "chat" if models[key].chat else "plain"
        picked = [chosen.get((t, prompt)) for t in tasks]
        cells = [board.cells.get((key, c)) if c is not None else None for c in picked]
        lacking = [t for t, cell in zip(tasks, cells, strict=True) if cell is None or cell.status != VALID]
        if lacking:
            board.lacking[key] = lacking
        elif tasks:
            board.averages[key] = sum(c.value for c in cells) / len(cells)  # type: ignore[union-attr,misc]


def _column_order(column: Column) -> tuple:
    kind = {"bpb": 1, "chat": 2}.get(column.metric.split("/", 1)[0], 0)
    return (kind, column.prompt, column.metric, column.n_shot or 0, column.data or "")


def _ranked(board: Leaderboard, models: list[Model], sort: str | None) -> list[Model]:
    if sort is None:
        sort = "average" if board.averages else (board.columns[0].label if board.columns else "average")
    board.sorted_by = sort
    if sort == "average":
        value = lambda m: board.averages.get(m.key)  # noqa: E731
        higher = True
    else:
        column = next((c for c in board.columns if c.label == sort), None)
        if column is None:
            raise ValueError(
                f"no column {sort!r} to sort by; the columns are {[c.label for c in board.columns]}"
            )
        higher = board.higher[column]

        def value(m: Model) -> float | None:
            cell = board.cells.get((m.key, column))
            return cell.value if cell is not None and cell.status == VALID else None

    def order(m: Model) -> tuple:
        v = value(m)
        return (v is None, -(v or 0.0) if higher else (v or 0.0), m.key)

    return sorted(models, key=order)


def leaderboard(store: ArtifactStore, **options: Any) -> Leaderboard:
    """The leaderboard of everything evaluated in ``store`` (``build``'s options)."""
    models, scores, skipped = read_store(store)
    board = build(models, scores, **options)
    board.skipped = skipped
    return board


# --- what people read ----------------------------------------------------------------------------------


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3g}"


def cell_text(score: Score | None) -> str:
    if score is None:
        return ""
    if score.status == VALID:
        return _number(score.value)
    shown = _number(score.value)
    why = score.status + (f" v{score.version}" if score.status == OTHER_VERSION else "")
    return f"{shown} ({why})" if shown else why


def column_heading(board: Leaderboard, column: Column) -> str:
    arrow = "↑" if board.higher[column] else "↓"
    if column.task is None:
        return f"{column.label} {arrow}"
    version = board.versions.get(column.task)
    return f"{column.metric} {arrow} v{version}, {column.n_shot or 0}-shot" + (
        ", chat" if column.prompt == "chat" else ""
    )


def headline_columns(board: Leaderboard) -> list[Column]:
    """The columns a reader looks at: each task's first metric that is a score in [0, 1] (else its first),
    per few-shot count and prompt, and every bits-per-byte and chat set."""
    chosen: dict[tuple, tuple[bool, Column]] = {}
    for column in board.columns:
        key = (column.task, column.n_shot, column.prompt) if column.task else (column,)
        values = [s.value for (_, c), s in board.cells.items() if c == column and s.value is not None]
        score = bool(values) and all(headline(column, board.higher[column], v) for v in values)
        if key not in chosen or (score and not chosen[key][0]):
            chosen[key] = (score, column)
    return [column for _, column in chosen.values()]


# the parameters shown: the total with embeddings (and, where fewer, those one token uses: an MoE's), as a
# run's summary counts them; the JSON and parquet have non_embedding_params, the base of forecasts
PARAMS_HEADING = "params (total, active)"


def markdown(board: Leaderboard, experiment: str | None = None, every_metric: bool = False) -> str:
    """The table, best first; ``experiment`` keeps the rows of one experiment (the column to filter on).
    Each task's headline metric only, unless ``every_metric``."""
    models = [m for m in board.models if experiment is None or experiment in m.experiments]
    columns = board.columns if every_metric else headline_columns(board)
    names = {**board.names, **{m.key: m.names[0] for m in board.models}}
    head = ["rank", "model", "version", "experiment", PARAMS_HEADING, "tokens", "FLOPs", "average"]
    head += [column_heading(board, c) for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rank, m in enumerate(models, 1):
        params = (
            ""
            if m.total_params is None
            else f"{m.total_params:,}"
            + (f" ({m.total_active_params:,})" if m.total_active_params not in (None, m.total_params) else "")
        )
        rung = f" [{m.partition.replace('|', ' ')}]" if m.partition else ""
        row = [
            str(rank),
            " = ".join(m.names) + rung + (f" (from {names.get(m.base, m.base)})" if m.base else ""),
            m.version or "",
            ", ".join(m.experiments),
            params,
            "" if m.tokens is None else f"{m.tokens:,}",
            "" if m.total_flops is None else f"{m.total_flops:.3g}",
            _number(board.averages.get(m.key)),
            *[cell_text(board.cells.get((m.key, c))) for c in columns],
        ]
        lines.append("| " + " | ".join(row) + " |")
    hidden = len(board.columns) - len(columns)
    more = f" {hidden} more metrics in the JSON and parquet tables." if hidden else ""
    if experiment is not None:
        more += f" The {len(models)} of {len(board.models)} models of experiment {experiment} only."
    if board.skipped:
        first = next(iter(board.skipped.items()))
        more += f" {len(board.skipped)} evaluations skipped, unreadable (the first: {first[0]}: {first[1]})."
    return "\n".join([*lines, "", average_note(board) + more])


def average_note(board: Leaderboard) -> str:
    """Which tasks the average requires, every one named (with its metric where a column has it, else why
    not), and for how many models."""
    if not board.average_tasks:
        return f"No average: no task to average. Sorted by {board.sorted_by}."
    metric = {c.task: c.metric for c in board.average_of}

    def name(task: str) -> str:
        if task in metric:
            return metric[task]
        prompts = {c.prompt for c in board.columns if c.task == task}
        if "chat" in prompts and "plain" not in prompts:
            return f"{task} (chat prompts only)"
        return f"{task} ({'no score in [0, 1]' if prompts else 'no column: no model was evaluated on it'})"

    named = [name(t) for t in board.average_tasks]
    if not board.averages:
        return (
            f"No average: no model has a valid result of every one of {', '.join(named)}. "
            f"Sorted by {board.sorted_by}."
        )
    return (
        f"average: the mean of {', '.join(named)} (chat models' through their template), for the "
        f"{len(board.averages)} models that have a valid result of every one; {len(board.lacking)} lack one. "
        f"Sorted by {board.sorted_by}."
    )


def as_json(board: Leaderboard) -> dict[str, Any]:
    """``{"rows": [...], "columns": [...], "average": {...}}``: what ``--json`` prints and the asset keeps."""
    columns = [
        {
            "label": c.label,
            "metric": c.metric,
            "task": c.task,
            "version": board.versions.get(c.task or ""),
            "n_shot": c.n_shot,
            "prompt": c.prompt,
            "data": c.data,
            "higher_is_better": board.higher[c],
        }
        for c in board.columns
    ]
    rows = []
    for m in board.models:
        scores = {}
        for c in board.columns:
            cell = board.cells.get((m.key, c))
            if cell is not None:
                scores[c.label] = {
                    "value": cell.value,
                    "status": cell.status,
                    "version": cell.version,
                    "evaluated": cell.created,
                    "evaluation": cell.evaluation,
                }
        rows.append(
            {
                **asdict(m),
                "average": board.averages.get(m.key),
                "lacking": board.lacking.get(m.key, []),
                "scores": scores,
            }
        )
    average = {
        "tasks": board.average_tasks,
        "of": [c.label for c in board.average_of],
        "models": len(board.averages),
    }
    return {
        "rows": rows,
        "columns": columns,
        "average": average,
        "sorted_by": board.sorted_by,
        "skipped": board.skipped,
    }


def to_polars(board: Leaderboard) -> Any:
    """One row per model: its facts, the average and each column's valid value (null otherwise), with
    ``{label} status`` beside each column that has a result not valid."""
    import polars as pl

    records = []
    for m in board.models:
        record: dict[str, Any] = {
            "model": m.key,
            "names": " = ".join(m.names),
            "experiments": ", ".join(m.experiments),
            "version": m.version,
            "total_params": m.total_params,
            "total_active_params": m.total_active_params,
            "non_embedding_params": m.non_embedding_params,
            "tokens": m.tokens,
            "flops": m.total_flops,
            "base": m.base,
            "chat": m.chat,
            "average": board.averages.get(m.key),
        }
        for c in board.columns:
            cell = board.cells.get((m.key, c))
            record[c.label] = cell.value if cell is not None and cell.status == VALID else None
            record[f"{c.label} status"] = cell.status if cell is not None else None
        records.append(record)
    return pl.DataFrame(records, infer_schema_length=None)


def pareto_front(points: Iterable[tuple[float, float]], higher_is_better: bool) -> list[tuple[float, float]]:
    """The points no other beats on both FLOPs (fewer) and score, cheapest first."""
    front: list[tuple[float, float]] = []
    sign = -1.0 if higher_is_better else 1.0
    for x, y in sorted(points, key=lambda p: (p[0], sign * p[1])):
        if not front or sign * y < sign * front[-1][1]:
            front.append((x, y))
    return front


def plot(board: Leaderboard, path: Path, max_panels: int = 9) -> bool:
    """Each column's score against training FLOPs (with the base's for a fine-tune), one colour per
    experiment, the Pareto front as a step line. False when no column has two models to draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    flops = {m.key: m.total_flops for m in board.models}
    experiment = {m.key: m.experiment for m in board.models}
    panels = []
    for column in headline_columns(board):
        points = [
            (flops[key], cell.value, experiment[key])
            for (key, c), cell in board.cells.items()
            if c == column and cell.status == VALID and cell.value is not None and flops.get(key)
        ]
        if len(points) >= 2:
            panels.append((column, points))
    panels = sorted(panels, key=lambda panel: -len(panel[1]))[:max_panels]
    if not panels:
        return False
    colours = {e: f"C{i % 10}" for i, e in enumerate(sorted({e for _, ps in panels for *_, e in ps}))}
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    figure = Figure(figsize=(4.2 * cols, 3.4 * rows), dpi=100)
    FigureCanvasAgg(figure)
    for i, (column, points) in enumerate(panels):
        ax = figure.add_subplot(rows, cols, i + 1)
        for name, colour in colours.items():
            mine = [(x, y) for x, y, e in points if e == name]
            if mine:
                ax.scatter(*zip(*mine, strict=True), color=colour, s=18, label=name)
        front = pareto_front([(x, y) for x, y, _ in points], board.higher[column])
        ax.step(*zip(*front, strict=True), "k--", where="post", alpha=0.5, lw=1)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(column_heading(board, column), fontsize=8)
        ax.set_xlabel("training FLOPs", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
    seen: dict[str, Any] = {}
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    figure.legend(list(seen.values()), list(seen.keys()), fontsize=7, loc="lower center", ncol=4)
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    figure.savefig(path)
    return True


LEADERBOARD = ["leaderboard"]  # its place in the store
TABLE, PLOT, DATA = "leaderboard.parquet", "leaderboard.png", "leaderboard.json"


def write_leaderboard(
    store: ArtifactStore, experiment: str | None = None, **options: Any
) -> tuple[Artifact, bool]:
    """The leaderboard of ``store`` as an output of its own (the table as JSON and parquet, its plot, and
    the markdown table in its metadata), versioned by what it shows: nothing new in the store, nothing
    rewritten. ``experiment``: the markdown table keeps that experiment's rows only (the JSON and parquet
    keep every row, with its experiments, to filter on). Returns it and whether it was there already."""
    board = leaderboard(store, **options)
    data = as_json(board)
    version = version_hash(data if experiment is None else {**data, "shown": experiment})
    found = store.get(LEADERBOARD, version)
    if found is not None:
        return found, True
    with store.write(LEADERBOARD, version) as out:
        (out.path / DATA).write_text(json.dumps(data, indent=1))
        to_polars(board).write_parquet(out.path / TABLE)
        out.metadata["markdown"] = {"leaderboard": markdown(board, experiment=experiment)}
        if plot(board, out.path / PLOT):
            out.metadata["plots"] = {"each score against training FLOPs, with the Pareto front": PLOT}
        out.metadata.update(
            models=len(board.models),
            columns=len(board.columns),
            average_of=[c.label for c in board.average_of],
            experiment=experiment or "every one",
            table=f"{store.url(LEADERBOARD, version)}/{TABLE}",
        )
    artifact = store.get(LEADERBOARD, version)
    assert artifact is not None
    return artifact, False
