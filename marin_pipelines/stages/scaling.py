"""The preregistered forecast of an IsoFLOP ladder, the forecast against its target, and the speedrun.

``isoflop_forecast`` reads only the ladder (``isoflop_checkpoint`` rungs, planned by a scaling recipe, and
their evaluations) and the caches they trained on: each budget's optimum, the frontier L*(C), the target's
loss and downstream scores, the rung table, the plots and whether the ladder can support the extrapolation,
stamped with the time. It is recorded before the target run starts and never sees it: the target's
checkpoint step runs after it (an ``after`` edge in the graph). ``isoflop_law`` draws both and checks the
target's actual loss against the record.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from marin_pipelines.evals.eval_results import EVAL_BATCH_SIZE
from marin_pipelines.evals.launch_config import EvalLaunch
from marin_pipelines.scaling.downstream import (
    DownstreamForecast,
    downstream_error,
    downstream_forecast,
    plot_downstream,
)
from marin_pipelines.scaling.fit import CONFIDENCE
from marin_pipelines.scaling.frontier import Forecast, forecast
from marin_pipelines.scaling.isoflop_report import (
    plot_frontier,
    plot_isoflop_curves,
    plot_seed_spread,
    write_rung_table,
)
from marin_pipelines.scaling.ladder_diagnostics import MAX_TARGET_EPOCHS, mixture_diagnostics
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.scaling.speedrun import (
    Submission,
    discover_submissions,
    leaderboard_markdown,
    plot_leaderboard,
    submission_result,
)
from marin_pipelines.stages.train import TrainRunConfig, launch_training, mixture_of_inputs
from marin_pipelines.steps import Check, InputError, StepContext, stage
from marin_pipelines.store import Artifact, PendingArtifact, read_url, write_url
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.train_config import TrainConfig

LEADERBOARD = "leaderboard.md"
LEADERBOARD_PLOT = "leaderboard.png"


class SpeedrunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    submissions: list[str] = Field(
        default_factory=list, description="speedrun submissions (names under experiments/speedrun/) to run"
    )
    eval_batch_size: int = Field(
        EVAL_BATCH_SIZE, ge=1, description="sequences per forward pass of each run's evaluation"
    )

    @field_validator("submissions")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        known = {s.name for s in discover_submissions()}
        if unknown := sorted(set(names) - known):
            raise ValueError(f"unknown speedrun submissions {unknown}; allowed: {sorted(known)}")
        return names


def submission_configs(config: SpeedrunConfig) -> dict[str, Any]:
    """The chosen submissions' full configs: editing a submission file reruns the leaderboard."""
    return {s.name: s.model_dump() for s in discover_submissions() if s.name in config.submissions}


@stage(SpeedrunConfig, group="scaling", kinds=("jax",), needs=("launcher",), fingerprint=submission_configs)
def speedrun_leaderboard(
    ctx: StepContext,
    out: PendingArtifact,
    config: SpeedrunConfig,
    tokenized_cache: Artifact,
    tokenizer: Artifact,
) -> None:
    """The chosen speedrun submissions trained at their budgets on this data, ranked by bits-per-byte.

    Each run trains and is evaluated through the launcher, as the ladder's rungs are."""
    validation = {"validation": [tokenized_cache.url]}

    def run(submission: Submission, budget: float) -> dict[str, Any]:
        # in the work folder: a retried leaderboard resumes each run where it stopped
        run_dir = f"{out.work}/runs/{submission.name}-{budget_key(budget)}"
        model, train = submission.run_config(budget, tokenized_cache.metadata["vocab_size"])
        summary = launch_training(run_dir, tokenized_cache, ctx.launcher, MixtureConfig(), model, train)
        evals = f"{run_dir}/eval.json"
        tokenizer_file = f"{tokenizer.url}/{TOKENIZER_FILE}"
        launch = EvalLaunch(
            checkpoint=run_dir,
            tokenizer=tokenizer_file,
            bpb=validation,
            batch_size=config.eval_batch_size,
            out=evals,
        )
        ctx.launcher.evaluate(launch)
        bpb = json.loads(read_url(evals))["bpb"]["validation"]["bits_per_byte"]
        result = submission_result(submission, budget, summary, bpb)
        write_url(f"{run_dir}/results.json", json.dumps(result, indent=2))
        return result

    results = [
        run(submission, budget)
        for submission in discover_submissions()
        if submission.name in config.submissions
        for budget in submission.budgets
    ]
    out.keep_work()
    table = leaderboard_markdown(results) if results else "no submissions chosen"
    (out.path / LEADERBOARD).write_text(table + "\n")
    out.metadata.update(markdown={"leaderboard": table}, runs=len(results))  # a table in the UI, first
    if results:
        plot_leaderboard(results, out.path / LEADERBOARD_PLOT)
        out.metadata["plots"] = {"speedrun": LEADERBOARD_PLOT}


