"""A preregistered forecast from text alone: tokenizer and cache, an IsoFLOP ladder, the forecast, the target.

``run_forecast`` is what ``marin-pipelines forecast`` runs; every piece is the library's own (the recipe
plans each run, the trainer trains it, the validation loss is measured as ``eval_results`` measures it,
``frontier.forecast`` extrapolates), so a number here is the number the pipeline would get.

Why the order matters: the forecast is only evidence if it is written before the run it predicts starts.
So the target's loss is predicted from the ladder alone, written to ``forecast.json`` with the time
(``preregistered_at``), and only then is the target trained (``target_started_at``); a rerun keeps that
file and its time. Everything that can make the work pointless is checked before anything trains: the
text is read and tokenized, every rung and the target are planned by the recipe, and each is checked to
read its data at most ``max_epochs`` times (a ladder that repeats its text measures memorisation, and
extrapolates nothing).

Layout of ``out_dir``::

    text.json                   what the cache was built from (files, sizes, vocabulary, split)
    cache/                      the token cache (tokenizer.json inside); reused while it matches
    arguments.json              the arguments, written as the first rung starts; a rerun must match
    rungs/<budget>/<shape>-s<seed>/   one training directory per rung, ``rung.json`` written last
    forecast.json               the preregistered forecast (written once, before the target starts)
    target/                     the target's training directory: ``started.json``, then ``rung.json``
    result.json                 prediction, actual loss and error: the line printed at the end

Every step resumes: a rung or target with a ``rung.json`` is finished and reused, one without resumes
from its last checkpoint (the trainer's own resumption), and the cache's chunks resume as ``build_cache``
resumes them.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from marin_pipelines.documents import KEPT_PREFIX
from marin_pipelines.scaling.isoflop_ladder import (
    MIN_BUDGETS,
    MIN_POINTS,
    IsoflopPlan,
    IsoflopRung,
    plan_rungs,
)
from marin_pipelines.scaling.recipe import ConstantRecipe, DelphiRecipe, RecipeRun, recipe
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, TokenCache
from marin_pipelines.train.train_config import STARTED_FILE

Say = Callable[[str], None]
ChosenRecipe = DelphiRecipe | ConstantRecipe

BOOTSTRAP = 200  # resamples for the forecast's interval
VALIDATION_FRACTION = CacheConfig.model_fields["validation_fraction"].default  # documents held out
EVAL_BATCH_SIZE = 16  # eval_results' default; the loss does not depend on it
DOCUMENT_SUFFIXES = (".jsonl", ".parquet")  # files that hold many documents; any other file is one
SKIPPED_NAMES = ("__pycache__",)  # bytecode caches beside source files: never text

TEXT_FILE = "text.json"
CACHE_DIR = "cache"
STAGED_DIR = "text"  # plain files gathered into JSON lines for the cache builder, removed once built
ARGUMENTS_FILE = "arguments.json"
RUNGS_DIR = "rungs"
RUNG_FILE = "rung.json"
FORECAST_FILE = "forecast.json"
TARGET_DIR = "target"
RESULT_FILE = "result.json"


# ---------------------------------------------------------------------------------------------- text


@dataclass(frozen=True)
class Text:
    """The files behind ``--text``: collections of documents (.jsonl, .parquet) read by the cache as they
    are, and plain files, each one document."""

    collections: list[Path]
    plain: list[Path]

    def fingerprint(self) -> list[list[Any]]:
        """Path, size and modification time of every file: a changed file rebuilds the cache."""
        files = sorted(self.collections + self.plain)
        return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def find_text(paths: Sequence[str | os.PathLike[str]]) -> Text:
    """Every file behind ``paths``. A folder holding ``documents-*.parquet`` (a document stage's or
    ``package_text``'s output) gives those shards only, not its manifest; any other folder gives every
    file under it, hidden ones and ``__pycache__`` left out. An empty folder is an error."""
    collections: list[Path] = []
    plain: list[Path] = []
    for given in paths:
        path = Path(given).expanduser().resolve()
        if path.is_dir():
            files = sorted(path.glob(f"{KEPT_PREFIX}-*.parquet")) or list(_files_under(path))
            if not files:
                raise FileNotFoundError(f"--text {given}: the folder holds no files")
        elif path.is_file():
            files = [path]
        else:
            raise FileNotFoundError(f"--text {given}: no such file or folder")
        for file in files:
            (collections if file.suffix in DOCUMENT_SUFFIXES else plain).append(file)
    return Text(collections, plain)


def _files_under(folder: Path) -> Iterator[Path]:
    """Files under ``folder`` in a stable order, without hidden names or bytecode caches."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_NAMES)
        yield from (Path(root) / f for f in sorted(files) if not f.startswith("."))


def stage_plain_files(files: Sequence[Path], out_file: Path) -> int:
    """Write each plain file as one JSON-lines document (the cache builder reads .txt, .jsonl and .parquet
    only, and a .txt per document would copy every file); returns the documents written. Files that are
    not UTF-8 text, or cannot be read, are one error naming them, and nothing is left written."""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    partial = out_file.with_name(f".{out_file.name}.partial")
    unreadable = []
    with partial.open("w") as f:
        for file in files:
            try:
                text = file.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError) as e:
                unreadable.append(f"{file} ({type(e).__name__})")
                continue
            f.write(json.dumps({"text": text}) + "\n")  # the id is the text's hash, as for a .txt file
    if unreadable:
        partial.unlink()
        more = len(unreadable) - 5
        shown = ", ".join(unreadable[:5]) + (f" and {more} more" if more > 0 else "")
        raise ValueError(
            f"cannot read {len(unreadable)} of {len(files)} files as UTF-8 text: {shown}; "
            "point --text at text files only"
        )
    os.replace(partial, out_file)
    return len(files)


