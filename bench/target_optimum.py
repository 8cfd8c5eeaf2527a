"""Is the frontier wrong, or is the recipe's target off the optimum? An IsoFLOP sweep at the target budget.

A preregistered forecast predicts L*(C), the loss of the best size at the target budget; the target run is
the recipe's one size there. When the run misses the forecast, either the frontier does not extrapolate
(its L* is not the best loss reachable at that budget) or the run is not the best size (its N is off the
ladder's N*). This trains more sizes at the target budget by the same recipe, finds their optimum (the
vertex of the parabola in log N, as each ladder budget's) and prints the forecast's error against that
measured optimum beside its error against the recipe's run.

    .venv/bin/python bench/target_optimum.py --forecast DIR/forecast.json --cache DIR --out DIR \
        --d-models 56,72 --target-loss 2.357

The recipe is the ``scaling_forecast`` experiment's (its ``LADDER``). ``--forecast`` is the ``forecast.json``
of its ``isoflop_forecast`` step or of ``bench/scaling_forecast.py``; ``--cache`` the token cache the ladder
trained on; ``--target-loss`` the recipe's run's measured loss (it is one of the sizes; omit it to train it
here); ``--budget`` reads the same ladder's frontier at another budget and sweeps there instead. Every run
is kept under ``--out`` and reused.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from marin_pipelines.experiments.scaling_forecast import LADDER
from marin_pipelines.scaling.forecast_ladder import BOOTSTRAP, Rung, finished, read_forecast, train_rung
from marin_pipelines.scaling.frontier import forecast
from marin_pipelines.scaling.isoflop import isoflop_vertex
from marin_pipelines.scaling.recipe import DelphiRecipe
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.train.train_config import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forecast", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--d-models", required=True, help="widths of the models to train, e.g. 56,72")
    parser.add_argument("--target-loss", type=float, help="the recipe's run's measured loss")
    parser.add_argument(
        "--budget", type=float, help="another budget: the same ladder's frontier read there, not the target"
    )
    args = parser.parse_args()

    cache = TokenCache(args.cache)
    preregistered = read_forecast(args.forecast, cache)  # a ValueError says what is wrong with either
    chosen = DelphiRecipe.model_validate(LADDER["recipe"])
    budget, seq_len = float(preregistered["forecast"]["target_budget"]), LADDER["seq_len"]
    vocab = cache.info["vocab_size"]
    predicted, predicted_params = preregistered["prediction"]["loss"], preregistered["forecast"]["params"]
    if args.budget is not None and args.budget != budget:  # the same chain and bootstrap as the step's
        fields = ("budget", "params", "tokens", "loss", "seed")
        ladder = [{k: run[k] for k in fields} for run in preregistered["runs"]]
        budget = args.budget
        read = forecast(ladder, budget, bootstrap=BOOTSTRAP, seed=0)
        predicted, predicted_params = read.loss, read.params

    own = chosen.run(budget, vocab, seq_len)
    runs = []
    if args.target_loss is not None:
        runs.append({"budget": budget, "params": own.params, "tokens": own.tokens, "loss": args.target_loss})
        print(f"{own.size} (the recipe's run, given): loss {args.target_loss:.4f}", flush=True)
    widths = [int(w) for w in args.d_models.split(",")]
    sizes = [chosen.shape(w, vocab, seq_len).num_params(include_embeddings=False) for w in widths]
    if args.target_loss is None:
        sizes.append(own.params)
    for params in sizes:
        run = chosen.run(budget, vocab, seq_len, params=params, base=TrainConfig())
        rung = Rung(run, 0, args.out / budget_key(budget) / f"{run.size}-s0")
        record = finished(rung) or train_rung(rung, cache)
        runs.append({"budget": budget, "params": run.params, "tokens": run.tokens, "loss": record["loss"]})
        print(
            f"{run.size}: {run.params} params, loss {record['loss']:.4f} ({record['seconds']:.0f} s)",
            flush=True,
        )
    vertex = isoflop_vertex(budget, runs)
    measured = None if isinstance(vertex, str) or not vertex.inside else vertex
    why = vertex if isinstance(vertex, str) else None
    if why is None and measured is None:
        why = f"the vertex, {vertex.params:.3g} params, lies outside the sizes trained: add a size beyond it"
    recipe_loss = next(r["loss"] for r in runs if r["params"] == own.params)
    summary = {
        "budget": budget,
        "forecast": predicted,
        "forecast_params": predicted_params,
        "runs": sorted((r["params"], r["loss"]) for r in runs),
        "measured_optimum": None if measured is None else {"params": measured.params, "loss": measured.loss},
        "why_no_optimum": why,
        "error_against_optimum": None if measured is None else (predicted - measured.loss) / measured.loss,
        "error_against_recipe_run": (predicted - recipe_loss) / recipe_loss,
        "best_run": min(r["loss"] for r in runs),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