# ------------------------------------------------------------------------------------------ IsoFLOP ladders

FORECAST = "forecast.json"
RUNG_TABLE = "rungs.parquet"
RESULT = "result.json"


class IsoflopForecastConfig(BaseModel):
    """The run forecast (the very config its checkpoint step trains with), the bootstrap, and the evaluation
    scores forecast through the loss (compute -> loss -> score)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: TrainRunConfig = Field(
        description="the run forecast, the very config its checkpoint step trains with: an IsoFLOP ladder's "
        "target (a recipe and target_budget)"
    )
    bootstrap: int = Field(200, ge=0, description="bootstrap resamples for the forecast's intervals")
    seed: int = Field(0, description="seed of the bootstrap resamples")
    downstream: list[str] = Field(
        default_factory=list, description='evaluation scores forecast from the loss, e.g. "bpb/stdlib"'
    )

    @field_validator("target")
    @classmethod
    def _recipe_target(cls, target: TrainRunConfig) -> TrainRunConfig:
        if target.target is None:  # TrainRunConfig checks that a target is an IsoFLOP ladder's
            raise ValueError(
                "the forecast run must be an IsoFLOP ladder's target (a recipe and target_budget)"
            )
        return target


class LawConfig(BaseModel):
    """What the experiment promised beside the interval: an accuracy goal of its own, if it has one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accuracy_goal: float | None = Field(
        None, gt=0, description="the largest relative error the experiment aims at, e.g. 0.01; none: no goal"
    )


def ladder_informative(artifact: Artifact) -> tuple[bool, dict[str, Any]]:
    """Every rung beats a unigram model, the target repeats its data at most a few times (see
    MAX_TARGET_EPOCHS) and the frontier has a floor (``Forecast.warnings``): otherwise the extrapolation
    has little to stand on, or is a bound. A weak ladder is a finding about the experiment, not a bug:
    this check warns."""
    meta = artifact.metadata
    return not meta["warnings"], {
        "unigram_loss": meta["unigram_loss"],
        "rungs_not_beating_unigram": len(meta["rungs_not_beating_unigram"]),
        "target_epochs": meta["target_epochs"],
        "max_target_epochs": MAX_TARGET_EPOCHS,
        "warnings": "\n".join(meta["warnings"]) or "none",
    }


def isoflop_run(evals: Artifact) -> dict[str, Any]:
    """One rung's record for the fits and the table, from its evaluation (which names the rung's budget,
    shape and seed): the loss the frontier fits and every score a downstream forecast may use."""
    m = evals.metadata
    return {
        "budget": m["budget_flops"],
        "size": m["shape"],
        "seed": m["seed"],
        "params": m["params"],
        "tokens": m["train_tokens"],
        "flops": m["flops"],
        "loss": m["loss"],
        "bits_per_byte": m["bits_per_byte"],
        **m.get("scores", {}),
    }