def build_text_cache(
    texts: Sequence[str | os.PathLike[str]],
    out_dir: Path,
    vocab_size: int,
    reuse: bool,
    say: Say,
    validation_fraction: float = VALIDATION_FRACTION,
) -> TokenCache:
    """The token cache of ``texts`` in ``out_dir/cache``, with a BPE of ``vocab_size`` trained on them and
    ``validation_fraction`` of the documents held out.

    Reused when it was built from the same files, vocabulary and split, or whenever ``reuse`` (training
    has begun: from then on the cache is the ladder's data, whatever happens to the files)."""
    cache_dir, record_file = out_dir / CACHE_DIR, out_dir / TEXT_FILE
    if reuse and (cache_dir / "cache.json").is_file():
        return _opened(cache_dir, say, "reused")
    text = find_text(texts)
    record = {"texts": [str(Path(t).expanduser().resolve()) for t in texts], "vocab_size": vocab_size}
    record["validation_fraction"] = validation_fraction
    record["files"] = text.fingerprint()
    if (cache_dir / "cache.json").is_file() and _read_json(record_file) == record:
        return _opened(cache_dir, say, "reused")
    say(f"text: {len(text.plain)} files, {len(text.collections)} document collections")
    started = time.perf_counter()
    shutil.rmtree(cache_dir, ignore_errors=True)
    _build_cache(text, out_dir, CacheConfig(validation_fraction=validation_fraction), vocab_size)
    _write_json(record_file, record)
    return _opened(cache_dir, say, f"built in {time.perf_counter() - started:.1f} s")


def _build_cache(text: Text, out_dir: Path, config: CacheConfig, vocab_size: int) -> None:
    """Tokenizer, then cache, as ``marin-pipelines tokenize`` makes them, renamed into place when whole."""
    from marin_pipelines.tokenize.text_sources import read_chunk, text_chunks
    from marin_pipelines.tokenize.tokenized_cache import build_cache
    from marin_pipelines.tokenize.tokenizer import NoText, TokenizerConfig, train_tokenizer

    staged = out_dir / STAGED_DIR / "documents.jsonl"
    inputs = [str(f) for f in text.collections]
    if text.plain:
        stage_plain_files(text.plain, staged)
        inputs.append(str(staged))
    try:
        documents = (doc for chunk in text_chunks(inputs) for _, doc in read_chunk(chunk))
        tokenizer = train_tokenizer(documents, TokenizerConfig(vocab_size=vocab_size))
    except NoText as e:
        raise ValueError(f"--text: {e}") from None
    tmp = out_dir / f".{CACHE_DIR}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        build_cache(inputs, tokenizer, tmp, config, out_dir / f".{CACHE_DIR}.work")
        os.replace(tmp, out_dir / CACHE_DIR)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(out_dir / STAGED_DIR, ignore_errors=True)


