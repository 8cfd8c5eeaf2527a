"""Loss against batch size at a fixed budget and shape: is a recipe's batch past the critical batch?

A recipe that holds the step count (``target_steps``) grows the batch with the tokens; past the critical
batch a token bought with a bigger batch is worth less than one bought with more steps, and an IsoFLOP
ladder whose rungs straddle that point measures the batch rule as much as the model size. This trains one
shape at one budget at several batch sizes, each with the recipe's own LR (sqrt of the batch) and beta2
(half-life in tokens) for that batch, and prints each loss and its ratio to the recipe's own choice.

    .venv/bin/python bench/recipe_batch.py --cache DIR --out DIR [--budget 1.6e12] [--d-model 56]

``--cache`` is a token cache, as ``bench/scaling_forecast.py`` builds one under its ``--out``
(``{out}/delphi/cache``); every run is kept under ``--out`` and reused.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from marin_pipelines.experiments.scaling_forecast import LADDER
from marin_pipelines.scaling.forecast_ladder import Rung, finished, train_rung
from marin_pipelines.scaling.recipe import DelphiRecipe
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.train.train_config import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=max(LADDER["budgets"]))
    parser.add_argument("--d-model", type=int, default=56, help="the shape: the recipe's model of this width")
    parser.add_argument("--batches", default="8,16,32,64,128")
    parser.add_argument(
        "--no-recipe-batch", action="store_true", help="train only --batches (the recipe's own is measured)"
    )
    args = parser.parse_args()

    cache = TokenCache(args.cache)
    vocab, seq_len = cache.info["vocab_size"], LADDER["seq_len"]
    chosen = DelphiRecipe.model_validate(LADDER["recipe"])
    params = chosen.shape(args.d_model, vocab, seq_len).num_params(include_embeddings=False)
    base = TrainConfig()  # as the forecast command trains its rungs
    own = chosen.run(args.budget, vocab, seq_len, params=params, base=base)
    tokens = own.tokens
    results = {}
    batches = {int(b) for b in args.batches.split(",")} | (
        set() if args.no_recipe_batch else {own.train.batch_size}
    )
    for batch in sorted(batches):
        steps = tokens / (batch * seq_len)  # the recipe's batch rule then picks exactly this batch
        variant = chosen.model_copy(update={"target_steps": max(1, round(steps))})
        run = variant.run(args.budget, vocab, seq_len, params=params, base=base)
        if run.train.batch_size != batch:
            raise SystemExit(f"--batches {batch}: the recipe's batch bounds give {run.train.batch_size}")
        rung = Rung(run, 0, args.out / budget_key(args.budget) / f"{run.size}-b{batch}")
        record = finished(rung) or train_rung(rung, cache)
        results[batch] = record["loss"]
        t = run.train
        print(
            f"batch {batch:4d}: {t.steps:5d} steps, lr {t.learning_rate:.4g}, beta2 {t.beta2:.4f}: "
            f"loss {record['loss']:.4f} ({record['seconds']:.0f} s)",
            flush=True,
        )
    reference = results.get(own.train.batch_size)
    summary = {
        "budget": args.budget,
        "size": own.size,
        "recipe_batch": own.train.batch_size,
        "losses": {str(b): loss for b, loss in results.items()},
        "ratio_to_recipe": None if reference is None else {str(b): v / reference for b, v in results.items()},
        "best_batch": min(results, key=results.__getitem__),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
