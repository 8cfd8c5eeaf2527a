"""A preregistered forecast from text alone, as steps: what ``marin-pipelines forecast`` runs.

The steps are the ``scaling_forecast`` experiment's, declared by the same helpers and run by the same
Dagster-free runner as ``process-crawl`` (``step_runner.run_steps``), in the store at ``--out``::

    forecast/text_files -> tokenizer -> tokenized_cache -> isoflop_checkpoint (one partition per rung)
      -> ladder_eval_results -> isoflop_forecast -> checkpoint (the target) -> eval_results -> isoflop_law

Why the order matters: the forecast is only evidence if it is written before the run it predicts starts.
The target's checkpoint step runs after ``isoflop_forecast`` (an edge of the graph), which records the
prediction with the time and never sees the target; ``isoflop_law`` then checks that the forecast was
written before the target first started, and scores it. Everything that can make the work pointless is
checked before anything trains: the recipe plans every rung and the target before the text is read, and
once the text is tokenized, no rung and not the target may read it more than ``max_epochs`` times (a ladder
that repeats its text measures memorisation, and extrapolates nothing).

Every step is reused by version: a rerun with the same arguments and files trains nothing and writes
nothing, and a killed run resumes (a rung or the target from its last checkpoint). Other arguments, or a
changed file, are other versions beside the first forecast, which stays as it was.
"""

from __future__ import annotations

import json
import math
import os
import resource
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from marin_pipelines.crawl.text_files import find_text
from marin_pipelines.experiments.defaults import (
    IsoflopLadder,
    Target,
    TokenSteps,
    forecast_target,
    isoflop_ladder,
    step,
    tokenizer_and_cache,
)
from marin_pipelines.scaling.isoflop_ladder import (
    MIN_BUDGETS,
    MIN_POINTS,
    IsoflopLadderConfig,
    IsoflopPlan,
    rung_label,
    target_run,
)
from marin_pipelines.scaling.recipe import RecipeRun, recipe
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.stages.scaling import FORECAST, RESULT
from marin_pipelines.stages.text_files import text_files
from marin_pipelines.step_runner import StepRun, run_steps
from marin_pipelines.steps import Step
from marin_pipelines.store import ArtifactStore
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, TokenCache
from marin_pipelines.train.train_config import TrainConfig

Say = Callable[[str], None]
PREFIX = "forecast"  # the steps' names: forecast/text_files, forecast/isoflop_checkpoint, ...
VALIDATION_FRACTION = CacheConfig.model_fields["validation_fraction"].default  # documents held out


@dataclass(frozen=True)
class ForecastSteps:
    text: Step  # its text_files step
    tokens: TokenSteps
    ladder: IsoflopLadder
    target: Target

    @property
    def train(self) -> TrainConfig:
        """What the recipe leaves to the rungs (``max_epochs``): they are planned with it."""
        return self.ladder.checkpoints.config.train