def _opened(cache_dir: Path, say: Say, how: str) -> TokenCache:
    """The cache, refused without validation text (a single document): the ladder fits held-out loss."""
    cache = TokenCache(cache_dir)
    train, validation = cache.info["splits"]["train"], cache.info["splits"]["validation"]
    if len(cache.validation) < 2:
        raise ValueError(
            f"the text is {train['documents'] + validation['documents']} document(s), too few to hold out "
            "a validation split; give --text at least two documents"
        )
    say(
        f"cache {how}: vocabulary {cache.info['vocab_size']}, {train['tokens']:,} training tokens "
        f"({train['documents']} documents), {validation['tokens']:,} validation tokens "
        f"({validation['documents']} documents)"
    )
    return cache


# ---------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Rung(IsoflopRung):
    """One run of the ladder (or the target): what the recipe decided, and where it trains."""

    folder: Path

    @property
    def label(self) -> str:
        return f"budget {budget_key(self.run.budget)} {self.run.size} seed {self.seed}"


@dataclass(frozen=True)
class Plan(IsoflopPlan):
    """The ladder's plan with each rung's folder, and the target."""

    rungs: list[Rung]  # type: ignore[assignment]
    target: Rung


def rung_folder(out_dir: Path, budget: float, size: str, seed: int) -> Path:
    """Where a rung trains: ``rungs/{budget}/{size}-s{seed}`` under the command's ``--out``."""
    return out_dir / RUNGS_DIR / budget_key(budget) / f"{size}-s{seed}"


def plan_ladder(
    chosen: ChosenRecipe,
    budgets: Sequence[float],
    target: float,
    seeds: int,
    out_dir: Path,
    *,
    vocab_size: int,
    seq_len: int,
    points_per_budget: int,
) -> Plan:
    """Every rung and the target, as the recipe makes them (``isoflop_ladder.plan_rungs``, as the Dagster
    ladder plans them); an error, before anything trains, for a budget whose optimum cannot be bracketed."""
    planned = plan_rungs(
        chosen,
        list(budgets),
        seeds,
        vocab_size=vocab_size,
        seq_len=seq_len,
        points_per_budget=points_per_budget,
    )
    rungs = [
        Rung(r.run, r.seed, rung_folder(out_dir, r.run.budget, r.run.size, r.seed)) for r in planned.rungs
    ]
    try:
        target_run = chosen.run(target, vocab_size, seq_len)
    except ValueError as e:
        raise ValueError(f"--target {budget_key(target)}: {e}") from None
    return Plan(rungs, planned.refused, planned.merged, Rung(target_run, 0, out_dir / TARGET_DIR))


def needed_tokens(run: RecipeRun, max_epochs: float) -> int:
    """Training tokens for ``run`` to read its data at most ``max_epochs`` times: the sequences it reads
    over max_epochs, as whole sequences of seq_len (+1 for the last target), as ``MixtureConfig.epochs``
    counts them."""
    sequences = run.train.steps * run.train.batch_size
    return math.ceil(sequences / max_epochs) * run.model.seq_len + 1


def check_data(plan: Plan, train_tokens: int, max_epochs: float) -> None:
    """Refuse, before anything trains, a plan whose rungs or target would read the training split more
    than ``max_epochs`` times, saying how many tokens the target (and the hungriest rung) need."""
    mixture = MixtureConfig()

    def epochs(rung: Rung) -> float:
        train, seq_len = rung.run.train, rung.run.model.seq_len
        return mixture.epochs(train.batch_size, train.steps, seq_len, {"main": train_tokens})["main"]

    over = [r for r in [*plan.rungs, plan.target] if epochs(r) > max_epochs]
    if not over:
        return
    hungriest = max(plan.rungs, key=lambda r: needed_tokens(r.run, max_epochs))
    target = plan.target
    raise ValueError(
        f"the text is too small: its training split holds {train_tokens:,} tokens, and {len(over)} of "
        f"{len(plan.rungs) + 1} runs would read it more than --max-epochs {max_epochs:g} times. The target "
        f"({target.run.size} at {budget_key(target.run.budget)} FLOPs, {target.run.tokens:,} tokens) needs "
        f"{needed_tokens(target.run, max_epochs):,} training tokens (it would read the text "
        f"{epochs(target):.2f} times); the hungriest rung ({hungriest.label}, {hungriest.run.tokens:,} "
        f"tokens) needs {needed_tokens(hungriest.run, max_epochs):,}. Give more text, lower the budgets "
        "and --target, or raise --max-epochs"
    )


# --------------------------------------------------------------------------------------------- train


