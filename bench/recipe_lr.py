"""Loss against the peak learning rate at several budgets and shapes: does a recipe's LR rule put every run
near its best LR, and which exponents would?

A ladder whose LR rule drifts from the best LR as the budget grows measures the rule as much as the model:
its top rungs fall short by more than its bottom ones, and the frontier bends where the rule does. This
trains each point (budget, d_model) at multiples of the recipe's own LR (everything else the recipe's),
then fits every run at once:

    loss = L0(point) + k (ln lr - ln lr*)^2,   lr* = c (ref_d / d)^w (batch / ref_batch)^b (T0 / T)^h

one L0 per point, a shared curvature k, and the rule's constants c, w, b, h, free or held at the recipe's.
A run more than ``--blow-up`` above its point's best is left out (a diverged run is not on the parabola).
It prints each point's losses, the fits (residual rms and constants) and, last, one JSON object.

    .venv/bin/python bench/recipe_lr.py --cache DIR --out DIR --points \\
        2e11:16:1/2,2e11:24:0.5/1/2,2e11:48,2e11:64:1/4,8e11:24:1/2,8e11:48,8e11:80,1.6e12:32,1.6e12:56,1.6e12:96

``--cache`` is a token cache (``bench/scaling_forecast.py`` builds one under ``{out}/delphi/cache``);
``--recipe-option KEY=VALUE`` sets a constant of the experiment's recipe first (to check a new rule).
Every run is kept under ``--out`` and reused.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from marin_pipelines.cli.forecast import recipe_option
from marin_pipelines.experiments.scaling_forecast import LADDER
from marin_pipelines.scaling.forecast_ladder import Rung, finished, train_rung
from marin_pipelines.scaling.recipe import DelphiRecipe
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.train.train_config import TrainConfig

FREE = ("w", "b", "h")  # the exponents a fit may free: width, batch, token horizon


def train_point(
    recipe: DelphiRecipe, cache: TokenCache, out: Path, budget: float, d_model: int, multiplier: float
) -> dict[str, Any]:
    """One run: the recipe's run of width ``d_model`` at ``budget``, its peak LR times ``multiplier``
    (uncapped, so that a multiplier means what it says)."""
    vocab, seq_len = cache.info["vocab_size"], LADDER["seq_len"]
    scaled = recipe.model_copy(
        update={"learning_rate": recipe.learning_rate * multiplier, "max_learning_rate": math.inf}
    )
    params = scaled.shape(d_model, vocab, seq_len).num_params(include_embeddings=False)
    run = scaled.run(budget, vocab, seq_len, params=params, base=TrainConfig())
    rung = Rung(run, 0, out / budget_key(budget) / f"{run.size}-x{multiplier:g}")
    record = finished(rung) or train_rung(rung, cache)
    t = run.train
    return {
        "budget": budget, "d_model": d_model, "size": run.size, "multiplier": multiplier,
        "lr": t.learning_rate, "batch": t.batch_size, "steps": t.steps, "tokens": run.tokens,
        "loss": record["loss"], "seconds": record["seconds"],
    }  # fmt: skip


def fit_rule(runs: list[dict[str, Any]], recipe: DelphiRecipe, free: tuple[str, ...]) -> dict[str, Any]:
    """The joint fit (module docstring) with the exponents in ``free`` fitted and the others the recipe's."""
    points = sorted({(r["budget"], r["d_model"]) for r in runs})
    group = np.array([points.index((r["budget"], r["d_model"])) for r in runs])
    log_lr = np.log([r["lr"] for r in runs])
    terms = {  # each exponent's regressor: ln lr* = ln c + sum(exponent x term)
        "w": np.log(recipe.reference_d_model / np.array([r["d_model"] for r in runs], dtype=float)),
        "b": np.log(np.array([r["batch"] for r in runs]) * LADDER["seq_len"] / recipe.reference_batch_tokens),
        "h": np.log(recipe.reference_tokens / np.array([r["tokens"] for r in runs], dtype=float)),
    }
    held = {"w": recipe.width_exponent, "b": recipe.batch_exponent, "h": recipe.horizon_exponent}
    loss = np.array([r["loss"] for r in runs])
    n = len(points)

    def residuals(theta: np.ndarray) -> np.ndarray:
        exponents = {**held, **dict(zip(free, theta[n + 2 :], strict=True))}
        best = theta[n + 1] + sum(exponents[e] * terms[e] for e in FREE)
        return theta[group] + theta[n] * (log_lr - best) ** 2 - loss

    start = np.r_[[loss[group == i].min() for i in range(n)], 0.05, math.log(recipe.learning_rate)]
    fitted = least_squares(residuals, np.r_[start, [held[e] for e in free]])
    exponents = {**held, **dict(zip(free, fitted.x[n + 2 :].tolist(), strict=True))}
    return {
        "free": list(free),
        "rms": float(np.sqrt(np.mean(fitted.fun**2))),
        "curvature": float(fitted.x[n]),
        "learning_rate": float(math.exp(fitted.x[n + 1])),
        "width_exponent": exponents["w"],
        "batch_exponent": exponents["b"],
        "horizon_exponent": exponents["h"],
    }


