"""The scaling law fitted over the ladder, the preregistered prediction for the main run, and its check.

``scaling_prediction`` reads only the ladder and the training data (the vocabulary sizes the target's
FLOPs per token; the tokens give a unigram baseline and the target's epochs, which say whether the
ladder can support the extrapolation): it is recorded before the target run starts and can never see
it. The check on ``eval_results`` compares the target's actual loss with that record; ``scaling_law``
draws both.
"""

from __future__ import annotations

import json
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetIn,
    AssetsDefinition,
    asset_check,
)

from marin_pipelines.assets.stage import stage_asset
from marin_pipelines.assets.train import launch_training
from marin_pipelines.evals.checkpoint_eval import EvalConfig
from marin_pipelines.experiment import Experiment
from marin_pipelines.resources.launcher import LauncherResource
from marin_pipelines.scaling.fit import fit, law_from_dict
from marin_pipelines.scaling.ladder_diagnostics import MAX_TARGET_EPOCHS, mixture_diagnostics
from marin_pipelines.scaling.scaling_law import budget_key, plot_scaling_law
from marin_pipelines.scaling.speedrun import (
    Submission,
    discover_submissions,
    leaderboard_markdown,
    plot_leaderboard,
    submission_result,
)
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE

PREDICTION = "prediction.json"
PLOT = "scaling_law.png"
LEADERBOARD = "leaderboard.md"
LEADERBOARD_PLOT = "leaderboard.png"
TOLERANCE = 0.02  # the preregistered prediction passes when within 2% of the actual loss


def _run(key: str, evals: Artifact) -> dict[str, Any]:
    budget, size = key.split("|")  # the ladder's partition key: budget|size
    m = evals.metadata
    return {
        "run": key,
        "size": size,
        "budget": float(budget),
        "params": m["params"],
        "tokens": m["train_tokens"],
        "flops": m["flops"],
        "loss": m["loss"],
    }


def prediction_error(prediction: dict[str, Any], actual: float) -> dict[str, Any]:
    """Actual vs preregistered: the relative error of the prediction and whether its interval held."""
    low, high = prediction["loss_interval"]
    return {
        "predicted_loss": prediction["loss"],
        "actual_loss": actual,
        "relative_error": prediction["loss"] / actual - 1,
        "within_interval": low <= actual <= high,
    }


def fit_metadata(fitted: dict[str, Any]) -> dict[str, Any]:
    """What the prediction and the law both show of a fit: its parameters, method, formula and size."""
    keys = ("method", "formula", "n_runs")
    return {**fitted["law"], **{key: fitted[key] for key in keys}}