@stage(
    IsoflopForecastConfig,
    # 2: the ladder's diagnostics (unigram baseline, target epochs); 3: no-floor warning; 4: the predictive
    # intervals at 80% and 95% with their sources
    revision=4,
    group="scaling",
    kinds=("scipy", "polars"),
    headline=("predicted_loss", "interval_80", "interval_95", "trust", "preregistered_at"),
    checks={"ladder_informative": Check(ladder_informative, blocking=False)},
)
def isoflop_forecast(
    ctx: StepContext,
    out: PendingArtifact,
    config: IsoflopForecastConfig,
    ladder_eval_results: dict[str, Artifact],
    tokenized_cache: Artifact,
    **caches: Artifact,
) -> None:
    """Each budget's optimum, the frontier L*(C) and the target's loss (and downstream scores) forecast
    from the IsoFLOP ladder, written with the time before the target trains (it runs after this step).
    It reads the rungs' training caches (``caches``: the mixture's further inputs) for the diagnostics:
    the unigram baseline every rung should beat and how often the target reads its data."""
    keys = sorted(ladder_eval_results)
    runs = [isoflop_run(ladder_eval_results[key]) for key in keys]
    vocab_size = tokenized_cache.metadata["vocab_size"]
    model, train = config.target.resolve(vocab_size)
    budget = config.target.target["target_budget"]  # type: ignore[index]
    try:
        predicted = forecast(runs, budget, bootstrap=config.bootstrap, seed=config.seed)
    except ValueError as e:
        raise InputError(f"{ctx.step.name}: the ladder cannot forecast: {e}") from None
    downstream = {
        metric: downstream_forecast(runs, metric, predicted, bootstrap=config.bootstrap, seed=config.seed)
        for metric in config.downstream
    }
    target = target_record(model, train, budget)
    named = [{"run": key, "loss": r["loss"]} for key, r in zip(keys, runs, strict=True)]
    mixture = mixture_of_inputs(ctx, config.target.data_mixture, caches)
    urls = mixture.cache_urls(tokenized_cache.url)
    sources = {name: (source.weight, TokenCache(urls[name])) for name, source in mixture.sources.items()}
    diagnostics = mixture_diagnostics(named, sources, target["tokens"], vocab_size)
    diagnostics["warnings"] += predicted.warnings
    record = {
        "preregistered_at": datetime.now(UTC).isoformat(timespec="microseconds"),
        "cache": TokenCache(tokenized_cache.url).identity,
        "target": target,
        "prediction": prediction_record(predicted),
        "forecast": predicted.as_dict(),
        "downstream": {metric: d.as_dict() for metric, d in downstream.items()},
        "diagnostics": diagnostics,
        "runs": runs,
    }
    (out.path / FORECAST).write_text(json.dumps(record, indent=2))
    write_rung_table(runs, out.path / RUNG_TABLE)
    plots = isoflop_plots(runs, predicted, out.path)
    for metric, prediction in downstream.items():
        plots[f"downstream {metric}"] = downstream_plot(runs, prediction, out.path)
    out.metadata.update(forecast_metadata(record, predicted, downstream, plots))


def forecast_metadata(
    record: dict[str, Any],
    predicted: Forecast,
    downstream: dict[str, DownstreamForecast],
    plots: dict[str, str],
) -> dict[str, Any]:
    """The forecast's page, from its ``record`` (``forecast.json``): the headline, then the pictures, the
    tables and the rest (the order ``dagster_metadata`` keeps); the 95% interval once, as ``interval_95``."""
    runs, budget = record["runs"], record["target"]["budget"]
    return dict(
        preregistered_at=record["preregistered_at"],
        predicted_loss=predicted.loss,
        interval_80=record["prediction"]["interval_80"],
        interval_95=record["prediction"]["interval_95"],
        interval_sources=record["prediction"]["sources"],
        frontier=predicted.frontier.formula,
        target=record["target"],
        extrapolation=budget / max(r["budget"] for r in runs),
        n_runs=len(runs),
        n_budgets=predicted.n_budgets,
        seed_spread=predicted.seed_spread,
        downstream={metric: d.value for metric, d in downstream.items()},
        rung_table=RUNG_TABLE,
        plots=plots,
        markdown={"trust": trust_table(predicted), "optima": optima_table(predicted)},
        **record["diagnostics"],
    )


def target_record(model: LlamaConfig, train: TrainConfig, budget: float) -> dict[str, Any]:
    """The run the forecast is for, as its page shows it: params counted non-embedding (the N the ladder
    fits, labelled so) with the total beside it."""
    tokens = train.steps * train.batch_size * model.seq_len
    return {
        "budget": budget,
        "flops": model.flops_per_token() * tokens,
        "non_embedding_params": model.num_params(include_embeddings=False),
        "total_params": model.num_params(),
        "tokens": tokens,
        "shape": f"d{model.d_model}l{model.n_layers}",
    }


def prediction_record(predicted: Forecast) -> dict[str, Any]:
    """What is preregistered: the loss, its 95% interval as (low, high), both levels' intervals and the
    sources of their widths (``forecast_interval.py``)."""
    levels = predicted.by_percent
    return {
        "loss": predicted.loss,
        "low": predicted.loss_interval[0],
        "high": predicted.loss_interval[1],
        "level": CONFIDENCE,
        **{f"interval_{key}": [i.low, i.high] for key, i in levels.items()},
        "sources": {key: i.as_dict()["sources"] for key, i in levels.items()},
    }