def parse_points(text: str) -> list[tuple[float, int, list[float] | None]]:
    """``BUDGET:D_MODEL[:M/M/...]``, comma-separated: each (budget, d_model, its own multipliers or None)."""
    points = []
    for point in text.split(","):
        fields = point.split(":")
        try:
            budget, d_model = float(fields[0]), int(fields[1])
            own = [float(m) for m in fields[2].split("/")] if len(fields) == 3 else None
        except (IndexError, ValueError):
            own, budget, d_model = None, 0.0, 0
        if len(fields) > 3 or min(budget, d_model, *(own or [1.0])) <= 0:
            raise argparse.ArgumentTypeError(f"point {point!r}: want BUDGET:D_MODEL[:M/M/...], all positive")
        points.append((budget, d_model, own))
    return points


def multipliers(text: str) -> list[float]:
    """``M,M,...``: multiples of the recipe's LR."""
    return [float(m) for m in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--points",
        type=parse_points,
        required=True,
        help="BUDGET:D_MODEL[:M/M/...],... e.g. 2e11:24:0.5/1/2,1.6e12:56 (a point's own multipliers)",
    )
    parser.add_argument(
        "--multipliers",
        type=multipliers,
        default="1,2,4",
        help="of the recipe's LR where a point names none",
    )
    parser.add_argument("--recipe-option", type=recipe_option, action="append", default=[], metavar="K=V")
    parser.add_argument("--blow-up", type=float, default=0.25, help="leave out runs this far above the best")
    args = parser.parse_args()

    cache = TokenCache(args.cache)
    recipe = DelphiRecipe.model_validate({**LADDER["recipe"], **dict(args.recipe_option)})
    runs, left_out = [], []
    for budget, d_model, own in args.points:
        found = [train_point(recipe, cache, args.out, budget, d_model, m) for m in own or args.multipliers]
        losses = "  ".join(f"x{r['multiplier']:g} (lr {r['lr']:.4g}) {r['loss']:.4f}" for r in found)
        print(f"{budget:g} {found[0]['size']} batch {found[0]['batch']}: {losses}", flush=True)
        best = min(r["loss"] for r in found)
        for r in found:
            (runs if r["loss"] <= best + args.blow_up else left_out).append(r)
    if left_out:
        print(f"left out of the fits, over {args.blow_up:g} above their point's best: {len(left_out)} runs")
    fits = [fit_rule(runs, recipe, free) for free in ((), ("w",), ("w", "h"), ("w", "b", "h"))]
    for fit in fits:
        exponents = " ".join(f"{k[0]} {fit[f'{k}_exponent']:.3f}" for k in ("width", "batch", "horizon"))
        print(f"free {fit['free']}: rms {fit['rms']:.4f}, lr {fit['learning_rate']:.4g}, {exponents}")
    print(json.dumps({"recipe": recipe.model_dump(), "runs": runs, "left_out": left_out, "fits": fits}))


if __name__ == "__main__":
    main()
