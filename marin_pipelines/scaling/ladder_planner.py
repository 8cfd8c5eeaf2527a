"""Plan an IsoFLOP ladder for a wanted forecast accuracy before its first rung trains (issue 39).

A forecast's error has the law's part (the loss curve is not the form fitted) and the ladder's (noisy
optima, a frontier fitted over a narrow span). The ladder's part can be measured before training: draw
ladders of a candidate's shape from a known law with seed-like noise (``synthetic_ladder``), forecast
each with the pipeline's own frontier, and count how often the forecast lands within the wanted error.
The planner does that for ladders of 3..``max_budgets`` budgets a factor 2 apart below
``target / extrapolation`` and 1..``max_seeds`` seeds a size, and proposes the cheapest one (in training
FLOPs, as the recipe plans its rungs) that reaches the wanted probability.

A share of a few dozen draws is itself noisy: at 40 draws, a candidate that lands within the error 85% of
the time shows 90% or more one time in four. So each candidate is drawn in batches until the pass rate's
Wilson interval (95%) lies clear of the wanted probability, at most ``max_draws`` times; it reaches the
probability only when the whole interval lies at or above it. One still undecided at the cap does not
count as reaching it (a true 90% at 90% asked stays undecided most of the time), and the plan says how
many draws each candidate took. The law being exactly true, the plan is a lower bound on what a ladder
needs: a real loss curve that bends past the ladder adds its own error (the README's "Towards forecasts
that hold", and ``bench/forecast_calibration.py``'s laws that bend).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import TypeAdapter
from scipy.stats import binomtest

from marin_pipelines.scaling import synthetic_ladder
from marin_pipelines.scaling.frontier import forecast
from marin_pipelines.scaling.isoflop_ladder import MIN_BUDGETS, MIN_POINTS, IsoflopLadderConfig
from marin_pipelines.scaling.recipe import AnyRecipe, Recipe
from marin_pipelines.scaling.seed_noise import MEASURED_SEED_NOISE
from marin_pipelines.scaling.synthetic_ladder import HOFFMANN

# The synthetic target: every candidate's ladder is drawn below it, as a real plan grows its ladder downward
# from its target. 8e19 puts a 4-budget ladder at 10x on 1e18-8e18 (bench/ladder_power.py's figures).
TARGET_ANCHOR = 8e19
INTERVAL_DRAWS, INTERVAL_BOOTSTRAP = 12, 50  # draws and resamples that measure the plan's interval width
DEFAULT_NOISE = MEASURED_SEED_NOISE.relative  # relative seed noise a run: scaling_forecast's measured 0.61%
DRAW_BATCH = 40  # draws between two looks at a candidate's pass rate
MAX_DRAWS = 400  # the most draws a candidate gets before it is left undecided
PASS_CONFIDENCE = 0.95  # the pass rate's Wilson interval
# what a plan's JSON takes from its chosen candidate, beside its budgets
CHOSEN_FIELDS = (
    "seeds", "runs", "ladder_flops", "ratio", "probability", "probability_interval", "draws",
    "error_at_probability",
)  # fmt: skip


@dataclass(frozen=True)
class ForecastErrors:
    """The forecasts' relative errors over ``draws`` synthetic ladders of one shape; NaN where a draw left
    fewer than 3 budgets bracketed (no forecast: a miss). ``floor_at_zero``: draws whose frontier's E sat at
    its bound 0 (the point fit's ``Forecast.warnings``)."""

    errors: tuple[float, ...]
    floor_at_zero: int
    widths: tuple[float, ...] = ()  # the 95% predictive intervals' widths, relative, where asked for

    def passes(self, error: float) -> int:
        """The draws whose forecast lands within ``error`` (relative) of the true loss; a NaN never does."""
        return int(np.sum(np.abs(np.asarray(self.errors)) <= error))

    def within(self, error: float) -> float:
        """The share of draws whose forecast lands within ``error``."""
        return self.passes(error) / len(self.errors)

    def error_at(self, probability: float) -> float:
        """The smallest error the forecast lands within in at least ``probability`` of the draws."""
        misses = np.sort(np.nan_to_num(np.abs(self.errors), nan=math.inf))
        return float(misses[math.ceil(probability * len(misses)) - 1])


Verdict = Literal["reaches", "short", "undecided"]  # a pass rate's interval against the wanted probability


@dataclass(frozen=True)
class PassRate:
    """How often a candidate's forecast landed within the error: ``passes`` of ``draws``, and the Wilson
    interval (``PASS_CONFIDENCE``) of the rate."""

    passes: int
    draws: int
    low: float
    high: float

    @classmethod
    def of(cls, passes: int, draws: int) -> PassRate:
        interval = binomtest(passes, draws).proportion_ci(PASS_CONFIDENCE, method="wilson")
        return cls(passes, draws, float(interval.low), float(interval.high))

    @property
    def rate(self) -> float:
        return self.passes / self.draws

    def verdict(self, probability: float) -> Verdict:
        """``reaches`` (the interval lies at or above ``probability``), ``short`` (below) or ``undecided``."""
        if self.low >= probability:
            return "reaches"
        return "short" if self.high < probability else "undecided"


def draws_to_decide(
    draw: Callable[[int, int], ForecastErrors], error: float, probability: float, max_draws: int
) -> tuple[ForecastErrors, PassRate]:
    """Draw (``draw(start, count)``: draws start..start + count - 1) in batches of ``DRAW_BATCH`` until the
    share within ``error`` has a Wilson interval clear of ``probability``, or ``max_draws`` were drawn."""
    errors: list[float] = []
    widths: list[float] = []
    at_zero = 0
    while True:
        found = draw(len(errors), min(DRAW_BATCH, max_draws - len(errors)))
        errors += found.errors
        widths += found.widths
        at_zero += found.floor_at_zero
        drawn = ForecastErrors(tuple(errors), at_zero, tuple(widths))
        rate = PassRate.of(drawn.passes(error), len(errors))
        if rate.verdict(probability) != "undecided" or len(errors) >= max_draws:
            return drawn, rate


def least_draws(probability: float) -> int:
    """The fewest draws whose pass rate can reach ``probability``: all of them within the error."""
    draws = 1
    while PassRate.of(draws, draws).low < probability:
        draws += 1
    return draws


def synthetic_budgets(budgets: Sequence[float], extrapolation: float) -> tuple[list[float], float]:
    """A candidate's budgets on the synthetic law, top first, and its target: scaled so that the target sits
    at ``TARGET_ANCHOR`` whatever the candidate. A candidate with one more budget adds it below the others,
    as a real plan does, and (draws seeded alike, top budget first) shares their runs."""
    scale = TARGET_ANCHOR / (extrapolation * max(budgets))
    return sorted((b * scale for b in budgets), reverse=True), TARGET_ANCHOR


def forecast_errors(
    budgets: Sequence[float],
    *,
    sizes: int = 5,
    seeds: int = 1,
    noise: float = DEFAULT_NOISE,
    draws: int = 40,
    extrapolation: float = 10.0,
    seed: int = 0,
    bootstrap: int = 0,
) -> ForecastErrors:
    """How a ladder with these budgets' ratios forecasts ``extrapolation`` x past its top budget when the
    law is Hoffmann et al.'s, exactly, and each run's loss carries ``noise`` (relative, normal in log).

    The synthetic target sits at ``TARGET_ANCHOR`` whatever the candidate (``synthetic_budgets``): a ladder
    of k budgets is the top k budgets of one of k + 1 (draw i uses numpy's generator seeded ``seed + i`` in
    every shape, the top budget's runs drawn first), so candidates differ by the budgets they add below, not
    by fresh noise. The point forecast is what is scored against the truth; with ``bootstrap`` resamples
    each draw's 95% predictive interval is computed too, and its width kept.
    """
    synthetic, target = synthetic_budgets(budgets, extrapolation)
    truth = synthetic_ladder.optimum(HOFFMANN, target)[1]
    errors: list[float] = []
    widths: list[float] = []
    floor_at_zero = 0
    for i in range(draws):
        runs = synthetic_ladder.ladder(
            HOFFMANN, synthetic, np.random.default_rng(seed + i), sizes=sizes, seeds=seeds, noise=noise
        )
        try:
            result = forecast(runs, target, bootstrap=bootstrap, cross_check=False)
        except ValueError:  # fewer than 3 budgets with a bracketed optimum
            errors.append(math.nan)
            continue
        errors.append(result.loss / truth - 1)
        floor_at_zero += bool(result.warnings)
        if bootstrap:
            low, high = result.loss_interval
            widths.append((high - low) / result.loss)
    return ForecastErrors(tuple(errors), floor_at_zero, tuple(widths))


@dataclass(frozen=True)
class Candidate:
    """One ladder considered: its budgets and seeds, what the recipe plans for it, and how often its
    forecast lands within the wanted error (None where it is not planned: ``refused`` says why, the recipe's
    reason or ``min_budget``): the share of ``draws``, its interval, and the ``verdict`` against the wanted
    probability (``PassRate.verdict``)."""

    budgets: tuple[float, ...]
    seeds: int
    runs: int  # rungs x seeds, as the recipe plans them
    ladder_flops: float  # the planned rungs' training FLOPs
    ratio: float  # ladder_flops / the target's budget
    probability: float | None
    error_at_probability: float | None  # the error it lands within at the wanted probability
    refused: str | None = None
    probability_interval: tuple[float, float] | None = None
    draws: int = 0
    verdict: Verdict | None = None

    @property
    def span(self) -> float:
        return max(self.budgets) / min(self.budgets)

    def describe(self, error: float) -> str:
        shape = f"{len(self.budgets)} budgets over {self.span:.0f}x, {self.seeds} seed(s)"
        if self.refused is not None:
            return f"{shape}: not planned ({self.refused})"
        assert self.probability_interval is not None
        low, high = self.probability_interval
        return (
            f"{shape}: {self.runs} runs, {self.ladder_flops:.3g} FLOPs ({self.ratio:.2f}x the target), "
            f"within {error:.2%} in {self.probability:.0%} of {self.draws} draws [{low:.0%}, {high:.0%}]: "
            f"{self.verdict}"
        )

    def as_dict(self) -> dict[str, Any]:
        interval = None if self.probability_interval is None else list(self.probability_interval)
        return {
            **asdict(self),
            "budgets": list(self.budgets),
            "span": self.span,
            "probability_interval": interval,
        }


@dataclass(frozen=True)
class LadderPlan:
    """The chosen candidate: the cheapest that reaches the wanted probability (its pass rate's interval at
    or above it) or, where none does (``reachable`` False), the one within the smallest error at that
    probability. ``message`` says what it means; the chosen candidate's shape, cost and promise read through
    (``plan.budgets``...)."""

    target_budget: float
    error: float
    wanted_probability: float
    chosen: Candidate
    points_per_budget: int
    interval_width_95: float  # the median width of the plan's 95% predictive interval, relative
    reachable: bool
    message: str
    recipe: Recipe
    vocab_size: int
    seq_len: int
    extrapolation: float
    noise: float
    max_draws: int
    candidates: tuple[Candidate, ...]

    @property
    def budgets(self) -> tuple[float, ...]:
        return self.chosen.budgets

    @property
    def seeds(self) -> int:
        return self.chosen.seeds

    @property
    def runs(self) -> int:
        return self.chosen.runs

    @property
    def ladder_flops(self) -> float:
        return self.chosen.ladder_flops

    @property
    def ratio(self) -> float:
        return self.chosen.ratio

    @property
    def probability(self) -> float:
        """The share of draws within ``error``; never None: the chosen candidate is planned."""
        assert self.chosen.probability is not None
        return self.chosen.probability

    @property
    def probability_interval(self) -> tuple[float, float]:
        assert self.chosen.probability_interval is not None
        return self.chosen.probability_interval

    @property
    def draws(self) -> int:
        """The synthetic ladders drawn for the chosen candidate."""
        return self.chosen.draws

    @property
    def error_at_probability(self) -> float:
        assert self.chosen.error_at_probability is not None
        return self.chosen.error_at_probability

    def ladder_config(self) -> dict[str, Any]:
        """The IsoFLOP ladder's config (``isoflop_ladder(..., ladder=...)``, the keys of
        ``scaling_forecast.LADDER``): the recipe as its name and the constants it overrides."""
        return {
            "recipe": {"name": self.recipe.name, **self.recipe.model_dump(exclude_defaults=True)},
            "budgets": list(self.chosen.budgets),
            "points_per_budget": self.points_per_budget,
            "seeds": self.chosen.seeds,
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "target_budget": self.target_budget,
        }

    def as_dict(self) -> dict[str, Any]:
        """The plan flat: the chosen candidate's fields beside the plan's own."""
        fields = {k: v for k, v in asdict(self).items() if k not in ("recipe", "candidates", "chosen")}
        chosen = {k: getattr(self, k) for k in CHOSEN_FIELDS}
        return {
            **fields,
            **chosen,
            "probability_interval": list(self.probability_interval),
            "budgets": list(self.budgets),
            "ladder": self.ladder_config(),
            "candidates": [c.as_dict() for c in self.candidates],
        }


def _check(**checks: tuple[Any, bool, str]) -> None:
    for name, (value, ok, allowed) in checks.items():
        if not ok:
            raise ValueError(f"{name} must be {allowed}, got {value}")


def _planned(config: IsoflopLadderConfig) -> tuple[int, float] | str:
    """The rungs and training FLOPs of one seed a size as the recipe plans the ladder, or why it refuses."""
    try:
        rungs = config.plan().rungs
    except ValueError as e:
        return str(e)
    return len(rungs), sum(r.run.flops for r in rungs)


def plan_ladder(
    target_budget: float,
    error: float,
    *,
    recipe: Recipe | dict[str, Any],
    vocab_size: int,
    seq_len: int,
    points_per_budget: int = 5,
    extrapolation: float = 10.0,
    probability: float = 0.9,
    noise: float = DEFAULT_NOISE,
    max_budgets: int = 8,
    max_seeds: int = 3,
    max_ladder_ratio: float | None = None,
    min_budget: float | None = None,
    max_draws: int = MAX_DRAWS,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> LadderPlan:
    """The cheapest IsoFLOP ladder whose forecast of ``target_budget``'s loss lands within ``error``
    (relative) in at least ``probability`` of synthetic draws, with that share's interval clear of it after
    at most ``max_draws`` draws (module docstring), with at most
    ``max_ladder_ratio`` x the target's FLOPs where given. Its top budget is ``target_budget /
    extrapolation``; no budget lies below ``min_budget`` where given (where rungs still sit on the unigram
    plateau, say: the draws' law has no plateau). ``progress`` gets one line per candidate. An accuracy
    out of reach is a plan with ``reachable`` False, not an error; bad arguments, or a recipe that plans no
    candidate, raise ValueError.
    The draws sweep ``points_per_budget`` sizes at every budget, also where the recipe merges two points onto
    one shape (at its smallest budgets); ``runs`` and ``ladder_flops`` are the recipe's rungs.
    """
    lowest = target_budget / max(extrapolation, 1.0) / 2 ** (MIN_BUDGETS - 1)  # a 3-budget ladder's least
    needed = least_draws(probability) if 0 < probability < 1 else 1
    _check(
        target_budget=(target_budget, target_budget > 0 and math.isfinite(target_budget), "positive"),
        error=(error, error > 0, "positive (relative, e.g. 0.01)"),
        probability=(probability, 0 < probability < 1, "in (0, 1)"),
        extrapolation=(extrapolation, extrapolation >= 1, "at least 1"),
        noise=(noise, noise >= 0, "non-negative (relative, e.g. 0.006)"),
        points_per_budget=(points_per_budget, points_per_budget >= MIN_POINTS, f"at least {MIN_POINTS}"),
        max_budgets=(max_budgets, max_budgets >= MIN_BUDGETS, f"at least {MIN_BUDGETS}"),
        max_seeds=(max_seeds, max_seeds >= 1, "at least 1"),
        max_draws=(
            max_draws,
            max_draws >= needed,
            f"at least {needed}: fewer draws cannot show a pass rate of {probability} or more with "
            f"{PASS_CONFIDENCE:.0%} confidence",
        ),
        max_ladder_ratio=(max_ladder_ratio, max_ladder_ratio is None or max_ladder_ratio > 0, "positive"),
        min_budget=(
            min_budget,
            min_budget is None or 0 < min_budget <= lowest,
            f"in (0, {lowest:.3g}]: 3 budgets a factor 2 apart below target_budget / extrapolation",
        ),
    )
    if isinstance(recipe, dict):
        recipe = TypeAdapter(AnyRecipe).validate_python(recipe)
    top = target_budget / extrapolation
    shape_errors = partial(forecast_errors, sizes=points_per_budget, noise=noise, extrapolation=extrapolation)
    candidates: list[Candidate] = []
    for count in range(MIN_BUDGETS, max_budgets + 1):
        budgets = tuple(top / 2**i for i in reversed(range(count)))
        config = IsoflopLadderConfig(
            recipe=recipe,
            budgets=list(budgets),
            points_per_budget=points_per_budget,
            vocab_size=vocab_size,
            seq_len=seq_len,
            target_budget=target_budget,
        )
        planned = _planned(config)  # a seed only reseeds each rung: s seeds cost s times one
        if min_budget is not None and budgets[0] < min_budget * (1 - 1e-9):
            planned = f"its smallest budget {budgets[0]:.3g} lies below min_budget {min_budget:.3g}"
        for seeds in range(1, max_seeds + 1):
            if isinstance(planned, str):
                candidate = Candidate(budgets, seeds, 0, math.nan, math.nan, None, None, planned)
            else:
                draw = partial(_draw, shape_errors, budgets, seeds, seed)
                found, rate = draws_to_decide(draw, error, probability, max_draws)
                flops = seeds * planned[1]
                candidate = Candidate(
                    budgets,
                    seeds,
                    seeds * planned[0],
                    flops,
                    flops / target_budget,
                    rate.rate,
                    found.error_at(probability),
                    probability_interval=(rate.low, rate.high),
                    draws=rate.draws,
                    verdict=rate.verdict(probability),
                )
            candidates.append(candidate)
            if progress is not None:
                progress(candidate.describe(error))
    plannable = [c for c in candidates if c.refused is None]
    if not plannable:
        raise ValueError(  # the smallest candidate's budgets are in every other's
            f"the recipe plans no candidate ladder below {top:.3g} FLOPs (target / extrapolation): "
            f"{candidates[0].refused}"
        )
    limit = math.inf if max_ladder_ratio is None else max_ladder_ratio
    affordable = [c for c in plannable if c.ratio <= limit]
    meeting = [c for c in affordable if c.verdict == "reaches"]
    reachable = bool(meeting)
    if reachable:
        chosen = min(meeting, key=lambda c: c.ladder_flops)
    else:
        # the best promise at the wanted probability: a share within an error out of reach is mostly 0
        chosen = min(affordable or plannable, key=lambda c: (c.error_at_probability, c.ladder_flops))
    # what the plan's forecast will say of itself: its preregistered 95% interval's typical width
    width = shape_errors(
        chosen.budgets, seeds=chosen.seeds, draws=INTERVAL_DRAWS, seed=seed, bootstrap=INTERVAL_BOOTSTRAP
    ).widths
    interval_width = float(np.median(width)) if width else math.nan
    message = _message(chosen, reachable, affordable, plannable, error, probability, max_ladder_ratio)
    message += (
        f" Its preregistered 95% interval would be about {interval_width:.1%} wide (the median of "
        f"{len(width)} draws)."
    )
    return LadderPlan(
        target_budget=target_budget,
        error=error,
        wanted_probability=probability,
        chosen=chosen,
        points_per_budget=points_per_budget,
        interval_width_95=interval_width,
        reachable=reachable,
        message=message,
        recipe=recipe,
        vocab_size=vocab_size,
        seq_len=seq_len,
        extrapolation=extrapolation,
        noise=noise,
        max_draws=max_draws,
        candidates=tuple(candidates),
    )


def _draw(
    shape_errors: Callable[..., ForecastErrors],
    budgets: Sequence[float],
    seeds: int,
    seed: int,
    start: int,
    count: int,
) -> ForecastErrors:
    """Draws ``start`` .. ``start + count - 1`` of one candidate (draw i seeded ``seed + i``)."""
    return shape_errors(budgets, seeds=seeds, draws=count, seed=seed + start)


def _message(
    chosen: Candidate,
    reachable: bool,
    affordable: list[Candidate],
    plannable: list[Candidate],
    error: float,
    probability: float,
    max_ladder_ratio: float | None,
) -> str:
    shape = (
        f"{len(chosen.budgets)} budgets a factor 2 apart ({min(chosen.budgets):.3g} to "
        f"{max(chosen.budgets):.3g} FLOPs, {chosen.span:.0f}x) with {chosen.seeds} seed(s) a size: "
        f"{chosen.runs} runs, {chosen.ladder_flops:.3g} FLOPs, {chosen.ratio:.2f}x the target's"
    )
    assert chosen.probability_interval is not None
    low, high = chosen.probability_interval
    rate = (
        f"{chosen.probability:.0%} of {chosen.draws} synthetic draws ({PASS_CONFIDENCE:.0%} interval "
        f"[{low:.0%}, {high:.0%}])"
    )
    if reachable:
        return (
            f"{shape}. Its forecast landed within {error:.2%} in {rate}, clear of the {probability:.0%} "
            "asked; the law exactly true: a curve that bends past the ladder adds its own error."
        )
    within = "" if max_ladder_ratio is None else f" within {max_ladder_ratio:g}x the target's FLOPs"
    if not affordable:
        cheapest = min(plannable, key=lambda c: c.ladder_flops)
        return (
            f"No candidate ladder fits{within}: the cheapest costs {cheapest.ratio:.2f}x the target's FLOPs. "
            f"Allow more compute (max_ladder_ratio) or fewer points per budget."
        )
    undecided = [c for c in affordable if c.verdict == "undecided"]
    unsure = (
        f" {len(undecided)} candidate(s) stayed undecided after their draws: their pass rate's interval "
        f"still holds {probability:.0%}."
        if undecided
        else ""
    )
    return (
        f"A forecast within {error:.2%} in {probability:.0%} of draws is out of reach for these ladders"
        f"{within}.{unsure} The best, {shape}, lands within it in {rate}; at {probability:.0%} it promises "
        f"{chosen.error_at_probability:.2%}. Ask for a looser error or a lower probability, or allow more "
        "budgets, seeds or compute, or a target nearer the ladder (extrapolation)."
    )


def noise_from_forecast(path: str | Path) -> tuple[float, str]:
    """The relative seed noise a run measured on an existing ladder: ``seed_spread`` (the pooled std of loss
    across seeds, absolute) over the mean of its usable optima's losses, from the ``forecast.json`` the
    ``isoflop_forecast`` step writes; with no seeds, ``DEFAULT_NOISE``. Returns (noise, a line saying
    which)."""
    written = json.loads(Path(path).read_text())
    if "forecast" not in written:
        raise ValueError(
            f"{path}: not a forecast.json written by an isoflop_forecast step (no 'forecast' key)"
        )
    record = written["forecast"]
    spread = record.get("seed_spread")
    if spread is None:
        return DEFAULT_NOISE, f"{path} has no seeds to measure noise on: using {DEFAULT_NOISE:.2%} a run"
    losses = [o["profile"]["loss"] for o in record["optima"] if o["usable"]]
    mean = float(np.mean(losses))
    noise = spread / mean
    return noise, f"noise {noise:.2%} a run: a seed spread of {spread:.4g} over optima of {mean:.4g}"
