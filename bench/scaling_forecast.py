"""Forecast error at >= 10x: the delphi recipe with its IsoFLOP frontier against the old constant rule with
its L(N, D) fit, on the same text, budgets and target budget, in one run.

The text is the installed packages' code and documents without the standard library (``package_text``:
~60M tokens at a 512 BPE, no rung or target reads it twice). Each side trains its own ladder and its own
target run and reports (predicted - actual) / actual for that target:

- ``delphi``: ``marin-pipelines forecast`` (``scaling/forecast_ladder.run_forecast``): per budget a sweep of
  sizes around the recipe's optimum, each budget's optimum, the frontier L*(C), the recipe's run at the
  target. This is the ``scaling_forecast`` experiment's ladder, outside Dagster.
- ``constant``: the demo's old ladder: the named sizes nano, micro and tiny at every budget, one batch size
  and one LR, the 5-parameter Chinchilla L(N, D) (or its log-linear fallback) fitted over them, and micro
  at the target budget by the same rule.

Both use the same token cache and the same validation loss. The last line is one JSON object with both
errors, the seeds' spread and the ratio |delphi| / |constant|. About an hour on 2 cores at the defaults;
reruns reuse every finished run (``--out``).

    .venv/bin/python bench/scaling_forecast.py --out .marin/bench/scaling_forecast
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from marin_pipelines.crawl.package_text import PackageTextConfig, build_package_corpus
from marin_pipelines.scaling.fit import fit
from marin_pipelines.scaling.forecast_ladder import CACHE_DIR, Rung, finished, run_forecast, train_rung
from marin_pipelines.scaling.recipe import ConstantRecipe
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.train.model import preset

OLD_SIZES = ("nano", "micro", "tiny")
OLD_TARGET = "micro"


def corpus(out: Path) -> Path:
    """The packages' text without the standard library, built once."""
    folder = out / "package_text"
    if not (folder / "manifest.json").is_file():
        build_package_corpus(PackageTextConfig(include_stdlib=False), folder)
    return folder


def constant_forecast(
    cache: TokenCache, budgets: list[float], target: float, vocab_size: int, seq_len: int, out: Path
) -> dict[str, Any]:
    """The old ladder (named sizes x budgets, one rule), its L(N, D) fit, and micro at the target."""
    rule = ConstantRecipe(sizes=list(OLD_SIZES))

    def rung(size: str, budget: float) -> Rung:
        params = preset(size, vocab_size, seq_len).num_params(include_embeddings=False)
        run = rule.run(budget, vocab_size, seq_len, params=params)
        return Rung(run, 0, out / budget_key(budget) / size)

    records = []
    for budget in budgets:
        for size in OLD_SIZES:
            record = finished(r := rung(size, budget)) or train_rung(r, cache)
            print(f"constant: {r.label}: loss {record['loss']:.4f}", flush=True)
            records.append({**record, "run": f"{budget_key(budget)}|{size}"})
    law = fit(records, bootstrap=100, seed=0)
    goal = rung(OLD_TARGET, target)
    predicted = law.predict(goal.run.params, goal.run.tokens, goal.run.flops)
    actual = (finished(goal) or train_rung(goal, cache))["loss"]
    return {
        "method": law.method,
        "prediction": {"loss": predicted["loss"], "interval": predicted["loss_interval"]},
        "actual": actual,
        "error": (predicted["loss"] - actual) / actual,
        "runs": len(records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".marin/bench/scaling_forecast"))
    parser.add_argument("--budgets", default="1e11,2e11,4e11,8e11")
    parser.add_argument("--target", type=float, default=1e13)
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--points-per-budget", type=int, default=5)
    args = parser.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]
    text = corpus(args.out)
    delphi = run_forecast(
        [text],
        budgets,
        args.target,
        "delphi",
        args.seeds,
        args.out / "delphi",
        vocab_size=args.vocab_size,
        seq_len=args.seq_len,
        points_per_budget=args.points_per_budget,
        recipe_overrides={"head_dim": 8},
        progress=lambda line: print(f"delphi: {line}", flush=True),
    )
    cache = TokenCache(args.out / "delphi" / CACHE_DIR)
    constant = constant_forecast(
        cache, budgets, args.target, cache.info["vocab_size"], args.seq_len, args.out / "constant"
    )
    summary = {
        "extrapolation": args.target / max(budgets),
        "delphi": {
            k: delphi[k] for k in ("prediction", "actual", "error", "runs", "seed_spread", "cpu_seconds")
        },
        "constant": constant,
        "error_ratio": abs(delphi["error"]) / abs(constant["error"]),
    }
    errors = f"delphi {100 * delphi['error']:+.2f}%, constant {100 * constant['error']:+.2f}%"
    print(
        f"forecast error at {summary['extrapolation']:.3g}x: {errors} ({constant['method']} fit); "
        f"|delphi| / |constant| = {summary['error_ratio']:.3f}"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