def trust_table(predicted: Forecast) -> str:
    """Markdown, written before the target runs, narrow enough for the asset page's value column: a column
    per level, how far its interval reaches below and above the forecast, then what each source adds on each
    side (the intervals themselves are the entries above it)."""
    levels = predicted.by_percent

    def pair(below: float, above: float) -> str:
        return f"-{100 * below:.1f}/+{100 * above:.1f}%"

    rows = {
        "reach": [pair(1 - i.low / predicted.loss, i.high / predicted.loss - 1) for i in levels.values()],
        "noise": [pair(*i.noise) for i in levels.values()],
        "floor": [pair(*i.floor) for i in levels.values()],
        "form": [pair(*i.form) for i in levels.values()],
    }
    lines = ["| | " + " | ".join(f"{key}%" for key in levels) + " |", "|---" * (len(levels) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()]
    return "\n".join(lines)


def isoflop_plots(
    runs: list[dict[str, Any]], predicted: Forecast, folder: Path, actual: float | None = None
) -> dict[str, str]:
    """The IsoFLOP curves, the frontier with the target (and its actual loss once known), the seed spread."""
    plot_isoflop_curves(runs, predicted, folder / "isoflop_curves.png")
    plot_frontier(predicted, folder / "frontier.png", actual=actual)
    plot_seed_spread(runs, folder / "seed_spread.png")
    return {
        "isoflop curves": "isoflop_curves.png",
        "frontier": "frontier.png",
        "seed spread": "seed_spread.png",
    }


def downstream_plot(
    runs: list[dict[str, Any]],
    prediction: DownstreamForecast,
    folder: Path,
    actual: tuple[float, float] | None = None,
) -> str:
    """The score against the loss across the rungs, the forecast, and ``actual`` (the target's loss and
    score) once known; the file's name."""
    name = f"downstream_{re.sub(r'[^A-Za-z0-9_.-]+', '_', prediction.metric)}.png"
    loss, score = actual if actual is not None else (None, None)
    plot_downstream(runs, prediction, folder / name, actual=score, actual_loss=loss)
    return name


def optima_table(predicted: Forecast) -> str:
    """Markdown: each budget's optimum with its interval, or why it is left out."""
    rows = ["| budget | sizes | runs | N* | L* | L* interval | used |", "|---|---|---|---|---|---|---|"]
    for o in predicted.optima:
        if o.profile is None or o.loss_interval is None:
            rows.append(f"| {o.budget:.3g} | {o.n_rungs} | {o.n_runs} | | | | no: {o.problem} |")
            continue
        low, high = o.loss_interval
        used = "yes" if o.usable else f"no: {o.problem}"
        rows.append(
            f"| {o.budget:.3g} | {o.n_rungs} | {o.n_runs} | {o.profile.params:.3g} | {o.profile.loss:.4g} "
            f"| [{low:.4g}, {high:.4g}] | {used} |"
        )
    return "\n".join(rows)


def actual_in_interval(artifact: Artifact) -> tuple[bool, dict[str, Any]]:
    """The target's actual loss lies in the interval preregistered for it, which is what the forecast
    promised; the percentage error is reported beside it. A missed forecast is a scientific result, not a
    broken pipeline: this check warns; so does a forecast written after its target had started (a target
    reused under a re-forecast), which preregistered nothing."""
    result = artifact.metadata["result"]
    reason = (
        f"forecast {result['predicted']:.4g}, 95% [{result['low']:.4g}, {result['high']:.4g}]; actual "
        f"{result['actual']:.4g} ({100 * result['error']:+.1f}%), {where_it_fell(result)}{_written(result)}"
    )
    return result["within_interval"] and result["preregistered"], {**_promise(result), "reason": reason}


def within_accuracy_goal(artifact: Artifact) -> tuple[bool, dict[str, Any]]:
    """The experiment's own accuracy goal (``accuracy_goal``), where it declares one: a warning too."""
    result, goal = artifact.metadata["result"], artifact.metadata["accuracy_goal"]
    passed = goal is None or (abs(result["error"]) <= goal and result["preregistered"])
    error = f"error {100 * result['error']:+.2f}%"
    reason = f"{error}, no goal declared" if goal is None else f"{error}, goal {100 * goal:g}%"
    reason += _written(result)
    found = {**_promise(result), "accuracy_goal": "none declared" if goal is None else goal, "reason": reason}
    return passed, found


def _written(result: dict[str, Any]) -> str:
    """Nothing for a preregistered forecast; else, that it was not one."""
    return "" if result["preregistered"] else "; written AFTER the target started: no preregistration"


def _promise(result: dict[str, Any]) -> dict[str, Any]:
    keys = ("predicted", "low", "high", "interval_80", "actual", "error", "preregistered")
    return {key: result[key] for key in keys}


def where_it_fell(result: dict[str, Any]) -> str:
    """Where the actual fell: inside both intervals, the 95% one only, or outside both."""
    if result["within_80"]:
        return "inside the 80% and 95% intervals"
    return "inside the 95% interval only" if result["within_interval"] else "outside both intervals"


def started_at(manifest: dict[str, Any]) -> datetime:
    """When the run that wrote a checkpoint (its ``manifest``) first started: the trainer's record, kept
    across resumes. A run from before that record: at the latest, its commit time (kept to the second,
    rounded down: hence the second added) less its wall time."""
    if first := manifest.get("metadata", {}).get("started_at"):
        return datetime.fromisoformat(first)
    created = datetime.fromisoformat(manifest["created"]) + timedelta(seconds=1)
    return created - timedelta(seconds=float(manifest["wall_seconds"]))


# revision 2: the forecast against the actual as the headline; 3: both levels' intervals
@stage(
    LawConfig,
    revision=3,
    group="scaling",
    kinds=("scipy",),
    checks={
        "actual_in_preregistered_interval": Check(actual_in_interval, blocking=False),
        "within_accuracy_goal": Check(within_accuracy_goal, blocking=False),
    },
)
def isoflop_law(
    ctx: StepContext,
    out: PendingArtifact,
    config: LawConfig,
    isoflop_forecast: Artifact,
    checkpoint: Artifact,
    eval_results: Artifact,
) -> None:
    """The preregistered forecast against the target's actual loss and scores, with the plots redrawn,
    and whether the forecast was in fact written before the target started."""
    record = json.loads(isoflop_forecast.file(FORECAST).read_text())
    runs = record["runs"]
    asked = IsoflopForecastConfig.model_validate(isoflop_forecast.manifest["config"])
    # the same seeded fits as the forecast's: the plots show what was preregistered, with the actual
    predicted = forecast(runs, record["target"]["budget"], bootstrap=asked.bootstrap, seed=asked.seed)
    actual = eval_results.metadata["loss"]
    prediction, started = record["prediction"], started_at(checkpoint.manifest)
    result = {
        "predicted": prediction["loss"],
        "low": prediction["low"],
        "high": prediction["high"],
        "actual": actual,
        "error": (prediction["loss"] - actual) / actual,
        "within_interval": prediction["low"] <= actual <= prediction["high"],
        "interval_80": prediction["interval_80"],
        "interval_95": prediction["interval_95"],
        "within_80": prediction["interval_80"][0] <= actual <= prediction["interval_80"][1],
        "sources": prediction["sources"],
        "extrapolation": record["target"]["budget"] / max(r["budget"] for r in runs),
        "preregistered_at": record["preregistered_at"],
        "target_started_at": started.isoformat(),
        "preregistered": datetime.fromisoformat(record["preregistered_at"]) < started,
        "seed_spread": record["forecast"]["seed_spread"],
    }
    scores = {
        "bits_per_byte": eval_results.metadata["bits_per_byte"],
        **eval_results.metadata.get("scores", {}),
    }
    plots = isoflop_plots(runs, predicted, out.path, actual=actual)
    downstream = {}
    for metric in asked.downstream:
        again = downstream_forecast(runs, metric, predicted, bootstrap=asked.bootstrap, seed=asked.seed)
        downstream[metric] = downstream_error(again, scores[metric])
        plots[f"downstream {metric}"] = downstream_plot(
            runs, again, out.path, actual=(actual, scores[metric])
        )
    result["fell"] = where_it_fell(result)
    (out.path / RESULT).write_text(json.dumps({**result, "downstream": downstream}, indent=2))
    when = "before the target started" if result["preregistered"] else "AFTER the target started"
    headline = (
        f"**forecast {result['predicted']:.3f}**, 95% [{result['low']:.3f}, {result['high']:.3f}], "
        f"written {when}; "
        f"**actual {actual:.3f}** ({100 * result['error']:+.1f}%), {result['fell']}, "
        f"{result['extrapolation']:.3g}x past the ladder's largest budget"
    )
    out.metadata.update(
        markdown={"forecast": headline},
        result=result,
        accuracy_goal=config.accuracy_goal,
        downstream=downstream,
        plots=plots,
    )