def validation_loss(folder: Path, cache: TokenCache) -> dict[str, float | int]:
    """The checkpoint's loss on the cache's validation split, computed as ``eval_results`` computes the
    loss a scaling law fits (``evaluate_bpb_sets`` over the training source's validation tokens)."""
    from marin_pipelines.evals.eval_results import evaluate_bpb_sets
    from marin_pipelines.tokenize.tokenizer import load_tokenizer, token_byte_lengths
    from marin_pipelines.train.checkpoint import load_checkpoint

    model, config = load_checkpoint(folder)
    token_bytes = token_byte_lengths(load_tokenizer(Path(cache.url)))
    sets = {"main": np.asarray(cache.validation)}
    return evaluate_bpb_sets(model, sets, token_bytes, config.seq_len, EVAL_BATCH_SIZE)["overall"]


def train_rung(rung: Rung, cache: TokenCache) -> dict[str, Any]:
    """Train (resuming from the folder's last checkpoint), evaluate, and write ``rung.json`` last: the
    record that says the rung is finished. Returns that record."""
    from marin_pipelines.tokenize.data_mixture import MixtureLoader
    from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE
    from marin_pipelines.train.trainer import train

    run = rung.run
    started = time.perf_counter()
    loader = MixtureLoader.from_config(
        MixtureConfig(), cache.url, run.model.seq_len, run.train.batch_size, run.train.seed
    )
    rung.folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(cache.url) / TOKENIZER_FILE, rung.folder / TOKENIZER_FILE)  # `eval` finds it here
    summary = train(run.model, run.train, loader, rung.folder, progress=False)
    evaluated = validation_loss(rung.folder, cache)
    record = {
        **_identity(rung),
        "loss": evaluated["loss"],
        "bits_per_byte": evaluated["bits_per_byte"],
        "train_loss": summary["final_loss"],
        "seconds": time.perf_counter() - started,
        "describe": run.describe(),
    }
    _write_json(rung.folder / RUNG_FILE, record)
    return record


def _identity(rung: Rung) -> dict[str, Any]:
    """What a finished rung must match to be reused: the run's numbers and its full configs."""
    run = rung.run
    return {
        "budget": run.budget,
        "params": run.params,
        "tokens": run.tokens,
        "flops": run.flops,
        "seed": rung.seed,
        "size": run.size,
        "model": run.model.model_dump(),
        "train": run.train.model_dump(),
    }


def finished(rung: Rung) -> dict[str, Any] | None:
    """The rung's record if it finished, None if not; an error if it finished as another run."""
    record = _read_json(rung.folder / RUNG_FILE)
    if record is None:
        return None
    expected = _identity(rung)
    differ = sorted(k for k in expected if record.get(k) != expected[k])
    if differ:
        raise ValueError(
            f"{rung.folder} holds a finished run that differs in {differ}; use a fresh --out, or the "
            "arguments it was made with"
        )
    return record


def run_rungs(plan: Plan, cache: TokenCache, say: Say) -> list[dict[str, Any]]:
    """Each rung trained and evaluated, or reused when finished; their records, in plan order."""
    records = []
    for i, rung in enumerate(plan.rungs, start=1):
        record = finished(rung)
        how = "reused"
        if record is None:
            record = train_rung(rung, cache)
            how = f"{record['seconds']:.1f} s"
        say(f"rung {i}/{len(plan.rungs)}: {rung.label}: loss {record['loss']:.4f} ({how})")
        records.append(record)
    return records


# ------------------------------------------------------------------------------------------ forecast


def read_forecast(path: Path, cache: TokenCache) -> dict[str, Any]:
    """A preregistered forecast (the ``forecast.json`` of the forecast command or of the isoflop_forecast
    step) whose ladder trained on ``cache``; a ValueError that says why for any other file or cache."""
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable forecast ({e})") from None
    missing = [k for k in ("prediction", "forecast", "runs") if k not in content]
    if missing:
        raise ValueError(f"{path} is not a preregistered forecast: it has no {', '.join(missing)}")
    check_same_cache(content, cache)
    return content


def check_same_cache(preregistered: dict[str, Any], cache: TokenCache) -> None:
    """Refuse a cache other than the one a forecast's ladder trained on (the ``cache`` it recorded, a
    ``TokenCache.identity``): runs on other data would be set against it without any error. A forecast
    written before forecasts recorded their cache passes."""
    recorded = preregistered.get("cache")
    if recorded is not None and recorded != cache.identity:
        raise ValueError(
            f"the forecast's ladder trained on the token cache {recorded}, and {cache.url} is "
            f"{cache.identity}: give the cache the ladder trained on"
        )