def scaling_assets(experiment: Experiment) -> list[AssetsDefinition]:
    ladder = experiment.ladder

    @stage_asset(
        experiment, "scaling_prediction", group="scaling", ins=("ladder_eval_results", "tokenized_cache")
    )
    def scaling_prediction(
        out: PendingArtifact, ladder_eval_results: dict[str, Artifact], tokenized_cache: Artifact
    ) -> None:
        """L(N, D) fitted over the ladder, and the main run's loss predicted before it is trained."""
        runs = [_run(key, evals) for key, evals in sorted(ladder_eval_results.items())]
        law_fit = fit(runs, bootstrap=ladder.bootstrap, seed=ladder.seed)
        model, train = experiment.main_run(tokenized_cache.metadata["vocab_size"])
        tokens = train.steps * train.batch_size * model.seq_len
        target = {
            "size": experiment.model.size,
            "budget": ladder.target_budget,
            "steps": train.steps,
            **law_fit.predict(
                model.num_params(include_embeddings=False), tokens, model.flops_per_token() * tokens
            ),
        }
        extrapolation = target["flops"] / max(r["budget"] for r in runs)
        sources = {
            name: (source.weight, TokenCache(source.cache or tokenized_cache.path))
            for name, source in experiment.data_mixture.sources.items()
        }
        vocab_size = tokenized_cache.metadata["vocab_size"]
        diagnostics = mixture_diagnostics(runs, sources, target["tokens"], vocab_size)
        plot_scaling_law(runs, law_fit.law, out.path / PLOT, predictions=[target])
        fitted = law_fit.as_dict()
        (out.path / PREDICTION).write_text(
            json.dumps({"fit": fitted, "runs": runs, "target": target, "diagnostics": diagnostics}, indent=2)
        )
        out.metadata.update(fit_metadata(fitted))
        out.metadata.update(
            method_reason=fitted["reason"],
            intervals=fitted["intervals"],
            isoflops=fitted["isoflops"],
            runs=runs,
            target=target,
            predicted_loss=target["loss"],
            extrapolation=extrapolation,
            **diagnostics,
            plots={"scaling_law": PLOT},
        )

    @asset_check(
        asset=[experiment.name, "scaling_prediction"],
        description="Every rung beats a unigram model and the target repeats its data at most "
        f"{MAX_TARGET_EPOCHS:g} times: otherwise the extrapolation has little to stand on.",
    )
    def ladder_informative(scaling_prediction: Artifact) -> AssetCheckResult:
        meta = scaling_prediction.metadata
        return AssetCheckResult(
            passed=not meta["warnings"],
            severity=AssetCheckSeverity.WARN,  # a weak ladder is a finding about the experiment, not a bug
            metadata={
                "unigram_loss": meta["unigram_loss"],
                "rungs_not_beating_unigram": len(meta["rungs_not_beating_unigram"]),
                "target_epochs": meta["target_epochs"],
                "warnings": "\n".join(meta["warnings"]) or "none",
            },
        )

    @asset_check(
        asset=[experiment.name, "eval_results"],
        additional_ins={"scaling_prediction": AssetIn(key=[experiment.name, "scaling_prediction"])},
        description=f"The main run's loss is within {TOLERANCE:.0%} of the loss preregistered for it.",
    )
    def preregistered_prediction(eval_results: Artifact, scaling_prediction: Artifact) -> AssetCheckResult:
        target = json.loads(scaling_prediction.file(PREDICTION).read_text())["target"]
        error = prediction_error(target, eval_results.metadata["loss"])
        # a missed prediction is a scientific result, not a broken pipeline: it warns
        passed = abs(error["relative_error"]) <= TOLERANCE
        return AssetCheckResult(passed=passed, severity=AssetCheckSeverity.WARN, metadata=error)

    @stage_asset(experiment, "scaling_law", group="scaling", ins=("scaling_prediction", "eval_results"))
    def scaling_law(out: PendingArtifact, scaling_prediction: Artifact, eval_results: Artifact) -> None:
        """The ladder's fit with the main run's preregistered prediction and its actual loss."""
        record = json.loads(scaling_prediction.file(PREDICTION).read_text())
        target, fitted = record["target"], record["fit"]
        actual = eval_results.metadata["loss"]
        law = law_from_dict(fitted["method"], fitted["law"])
        plot_scaling_law(record["runs"], law, out.path / PLOT, predictions=[{**target, "actual": actual}])
        main_run = {**target, **prediction_error(target, actual)}
        (out.path / "scaling_law.json").write_text(json.dumps({**record, "main_run": main_run}, indent=2))
        out.metadata.update(fit_metadata(fitted))
        out.metadata.update(
            runs=record["runs"],
            main_run=main_run,
            plots={"scaling_law": PLOT},
        )

    @stage_asset(
        experiment,
        "speedrun_leaderboard",
        group="scaling",
        ins=("tokenized_cache", "tokenizer"),
        resources=("launcher",),
    )
    def speedrun_leaderboard(
        out: PendingArtifact, tokenized_cache: Artifact, tokenizer: Artifact, launcher: LauncherResource
    ) -> None:
        """The chosen speedrun submissions trained at their budgets on this data, ranked by bits-per-byte.

        Each run trains and is evaluated through the launcher, as the ladder's rungs are."""
        validation = {"validation": [str(tokenized_cache.path)]}

        def run(submission: Submission, budget: float) -> dict[str, Any]:
            run_dir = out.path / "runs" / f"{submission.name}-{budget_key(budget)}"
            model, config = submission.run_config(budget, tokenized_cache.metadata["vocab_size"])
            summary = launch_training(run_dir, tokenized_cache, launcher, MixtureConfig(), model, config)
            evals = run_dir / "eval.json"
            context = AssetExecutionContext.get()
            tokenizer_file = tokenizer.path / TOKENIZER_FILE
            batch = experiment.eval_batch_size
            launcher.evaluate(context, run_dir, tokenizer_file, validation, EvalConfig(), batch, evals)
            bpb = json.loads(evals.read_text())["bpb"]["validation"]["bits_per_byte"]
            result = submission_result(submission, budget, summary, bpb)
            (run_dir / "results.json").write_text(json.dumps(result, indent=2))
            return result

        results = [
            run(submission, budget)
            for submission in discover_submissions()
            if submission.name in experiment.speedrun
            for budget in submission.budgets
        ]
        table = leaderboard_markdown(results) if results else "no submissions chosen"
        (out.path / LEADERBOARD).write_text(table + "\n")
        out.metadata.update(runs=len(results), leaderboard=table)
        if results:
            plot_leaderboard(results, out.path / LEADERBOARD_PLOT)
            out.metadata["plots"] = {"speedrun": LEADERBOARD_PLOT}

    checks = [preregistered_prediction] if ladder.target_budget is not None else []  # only a declared target
    return [scaling_prediction, ladder_informative, *checks, scaling_law, speedrun_leaderboard]