def forecast_steps(
    texts: Sequence[str | os.PathLike[str]],
    budgets: Sequence[float],
    target: float,
    recipe_config: dict[str, Any],
    seeds: int,
    *,
    vocab_size: int,
    seq_len: int,
    max_epochs: float,
    points_per_budget: int,
    validation_fraction: float,
) -> ForecastSteps:
    """The forecast's steps (module docstring), declared over ``texts``; nothing runs."""
    paths = [str(os.path.abspath(os.path.expanduser(t))) for t in texts]
    text = step(f"{PREFIX}/text_files", text_files, {"paths": paths}, {})
    tokens = tokenizer_and_cache(
        PREFIX,
        text,
        tokenizer={"vocab_size": vocab_size},
        cache={"validation_fraction": validation_fraction},
    )
    ladder_config = {
        "recipe": recipe_config,
        "budgets": list(budgets),
        "points_per_budget": points_per_budget,
        "seeds": seeds,
        "vocab_size": vocab_size,
        "seq_len": seq_len,
        "target_budget": target,
    }
    ladder = isoflop_ladder(PREFIX, tokens, ladder=ladder_config, train={"max_epochs": max_epochs})
    return ForecastSteps(text, tokens, ladder, forecast_target(PREFIX, ladder))


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

    Returns the recipe, the prediction with its interval, the target's actual validation loss, the relative
    error (pred - actual) / actual, the extrapolation (target over the largest budget), both times, the
    ladder's run count, the seeds' spread and the CPU seconds this call spent (a rerun that reuses
    everything spends almost none). Bad input is a ValueError / FileNotFoundError before anything trains.
    """
    cpu_at_start = cpu_seconds()
    texts = [texts] if isinstance(texts, str | os.PathLike) else list(texts)  # one path, not its characters
    say = progress or (lambda _: None)
    check_arguments(texts, budgets, target, seeds, points_per_budget, validation_fraction, max_epochs)
    chosen = recipe(recipe_name, **(recipe_overrides or {}))  # an unknown recipe or constant: its error
    steps = forecast_steps(
        texts, budgets, target, {"name": chosen.name, **(recipe_overrides or {})}, seeds,
        vocab_size=vocab_size, seq_len=seq_len, max_epochs=max_epochs,
        points_per_budget=points_per_budget, validation_fraction=validation_fraction,
    )  # fmt: skip
    ladder = steps.ladder.config
    plan = ladder.plan(steps.train)  # the recipe's refusals, before the text is read
    try:
        target_planned = target_run(ladder.target(), steps.train)
    except ValueError as e:
        raise ValueError(f"--target {budget_key(target)}: {e}") from None
    find_text(texts)  # a missing file or an empty folder, before anything is written
    store = ArtifactStore(out_dir)
    data = run_steps([steps.tokens.cache], store, log=say)
    cache = opened_cache(data, steps, say)
    check_data(plan, target_planned, len(cache.train), max_epochs)
    say_plan(plan, ladder, target_planned, say)
    done = run_steps([steps.target.scaling_law], store, log=say, found=data)
    return summary(done, steps, chosen.name, cpu_seconds() - cpu_at_start, say)


def check_arguments(
    texts: Sequence[str | os.PathLike[str]],
    budgets: Sequence[float],
    target: float,
    seeds: int,
    points_per_budget: int,
    validation_fraction: float,
    max_epochs: float,
) -> None:
    """The command's arguments, each refused by its flag's name before anything is read."""
    if not texts:
        raise ValueError("--text: give at least one file or folder")
    if not all(math.isfinite(b) and b > 0 for b in [*budgets, target]):
        raise ValueError(f"--budgets and --target must be positive and finite, got {budgets} and {target}")
    if len(set(budgets)) < MIN_BUDGETS:
        raise ValueError(f"--budgets: the frontier needs {MIN_BUDGETS} distinct budgets, got {list(budgets)}")
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    if points_per_budget < MIN_POINTS:
        raise ValueError(f"--points-per-budget must be >= {MIN_POINTS}, got {points_per_budget}")
    try:  # the cache's own rule for the split
        CacheConfig(validation_fraction=validation_fraction)
    except ValidationError as e:
        raise ValueError(
            f"--validation-fraction: {e.errors()[0]['msg']}, got {validation_fraction}"
        ) from None
    if not (math.isfinite(max_epochs) and max_epochs > 0):
        raise ValueError(f"--max-epochs must be positive, got {max_epochs}")


def opened_cache(data: StepRun, steps: ForecastSteps, say: Say) -> TokenCache:
    """The token cache the steps made or found, refused without validation text: every run's loss is
    measured on it."""
    cache = TokenCache(data.output(steps.tokens.cache).url)
    train, validation = cache.info["splits"]["train"], cache.info["splits"]["validation"]
    if len(cache.validation) < 2:
        raise ValueError(
            f"the text is {train['documents'] + validation['documents']} document(s), too few to hold out "
            "a validation split; give --text at least two documents"
        )
    how = "built" if data.was_built(steps.tokens.cache) else "reused"
    say(
        f"cache {how}: vocabulary {cache.info['vocab_size']}, {train['tokens']:,} training tokens "
        f"({train['documents']} documents), {validation['tokens']:,} validation tokens "
        f"({validation['documents']} documents)"
    )
    return cache


def needed_tokens(run: RecipeRun, max_epochs: float) -> int:
    """Training tokens for ``run`` to read its data at most ``max_epochs`` times: the sequences it reads
    over max_epochs, as whole sequences of seq_len (+1 for the last target), as ``MixtureConfig.epochs``
    counts them."""
    sequences = run.train.steps * run.train.batch_size
    return math.ceil(sequences / max_epochs) * run.model.seq_len + 1


def check_data(plan: IsoflopPlan, target: RecipeRun, train_tokens: int, max_epochs: float) -> None:
    """Refuse, before anything trains, a ladder whose rungs or target would read the training split more
    than ``max_epochs`` times, saying how many tokens the target (and the hungriest rung) need."""
    mixture = MixtureConfig()

    def epochs(run: RecipeRun) -> float:
        train, seq_len = run.train, run.model.seq_len
        return mixture.epochs(train.batch_size, train.steps, seq_len, {"main": train_tokens})["main"]

    runs = [rung.run for rung in plan.rungs]
    over = [run for run in [*runs, target] if epochs(run) > max_epochs]
    if not over:
        return
    hungriest = max(plan.rungs, key=lambda r: needed_tokens(r.run, max_epochs))
    raise ValueError(
        f"the text is too small: its training split holds {train_tokens:,} tokens, and {len(over)} of "
        f"{len(runs) + 1} runs would read it more than --max-epochs {max_epochs:g} times. The target "
        f"({target.size} at {budget_key(target.budget)} FLOPs, {target.tokens:,} tokens) needs "
        f"{needed_tokens(target, max_epochs):,} training tokens (it would read the text "
        f"{epochs(target):.2f} times); the hungriest rung ({hungriest.label}, "
        f"{hungriest.run.tokens:,} tokens) needs {needed_tokens(hungriest.run, max_epochs):,}. Give more "
        "text, lower the budgets and --target, or raise --max-epochs"
    )


def say_plan(plan: IsoflopPlan, ladder: IsoflopLadderConfig, target: RecipeRun, say: Say) -> None:
    refused = sum(len(r) for r in plan.refused.values())
    merged = sum(plan.merged.values())
    say(
        f"plan: {len(plan.rungs)} rungs over {len(ladder.budgets)} budgets ({refused} sweep points refused "
        f"by the recipe, {merged} on a shape already taken); target {target.size} at "
        f"{budget_key(target.budget)} FLOPs, {target.tokens:,} tokens"
    )


def summary(done: StepRun, steps: ForecastSteps, recipe_name: str, cpu: float, say: Say) -> dict[str, Any]:
    """Each rung's loss, the forecast and the target said, and the command's result: its last line."""
    trained, evaluated = steps.ladder.checkpoints, steps.ladder.evaluations
    rungs = done.partitions(evaluated)
    for i, key in enumerate(rungs, start=1):
        m = rungs[key].metadata
        label = rung_label(m["budget_flops"], m["shape"], m["seed"])
        say(f"rung {i}/{len(rungs)}: {label}: loss {m['loss']:.4f} ({how_made(done, trained, key)})")
    prediction = done.output(steps.target.prediction)
    record = json.loads(prediction.file(FORECAST).read_text())
    (low_80, high_80), (low, high) = record["prediction"]["interval_80"], record["prediction"]["interval_95"]
    said = "forecast" if done.was_built(steps.target.prediction) else "forecast reused"
    say(
        f"{said}: loss {record['prediction']['loss']:.4f}, 80% [{low_80:.4f}, {high_80:.4f}], 95% "
        f"[{low:.4f}, {high:.4f}], preregistered at {record['preregistered_at']} "
        f"({prediction.file(FORECAST)})"
    )
    for warning in prediction.metadata.get("warnings", []):
        say(f"forecast warning: {warning}")
    law = done.output(steps.target.scaling_law)
    result = law.metadata["result"]
    target = record["target"]
    label = rung_label(target["budget"], target["shape"], 0)
    say(
        f"target: {label}: loss {result['actual']:.4f} ({how_made(done, steps.target.checkpoint)}); "
        f"the result: {law.file(RESULT)}"
    )
    return {
        "recipe": recipe_name,
        "prediction": record["prediction"],
        "interval_80": record["prediction"]["interval_80"],
        "interval_95": record["prediction"]["interval_95"],
        "actual": result["actual"],
        "error": result["error"],
        "extrapolation": result["extrapolation"],
        "preregistered_at": result["preregistered_at"],
        "target_started_at": result["target_started_at"],
        "runs": len(record["runs"]),
        "seed_spread": result["seed_spread"],
        "cpu_seconds": cpu,
    }


def how_made(done: StepRun, step: Step, partition: str | None = None) -> str:
    """``12.3 s`` for an output this run built, ``reused`` for one it found."""
    if not done.was_built(step, partition):
        return "reused"
    artifact = done.partitions(step)[partition] if partition else done.output(step)
    return f"{artifact.manifest['wall_seconds']:.1f} s"


def cpu_seconds() -> float:
    """CPU time of this process so far (all threads) and its finished children, user + system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
