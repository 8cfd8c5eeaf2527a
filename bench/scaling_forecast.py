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

Both use the same token cache and the same validation loss. Beyond loss, the delphi side also forecasts
a downstream number in two steps, compute -> loss -> metric: bits-per-byte on the standard library's text
(held out: no rung trains on it), mapped from loss across the rungs (``scaling/downstream.py``) and read
at the forecast loss, against the target's own. The last line is one JSON object with both loss errors,
the downstream error, the seeds' spread and the ratio |delphi| / |constant|. About an hour on 2 cores at
the defaults; reruns reuse every finished run (``--out``).

    .venv/bin/python bench/scaling_forecast.py --out .marin/bench/scaling_forecast
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from marin_pipelines.crawl.package_text import PackageTextConfig, build_package_corpus
from marin_pipelines.experiments.scaling_forecast import LADDER, VALIDATION_FRACTION
from marin_pipelines.scaling.downstream import downstream_forecast
from marin_pipelines.scaling.fit import fit
from marin_pipelines.scaling.forecast_ladder import (
    BOOTSTRAP,
    CACHE_DIR,
    EVAL_BATCH_SIZE,
    FORECAST_FILE,
    RUNG_FILE,
    TARGET_DIR,
    Rung,
    find_text,
    finished,
    run_forecast,
    rung_folder,
    train_rung,
)
from marin_pipelines.scaling.frontier import forecast
from marin_pipelines.scaling.recipe import ConstantRecipe, recipe
from marin_pipelines.scaling.scaling_law import budget_key
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, TokenCache, build_cache
from marin_pipelines.tokenize.tokenizer import load_tokenizer, token_byte_lengths
from marin_pipelines.train.model import preset
from marin_pipelines.train.train_config import TrainConfig

OLD_SIZES = ("nano", "micro", "tiny")
OLD_TARGET = "micro"
HELD_OUT = "bpb/stdlib"
HELD_OUT_FILE = "stdlib_bpb.json"  # beside each run's rung.json: its bits-per-byte on the held-out text


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


def target_seeds(out: Path, cache: TokenCache, seeds: int, seq_len: int) -> dict[str, Any]:
    """The preregistered target trained again at seeds 1..seeds-1 (``target-s{seed}``, each reused once
    finished), so the forecast's error can be read against the target's seed noise as well."""
    forecast_record = json.loads((out / FORECAST_FILE).read_text())
    config = dict(forecast_record["recipe_config"])
    chosen = recipe(config.pop("name"), **config)
    budget = forecast_record["target"]["budget"]
    losses = [json.loads((out / TARGET_DIR / RUNG_FILE).read_text())["loss"]]  # seed 0: the target itself
    for seed in range(1, seeds):
        run = chosen.run(budget, cache.info["vocab_size"], seq_len, base=TrainConfig(seed=seed))
        rung = Rung(run, seed, out / f"{TARGET_DIR}-s{seed}")
        losses.append((finished(rung) or train_rung(rung, cache))["loss"])
        print(f"delphi: target {rung.label}: loss {losses[-1]:.4f}", flush=True)
    mean = float(np.mean(losses))
    predicted = forecast_record["prediction"]["loss"]
    return {
        "losses": losses,
        "mean": mean,
        "std": float(np.std(losses, ddof=1)) if len(losses) > 1 else None,
        "error_against_mean": (predicted - mean) / mean,
    }


def held_out_cache(out: Path, tokenizer_dir: Path) -> TokenCache:
    """The standard library's text in the ladder's tokenizer, built once (renamed into place when whole)."""
    cache_dir = out / "stdlib_cache"
    if not (cache_dir / "cache.json").is_file():
        folder = out / "stdlib_text"
        if not (folder / "manifest.json").is_file():
            build_package_corpus(PackageTextConfig(distributions=(), include_stdlib=True), folder)
        tmp = out / ".stdlib_cache.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shards = [str(f) for f in find_text([folder]).collections]
        config = CacheConfig(validation_fraction=0.1)
        build_cache(shards, load_tokenizer(tokenizer_dir), tmp, config, out / ".stdlib_cache.work")
        os.replace(tmp, cache_dir)
    return TokenCache(cache_dir)


def held_out_bpb(run_dir: Path, cache: TokenCache) -> float:
    """The run's bits-per-byte on the held-out validation split, measured once and kept beside it."""
    from marin_pipelines.evals.eval_results import evaluate_bpb_sets
    from marin_pipelines.train.checkpoint import load_checkpoint

    kept = run_dir / HELD_OUT_FILE
    if kept.is_file():
        return json.loads(kept.read_text())["bits_per_byte"]
    model, config = load_checkpoint(run_dir)
    token_bytes = token_byte_lengths(load_tokenizer(Path(cache.url)))
    sets = {"stdlib": np.asarray(cache.validation)}
    evaluated = evaluate_bpb_sets(model, sets, token_bytes, config.seq_len, EVAL_BATCH_SIZE)
    bpb = evaluated["overall"]["bits_per_byte"]
    partial = kept.with_suffix(".tmp")  # renamed into place: a killed run leaves no half-written record
    partial.write_text(json.dumps({"bits_per_byte": bpb}))
    os.replace(partial, kept)
    return bpb


