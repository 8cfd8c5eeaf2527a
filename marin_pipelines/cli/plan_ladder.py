"""`marin-pipelines plan-ladder --target-budget C --error E`: the IsoFLOP ladder a wanted accuracy needs.

Before any rung trains: candidate ladders below ``C / --extrapolation`` are planned by the recipe and scored
on synthetic ladders drawn from a known law (``scaling/ladder_planner.py``); the cheapest that forecasts
within ``E`` in ``--probability`` of the draws, drawn until that share's interval is clear of it (at most
``--max-draws``), is the plan. Progress and a table go to stderr; the last line
of stdout is one JSON object (its ``ladder`` is the config ``isoflop_ladder(..., ladder=...)`` takes). An
accuracy out of reach exits 1, the JSON still printed with the best candidate.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from marin_pipelines.cli import print_json
from marin_pipelines.cli.forecast import recipe_arguments
from marin_pipelines.scaling.seed_noise import MEASURED_SEED_NOISE

if TYPE_CHECKING:
    from marin_pipelines.scaling.ladder_planner import LadderPlan


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan-ladder",
        help="before training: the cheapest IsoFLOP ladder whose forecast of a target budget's loss lands "
        "within a wanted error, from synthetic ladders of each candidate shape",
    )
    parser.add_argument("--target-budget", type=float, required=True, help="the FLOP budget to forecast")
    parser.add_argument("--error", type=float, required=True, help="the wanted relative error, e.g. 0.01")
    parser.add_argument(
        "--probability", type=float, default=0.9, help="the share of draws that must land within it"
    )
    parser.add_argument(
        "--extrapolation", type=float, default=10.0, help="the target over the ladder's largest budget"
    )
    recipe_arguments(parser)
    parser.add_argument("--vocab-size", type=int, default=2048, help="the models' vocabulary")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per training sequence")
    parser.add_argument("--points-per-budget", type=int, default=5, help="sizes swept per budget (>= 3)")
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument(
        "--noise",
        type=float,
        default=None,
        help=f"each run's relative seed noise (default {MEASURED_SEED_NOISE.relative:g}, "
        f"{MEASURED_SEED_NOISE.source})",
    )
    noise.add_argument(
        "--noise-from",
        metavar="FORECAST_JSON",
        help="take the noise from an existing ladder: the forecast.json its isoflop_forecast step wrote",
    )
    parser.add_argument("--max-budgets", type=int, default=8, help="the most budgets a candidate has")
    parser.add_argument("--max-seeds", type=int, default=3, help="the most seeds a size a candidate has")
    parser.add_argument(
        "--max-ladder-ratio", type=float, default=None, help="the most a ladder may cost: x the target"
    )
    parser.add_argument(
        "--min-budget",
        type=float,
        default=None,
        help="no budget below this (e.g. where rungs on your text still sit on the unigram plateau)",
    )
    parser.add_argument(
        "--max-draws",
        type=int,
        default=None,
        help="the most synthetic ladders drawn per candidate (the planner's cap by default): each is drawn "
        "in batches until its pass rate's interval is clear of --probability",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the draws (the same for every candidate)")
    parser.set_defaults(run=run_plan_ladder_command)


def run_plan_ladder_command(args: argparse.Namespace) -> int:
    from marin_pipelines.scaling.ladder_planner import (
        DEFAULT_NOISE,
        MAX_DRAWS,
        noise_from_forecast,
        plan_ladder,
    )
    from marin_pipelines.scaling.recipe import recipe

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    noise = DEFAULT_NOISE if args.noise is None else args.noise
    if args.noise_from is not None:
        noise, note = noise_from_forecast(args.noise_from)
        say(note)
    plan = plan_ladder(
        args.target_budget,
        args.error,
        recipe=recipe(args.recipe, **dict(args.recipe_option)),
        vocab_size=args.vocab_size,
        seq_len=args.seq_len,
        points_per_budget=args.points_per_budget,
        extrapolation=args.extrapolation,
        probability=args.probability,
        noise=noise,
        max_budgets=args.max_budgets,
        max_seeds=args.max_seeds,
        max_ladder_ratio=args.max_ladder_ratio,
        min_budget=args.min_budget,
        max_draws=MAX_DRAWS if args.max_draws is None else args.max_draws,
        seed=args.seed,
        progress=say,
    )
    say("")
    say(table(plan))
    say("")
    say(("plan: " if plan.reachable else "out of reach: ") + plan.message)
    print_json(plan.as_dict())
    return 0 if plan.reachable else 1


def table(plan: LadderPlan) -> str:
    """Every candidate, one row: its shape, cost, how often it lands within the error (of how many draws,
    the interval, the verdict) and the error it lands within at the wanted probability; * the plan."""
    within, at = f"within {plan.error:.2%}", f"error at {plan.wanted_probability:.0%}"
    rows = [
        f"  budgets  span  seeds  runs  ladder FLOPs  x target  {within}  draws  interval    verdict    {at}"
    ]
    for c in plan.candidates:
        mark = "*" if (c.budgets, c.seeds) == (plan.budgets, plan.seeds) else " "
        shape = f"{mark} {len(c.budgets):>7}  {c.span:>4.0f}  {c.seeds:>5}"
        if c.refused is not None:
            rows.append(f"{shape}  not planned: {c.refused}")
            continue
        assert c.probability_interval is not None
        interval = "[{:.0%}, {:.0%}]".format(*c.probability_interval)
        rows.append(
            f"{shape}  {c.runs:>4}  {c.ladder_flops:>12.3g}  {c.ratio:>8.2f}  "
            f"{c.probability:>{len(within)}.0%}  {c.draws:>5}  {interval:<10}  {c.verdict:<9}  "
            f"{c.error_at_probability:>{len(at)}.2%}"
        )
    return "\n".join(rows)