def preregister(
    plan: Plan,
    records: Sequence[dict[str, Any]],
    chosen: ChosenRecipe,
    cache: TokenCache,
    out_dir: Path,
    say: Say,
) -> dict[str, Any]:
    """The target's loss forecast from the ladder, written to ``forecast.json`` with the time, once: a
    rerun reads the file back and never rewrites its time. Returns the file's content."""
    from marin_pipelines.scaling.frontier import forecast

    path = out_dir / FORECAST_FILE
    written = _read_json(path)
    if written is not None:
        say(
            f"forecast reused: loss {written['prediction']['loss']:.4f}, preregistered at "
            f"{written['preregistered_at']}"
        )
        return written
    runs = [{k: r[k] for k in ("budget", "params", "tokens", "loss", "seed")} for r in records]
    try:
        predicted = forecast(runs, plan.target.run.budget, bootstrap=BOOTSTRAP, seed=0)
    except ValueError as e:
        raise ValueError(
            f"the ladder cannot forecast: {e}. The rungs' losses are in {out_dir / RUNGS_DIR}; more points "
            "per budget, more seeds or larger budgets may bracket each optimum"
        ) from None
    low, high = predicted.loss_interval
    content = {
        "preregistered_at": _now(),
        "recipe": chosen.name,
        "recipe_config": chosen.model_dump(),
        "cache": cache.identity,
        "target": plan.target.run.describe(),
        "prediction": {"loss": predicted.loss, "low": low, "high": high},
        "forecast": predicted.as_dict(),
        "runs": [{**run, "size": r["size"]} for run, r in zip(runs, records, strict=True)],
        "refused": plan.refused,
        "merged": plan.merged,
    }
    _write_json(path, content)
    say(
        f"forecast: loss {predicted.loss:.4f} [{low:.4f}, {high:.4f}] for {plan.target.label}, "
        f"preregistered at {content['preregistered_at']} in {path}"
    )
    for warning in predicted.warnings:
        say(f"forecast warning: {warning}")
    return content


def run_target(plan: Plan, cache: TokenCache, say: Say) -> tuple[dict[str, Any], str]:
    """The target trained and evaluated (or reused), and when it first started: the trainer records that
    (``started.json``) before the first step and keeps it when the run resumes."""
    target = plan.target
    record = finished(target)
    if record is None:
        say(f"target: {target.label}: {target.run.tokens:,} tokens, training")
        record = train_rung(target, cache)
        how = f"{record['seconds']:.1f} s"
    else:
        how = "reused"
    say(f"target: {target.label}: loss {record['loss']:.4f} ({how})")
    started = _read_json(target.folder / STARTED_FILE)
    if started is None:
        raise ValueError(f"{target.folder} has no {STARTED_FILE}: when the target started is not known")
    return record, started["started_at"]


# ------------------------------------------------------------------------------------------- overall


def run_forecast(
    texts: Sequence[str | os.PathLike[str]],
    budgets: Sequence[float],
    target: float,
    recipe_name: str = "delphi",
    seeds: int = 1,
    out_dir: str | os.PathLike[str] = "forecast",
    *,
    vocab_size: int = 2048,
    seq_len: int = 128,
    max_epochs: float = 1.0,
    points_per_budget: int = 5,
    validation_fraction: float = VALIDATION_FRACTION,
    recipe_overrides: dict[str, Any] | None = None,
    progress: Say | None = None,
) -> dict[str, Any]:
    """Text in, a preregistered forecast checked against its target out (module docstring).

    Returns (and writes to ``result.json``) the recipe, the prediction with its interval, the target's
    actual validation loss, the relative error (pred - actual) / actual, the extrapolation (target over
    the largest budget), both times, the ladder's run count, the seeds' spread and the CPU seconds this
    call spent (this process's threads and any children it waited for; a rerun that reuses everything
    spends almost none). Bad input is a ValueError / FileNotFoundError before anything trains.
    """
    cpu_at_start = cpu_seconds()
    texts = [texts] if isinstance(texts, str | os.PathLike) else texts  # one path, not its characters
    say = progress or (lambda _: None)
    out = Path(out_dir)
    arguments = _arguments(texts, budgets, target, recipe_name, recipe_overrides, seeds)
    arguments.update(vocab_size=vocab_size, seq_len=seq_len, points_per_budget=points_per_budget)
    arguments.update(validation_fraction=validation_fraction)
    _check_arguments(arguments, max_epochs)
    chosen = recipe(recipe_name, **(recipe_overrides or {}))
    began = _read_json(out / ARGUMENTS_FILE)
    if began is not None and began != arguments:
        differ = sorted(k for k in arguments if began.get(k) != arguments[k])
        raise ValueError(
            f"{out} holds a forecast made with other arguments ({', '.join(differ)}); use a fresh --out, or "
            "the same arguments to resume it"
        )

    def planned(vocab: int) -> Plan:
        return plan_ladder(
            chosen, budgets, target, seeds, out, vocab_size=vocab, seq_len=seq_len,
            points_per_budget=points_per_budget,
        )  # fmt: skip

    planned(vocab_size)  # the recipe's refusals, before the text is read
    out.mkdir(parents=True, exist_ok=True)
    cache = build_text_cache(texts, out, vocab_size, began is not None, say, validation_fraction)
    plan = planned(cache.info["vocab_size"])  # a BPE on little text may stop short of vocab_size
    check_data(plan, len(cache.train), max_epochs)
    _say_plan(plan, len(budgets), say)
    if began is None:  # from here on, the cache is this ladder's data and a rerun must match
        _write_json(out / ARGUMENTS_FILE, arguments)
    records = run_rungs(plan, cache, say)
    preregistered = preregister(plan, records, chosen, cache, out, say)
    actual, started_at = run_target(plan, cache, say)
    prediction = preregistered["prediction"]
    result = {
        "recipe": chosen.name,
        "prediction": prediction,
        "actual": actual["loss"],
        "error": (prediction["loss"] - actual["loss"]) / actual["loss"],
        "extrapolation": target / max(budgets),
        "preregistered_at": preregistered["preregistered_at"],
        "target_started_at": started_at,
        "runs": len(records),
        "seed_spread": preregistered["forecast"]["seed_spread"],
        "cpu_seconds": cpu_seconds() - cpu_at_start,
    }
    _write_json(out / RESULT_FILE, result)
    return result