def downstream(out: Path) -> dict[str, Any]:
    """compute -> loss -> bits-per-byte on held-out text: the map from loss fitted across the rungs, read
    at the preregistered loss forecast (the same seeded forecast, recomputed), against the target's."""
    cache = held_out_cache(out, out / CACHE_DIR)
    preregistered = json.loads((out / FORECAST_FILE).read_text())
    runs = []
    for run in preregistered["runs"]:  # in the order the forecast drew them: the same bootstrap
        folder = rung_folder(out, run["budget"], run["size"], run["seed"])
        runs.append({**run, HELD_OUT: held_out_bpb(folder, cache)})
    print(f"downstream: {HELD_OUT} of {len(runs)} rungs measured", flush=True)
    fields = ("budget", "params", "tokens", "loss", "seed")
    target = preregistered["target"]["budget"]
    loss_forecast = forecast([{k: r[k] for k in fields} for r in runs], target, bootstrap=BOOTSTRAP, seed=0)
    if abs(loss_forecast.loss - preregistered["prediction"]["loss"]) > 1e-9:
        raise RuntimeError("the recomputed loss forecast differs from the preregistered one")
    predicted = downstream_forecast(runs, HELD_OUT, loss_forecast)
    actual = held_out_bpb(out / TARGET_DIR, cache)
    return {
        "metric": HELD_OUT,
        "prediction": {"value": predicted.value, "interval": predicted.interval},
        "map_r2": predicted.map.r2,
        "actual": actual,
        "error": (predicted.value - actual) / actual,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".marin/bench/scaling_forecast"))
    # the defaults are the scaling_forecast experiment's
    parser.add_argument("--budgets", default=",".join(f"{b:g}" for b in LADDER["budgets"]))
    parser.add_argument("--target", type=float, default=LADDER["target_budget"])
    parser.add_argument("--vocab-size", type=int, default=LADDER["vocab_size"])
    parser.add_argument("--seq-len", type=int, default=LADDER["seq_len"])
    parser.add_argument("--seeds", type=int, default=LADDER["seeds"])
    parser.add_argument("--points-per-budget", type=int, default=LADDER["points_per_budget"])
    parser.add_argument("--validation-fraction", type=float, default=VALIDATION_FRACTION)
    parser.add_argument("--target-seeds", type=int, default=1, help="train the target at this many seeds")
    args = parser.parse_args()
    if args.target_seeds < 1:
        parser.error(f"--target-seeds must be >= 1 (seed 0 is the target itself), got {args.target_seeds}")
    budgets = [float(b) for b in args.budgets.split(",")]
    text = corpus(args.out)
    delphi = run_forecast(
        [text],
        budgets,
        args.target,
        LADDER["recipe"]["name"],
        args.seeds,
        args.out / "delphi",
        vocab_size=args.vocab_size,
        seq_len=args.seq_len,
        points_per_budget=args.points_per_budget,
        validation_fraction=args.validation_fraction,
        recipe_overrides={k: v for k, v in LADDER["recipe"].items() if k != "name"},
        progress=lambda line: print(f"delphi: {line}", flush=True),
    )
    cache = TokenCache(args.out / "delphi" / CACHE_DIR)
    constant = constant_forecast(
        cache, budgets, args.target, cache.info["vocab_size"], args.seq_len, args.out / "constant"
    )
    held_out = downstream(args.out / "delphi")
    seeded = target_seeds(args.out / "delphi", cache, args.target_seeds, args.seq_len)
    summary = {
        "extrapolation": args.target / max(budgets),
        "delphi": {
            k: delphi[k] for k in ("prediction", "actual", "error", "runs", "seed_spread", "cpu_seconds")
        },
        "constant": constant,
        "error_ratio": abs(delphi["error"]) / abs(constant["error"]),
        "downstream": held_out,
        "target_seeds": seeded,
    }
    errors = f"delphi {100 * delphi['error']:+.2f}%, constant {100 * constant['error']:+.2f}%"
    print(
        f"forecast error at {summary['extrapolation']:.3g}x: {errors} ({constant['method']} fit); "
        f"|delphi| / |constant| = {summary['error_ratio']:.3f}; {HELD_OUT} forecast error "
        f"{100 * held_out['error']:+.2f}%"
    )
    if seeded["std"] is not None:
        print(
            f"target over {len(seeded['losses'])} seeds: {seeded['mean']:.4f} (std {seeded['std']:.4f}); "
            f"delphi's error against their mean {100 * seeded['error_against_mean']:+.2f}%"
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
