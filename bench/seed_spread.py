"""Is a forecast's miss the seeds' noise? More seeds of some of a ladder's rungs, and the forecast again.

A one-seed ladder cannot tell a biased frontier from an unlucky draw of seeds. This trains more seeds of
the rungs asked for (by the recipe of the ``scaling_forecast`` experiment, as its ladder trained them) and
prints:
- each rung's losses over its seeds, and the pooled seed spread (``frontier.seed_spread``);
- the forecast from the ladder alone and with the new seeds added;
- how far seed noise alone moves the forecast: every run's loss redrawn with the measured relative spread
  (normal, independent per run) and the whole chain refitted, ``--draws`` times. A miss many of these
  standard deviations wide is the frontier's bias, not the seeds.

    .venv/bin/python bench/seed_spread.py --forecast DIR/forecast.json --cache DIR --out DIR \
        --rungs 2e11:24,8e11:32,8e11:48,1.6e12:40,1.6e12:56 --seeds 3 --actual 2.3497

``--forecast`` is the ``forecast.json`` of the experiment's ``isoflop_forecast`` step (or of
``bench/scaling_forecast.py``): its runs are the ladder, seed 0. ``--rungs`` are budget:width pairs of
that ladder; ``--cache`` the token cache it trained on; ``--actual`` the loss to measure errors against
(the best loss at the target, or the target run's). Every run is kept under ``--out`` and reused.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from marin_pipelines.experiments.scaling_forecast import LADDER
from marin_pipelines.scaling.forecast_ladder import BOOTSTRAP, Rung, finished, read_forecast, train_rung
from marin_pipelines.scaling.frontier import forecast, seed_spread
from marin_pipelines.scaling.recipe import DelphiRecipe
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.train.train_config import TrainConfig

FIELDS = ("budget", "params", "tokens", "loss", "seed")


def parse_rungs(text: str) -> list[tuple[float, int]]:
    try:
        pairs = [item.split(":") for item in text.split(",")]
        return [(float(budget), int(width)) for budget, width in pairs]
    except ValueError:
        raise SystemExit(f"--rungs {text!r}: give budget:width pairs, e.g. 2e11:24,1.6e12:40") from None


def noise_spread(runs: list[dict], target: float, spread: float, draws: int) -> np.ndarray:
    """The forecast refitted ``draws`` times, each run's loss times (1 + spread x a standard normal)."""
    rng = np.random.default_rng(0)
    found = []
    for _ in range(draws):
        noisy = [{**r, "loss": r["loss"] * (1 + spread * rng.standard_normal())} for r in runs]
        try:
            found.append(forecast(noisy, target, bootstrap=0, cross_check=False).loss)
        except ValueError:  # a draw that leaves a budget unbracketed: not a forecast at all
            continue
    return np.asarray(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forecast", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rungs", required=True, help="budget:width pairs of the ladder, e.g. 2e11:24")
    parser.add_argument(
        "--seeds", type=int, default=3, help="seeds per rung asked for, the ladder's 0 included"
    )
    parser.add_argument("--actual", type=float, help="the loss the forecast is measured against")
    parser.add_argument("--draws", type=int, default=400, help="refits with the seeds' noise")
    args = parser.parse_args()

    cache = TokenCache(args.cache)
    preregistered = read_forecast(args.forecast, cache)  # a ValueError says what is wrong with either
    target = float(preregistered["forecast"]["target_budget"])
    ladder = [{k: float(run[k]) for k in FIELDS} for run in preregistered["runs"]]
    chosen = DelphiRecipe.model_validate(LADDER["recipe"])
    vocab, seq_len = cache.info["vocab_size"], LADDER["seq_len"]

    extra, measured = [], []
    for budget, width in parse_rungs(args.rungs):
        params = chosen.shape(width, vocab, seq_len).num_params(include_embeddings=False)
        own = [r for r in ladder if r["budget"] == budget and r["params"] == params]
        if not own:
            raise SystemExit(
                f"--rungs {budget_key(budget)}:{width}: the ladder has no such rung ({params} params)"
            )
        losses = [r["loss"] for r in own]
        for seed in range(1, args.seeds):
            run = chosen.run(budget, vocab, seq_len, params=params, base=TrainConfig(seed=seed))
            rung = Rung(run, seed, args.out / budget_key(budget) / f"{run.size}-s{seed}")
            record = finished(rung) or train_rung(rung, cache)
            extra.append({**own[0], "seed": float(seed), "loss": record["loss"]})
            losses.append(record["loss"])
        measured += losses
        spread = np.std(losses, ddof=1) / np.mean(losses) if len(losses) > 1 else float("nan")
        print(
            f"{budget_key(budget)} d{width}: " + ", ".join(f"{v:.4f}" for v in losses) + f" (sd {spread:.2%})"
        )

    pooled = seed_spread(ladder + extra)
    alone = forecast(ladder, target, bootstrap=BOOTSTRAP, seed=0, cross_check=False)
    both = forecast(ladder + extra, target, bootstrap=BOOTSTRAP, seed=0, cross_check=False)
    relative = (pooled or 0.0) / float(np.mean(measured))  # the spread as a share of the rungs' loss
    moved = noise_spread(ladder, target, relative, args.draws) if pooled else np.array([])

    def error(loss: float) -> float | None:
        return None if args.actual is None else (loss - args.actual) / args.actual

    summary = {
        "target_budget": target,
        "seed_spread": pooled,
        "relative_seed_spread": relative if pooled else None,
        "ladder": {"loss": alone.loss, "interval": alone.loss_interval, "error": error(alone.loss)},
        "with_seeds": {"loss": both.loss, "interval": both.loss_interval, "error": error(both.loss)},
        "noise_only": None
        if not moved.size
        else {"draws": int(moved.size), "sd": float(moved.std() / moved.mean()), "mean": float(moved.mean())},
    }
    if moved.size and args.actual is not None:
        summary["miss_in_noise_sds"] = error(alone.loss) / summary["noise_only"]["sd"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