def _arguments(
    texts: Sequence[str | os.PathLike[str]],
    budgets: Sequence[float],
    target: float,
    recipe_name: str,
    recipe_overrides: dict[str, Any] | None,
    seeds: int,
) -> dict[str, Any]:
    """The arguments that decide the results, as ``arguments.json`` records them."""
    return {
        "texts": [str(Path(t).expanduser().resolve()) for t in texts],
        "budgets": sorted(float(b) for b in budgets),
        "target": float(target),
        "recipe": recipe_name,
        "recipe_overrides": dict(sorted((recipe_overrides or {}).items())),
        "seeds": seeds,
    }


def _check_arguments(arguments: dict[str, Any], max_epochs: float) -> None:
    budgets, target = arguments["budgets"], arguments["target"]
    if not arguments["texts"]:
        raise ValueError("--text: give at least one file or folder")
    if not all(math.isfinite(b) and b > 0 for b in [*budgets, target]):
        raise ValueError(f"--budgets and --target must be positive and finite, got {budgets} and {target}")
    if len(set(budgets)) < MIN_BUDGETS:
        raise ValueError(f"--budgets: the frontier needs {MIN_BUDGETS} distinct budgets, got {budgets}")
    if arguments["seeds"] < 1:
        raise ValueError(f"--seeds must be >= 1, got {arguments['seeds']}")
    if arguments["points_per_budget"] < MIN_POINTS:
        raise ValueError(f"--points-per-budget must be >= {MIN_POINTS}, got {arguments['points_per_budget']}")
    try:  # the cache's own rule for the split, refused by the flag's name before the text is read
        CacheConfig(validation_fraction=arguments["validation_fraction"])
    except ValidationError as e:
        raise ValueError(
            f"--validation-fraction: {e.errors()[0]['msg']}, got {arguments['validation_fraction']}"
        ) from None
    if not (math.isfinite(max_epochs) and max_epochs > 0):
        raise ValueError(f"--max-epochs must be positive, got {max_epochs}")


def _say_plan(plan: Plan, budgets: int, say: Say) -> None:
    refused = sum(len(r) for r in plan.refused.values())
    merged = sum(plan.merged.values())
    target = plan.target.run
    say(
        f"plan: {len(plan.rungs)} rungs over {budgets} budgets ({refused} sweep points refused by the "
        f"recipe, {merged} on a shape already taken); target {target.size} at {budget_key(target.budget)} "
        f"FLOPs, {target.tokens:,} tokens"
    )


def cpu_seconds() -> float:
    """CPU time of this process so far (all threads) and its finished children, user + system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def _write_json(path: Path, data: Any) -> None:
    """Whole or not at all: a reader (or a rerun after a kill) never finds half a file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=2))
    os.replace(partial, path)
