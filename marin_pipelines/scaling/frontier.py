"""Forecast a target budget's loss from an IsoFLOP ladder: Chinchilla approach 2 and a loss frontier.

Terms: a run is one record (keys budget, params N non-embedding, tokens D, loss, optional seed); a
rung is one (budget, N), holding one run per seed.

1. Each budget's optimum is the vertex (N*, L*) of a parabola of loss in log N through that budget's
   sweep (``isoflop.py``). A budget with fewer than 3 sizes, a parabola opening downward or a vertex
   outside the sizes trained is reported with the reason and left out: the optimum is not bracketed.
2. The frontier L*(C) = E + A C^-a through the optima (the loss frontier as Delphi fits it), by least
   squares on relative residuals in (E, log A, a) with C divided by the budgets' geometric mean, so the
   three unknowns are of order one, and E in [0, min L*): the irreducible loss is neither negative nor
   above the best loss seen. With few budgets E and a trade off, so the start is the best E on a grid,
   each grid point fitted in closed form. With exactly 3 budgets E is 0 (a power law, 2 unknowns): three
   unknowns through three noisy optima extrapolate the noise (a demo ladder's E went to 3.35 of an
   optimal 3.44, a = 1.17, and the forecast missed by +20%). For L(N, D) = E + A/N^alpha + B/D^beta the
   frontier is exact, with a = alpha beta / (alpha + beta). N*(C) and D*(C) are power laws through the optima.
3. The forecast evaluates them at the target. The resamples redo the whole chain: rungs resampled with
   replacement within each budget, then runs within each rung, so they carry both the sweep's and the
   seeds' noise. N* and D* get their percentiles; the loss gets a predictive interval at 80% and 95%
   (``forecast_interval.py``), of which the resamples are one source of three, beside the unidentified
   floor and the curve's form past the ladder. A resample that leaves any of the used budgets
   unbracketed is drawn again. E's own interval over the resamples (``floor_interval``) says whether the
   ladder identifies a floor at all; where it reaches 0 the forecast warns (``Forecast.warnings``).

Where the ladder supports the 5-parameter L(N, D) (``fit.chinchilla_fits``), its own optimum at the
target is reported beside the frontier's (approach 3 as a cross-check on approach 2, same runs). That
optimum spends the target's FLOPs as the rungs counted theirs: D = C / f(N), with f the rungs' FLOPs per
token as a power law in N, not 6N. At small widths attention and the LM head cost as much as the rest (a
rung of 8k non-embedding params spends 18N FLOPs a token), and C = 6ND would hand the law 2-3x the tokens
the budget buys (on the scaling_forecast ladder: 2.439 at the target where the real budget gives 2.501).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np
from scipy.optimize import least_squares
from threadpoolctl import threadpool_limits

from marin_pipelines.scaling.chinchilla import ChinchillaLaw, fit_chinchilla
from marin_pipelines.scaling.fit import CONFIDENCE, _interval, chinchilla_fits
from marin_pipelines.scaling.forecast_interval import (
    MIN_SPREAD,
    PredictiveInterval,
    extrapolation_scale,
    floor_ranges,
    form_bias,
    power_law_with_floor,
    predictive_intervals,
)
from marin_pipelines.scaling.isoflop import (
    IsoflopProfile,
    PowerLaw,
    fit_isoflops,
    fit_power_law,
    group_by_budget,
    isoflop_vertex,
)

MIN_BUDGETS = 3  # the frontier has 3 unknowns
E_GRID = 64  # start values of E tried in [0, min L*)
E_AT_BOUND = 1e-3  # an E below this fraction of the best optimum is at its bound, 0
Z_95 = 1.959964  # a normal's 97.5th percentile: a 95% interval's half-width in standard deviations
Run = dict[str, float]
T = TypeVar("T")


@dataclass(frozen=True)
class BudgetOptimum:
    """One budget's optimum with bootstrap intervals, or why the budget is not usable."""

    budget: float
    n_rungs: int  # distinct sizes
    n_runs: int
    profile: IsoflopProfile | None  # the vertex; None without one
    loss_interval: tuple[float, float] | None
    params_interval: tuple[float, float] | None
    problem: str | None  # None when usable

    @property
    def usable(self) -> bool:
        return self.problem is None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usable": self.usable}


@dataclass(frozen=True)
class Frontier:
    """L*(C) = E + A C^-a, the lowest loss reachable with C FLOPs."""

    E: float
    A: float
    a: float

    def __call__(self, flops: float) -> float:
        return self.E + self.A * flops**-self.a

    @property
    def formula(self) -> str:
        return f"L*(C) = {self.E:.4g} + {self.A:.4g} C^-{self.a:.4f}"


@dataclass(frozen=True)
class Forecast:
    """The optimal loss, N* and D* at the target budget, with bootstrap intervals and what they rest on."""

    target_budget: float
    loss: float
    loss_interval: tuple[float, float]  # the 95% predictive interval, ``intervals[0.95]``
    params: float
    params_interval: tuple[float, float]
    tokens: float
    tokens_interval: tuple[float, float]
    frontier: Frontier
    floor_interval: tuple[float, float]  # the frontier's E over the resamples
    params_law: PowerLaw  # N*(C)
    tokens_law: PowerLaw  # D*(C)
    optima: tuple[BudgetOptimum, ...]  # every budget, usable or not
    n_budgets: int  # usable budgets
    n_rungs: int  # rungs in usable budgets
    n_runs: int  # runs in usable budgets
    seed_spread: float | None  # pooled std of loss across seeds of a rung; None without repeats
    chinchilla: ChinchillaLaw | None  # the L(N, D) cross-check
    chinchilla_reason: str  # why it was or was not fitted
    flops_per_token: PowerLaw  # the rungs' training FLOPs per token against N (budget / tokens)
    bootstrap: int  # resamples drawn
    seed: int
    # the predictive intervals at ``LEVELS`` with their sources (``forecast_interval.py``)
    intervals: dict[float, PredictiveInterval]
    bootstrap_interval: tuple[float, float]  # the 95% percentiles of the resamples alone (the optima's noise)
    backtest_error: float  # the top budget's optimum forecast from the budgets below it, relative
    form_scale: float  # log(target / top) / log(top / next): backtest steps to the target

    @property
    def by_percent(self) -> dict[str, PredictiveInterval]:
        """The intervals keyed as they are written: ``{"80": ..., "95": ...}``."""
        return {f"{round(100 * level)}": i for level, i in self.intervals.items()}

    @property
    def chinchilla_optimum(self) -> tuple[float, float] | None:
        """The L(N, D) law's own optimum at the target (approach 3), (N*, L*), with D = C / f(N) as the
        rungs count FLOPs; None without the law."""
        if self.chinchilla is None:
            return None
        # On a log grid around the law's own 6ND optimum: L along an IsoFLOP line has one minimum.
        centre = self.chinchilla.compute_optimal(self.target_budget)[0]
        params = centre * np.geomspace(1e-3, 1e3, 6001)
        losses = self.chinchilla.predict(params, self.target_budget / self.flops_per_token(params))
        best = int(np.nanargmin(losses))
        return float(params[best]), float(losses[best])

    @property
    def chinchilla_loss(self) -> float | None:
        optimum = self.chinchilla_optimum
        return None if optimum is None else optimum[1]

    @property
    def warnings(self) -> list[str]:
        """Why the forecast may be a bound rather than an estimate; none when the frontier's floor is fitted.

        When the resamples' E reaches 0 (the optima fall on a straight line in log-log, or there are only 3
        budgets) the ladder cannot tell a frontier that flattens from one that does not, and the fit's L*
        is close to the lowest forecast any flattening frontier through these optima gives. Across 8x the
        bend is a fraction of a percent, the size of the optima's noise (the README's scaling section).
        """
        best = min(o.profile.loss for o in self.optima if o.profile is not None and o.usable)
        if E_AT_BOUND * best < self.floor_interval[0]:
            return []
        law = self.chinchilla_loss
        cross = "" if law is None else f"; L(N, D) on the same runs gives {law:.4g}"
        low, high = self.floor_interval
        why = (
            f"with {MIN_BUDGETS} budgets E is held at 0"
            if self.n_budgets == MIN_BUDGETS
            else f"E = {self.frontier.E:.3g}, interval [{low:.3g}, {high:.3g}]: the {self.n_budgets} optima "
            "show no flattening"
        )
        return [
            f"the frontier's floor is not identified ({why}), so {self.loss:.4g} is close to the lowest "
            "forecast a frontier that flattens through them gives: a loss curve that flattens past the "
            f"ladder lands higher, up to the interval's {self.loss_interval[1]:.4g} for a bend within the "
            f"optima's noise, and one still steepening (just past the unigram plateau) lands lower{cross}"
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "target_budget": self.target_budget,
            "loss": self.loss,
            "loss_interval": list(self.loss_interval),
            **{f"interval_{key}": [i.low, i.high] for key, i in self.by_percent.items()},
            "interval_sources": {key: i.as_dict()["sources"] for key, i in self.by_percent.items()},
            "bootstrap_interval": list(self.bootstrap_interval),
            "backtest_error": self.backtest_error,
            "form_scale": self.form_scale,
            "params": self.params,
            "params_interval": list(self.params_interval),
            "tokens": self.tokens,
            "tokens_interval": list(self.tokens_interval),
            "frontier": {**asdict(self.frontier), "formula": self.frontier.formula},
            "floor_interval": list(self.floor_interval),
            "params_law": asdict(self.params_law),
            "tokens_law": asdict(self.tokens_law),
            "optima": [o.as_dict() for o in self.optima],
            "n_budgets": self.n_budgets,
            "n_rungs": self.n_rungs,
            "n_runs": self.n_runs,
            "seed_spread": self.seed_spread,
            "chinchilla": None if self.chinchilla is None else self.chinchilla.as_dict(),
            "chinchilla_loss": self.chinchilla_loss,
            "chinchilla_params": None if self.chinchilla_optimum is None else self.chinchilla_optimum[0],
            "flops_per_token": asdict(self.flops_per_token),
            "chinchilla_reason": self.chinchilla_reason,
            "warnings": self.warnings,
            "confidence": CONFIDENCE,
            "bootstrap": self.bootstrap,
            "seed": self.seed,
        }


def _rungs(runs: Sequence[Run]) -> list[list[Run]]:
    """Runs grouped by size, sizes ascending."""
    by_size: dict[float, list[Run]] = defaultdict(list)
    for run in runs:
        by_size[float(run["params"])].append(run)
    return [by_size[n] for n in sorted(by_size)]


def _resample(rungs: Sequence[Sequence[Run]], rng: np.random.Generator) -> list[Run]:
    """Rungs with replacement, then each drawn rung's runs (seeds) with replacement."""
    sample: list[Run] = []
    for i in rng.integers(0, len(rungs), len(rungs)):
        rung = rungs[i]
        sample.extend(rung[j] for j in rng.integers(0, len(rung), len(rung)))
    return sample


def _draws(draw: Callable[[], T | None], count: int) -> list[T]:
    """``count`` resamples, drawing again where one fails (None), at most 20 draws per resample."""
    found: list[T] = []
    for _ in range(20 * count):
        if len(found) == count:
            break
        sample = draw()
        if sample is not None:
            found.append(sample)
    return found


def _problem(vertex: IsoflopProfile | str, runs: Sequence[Run]) -> str | None:
    """Why a budget's vertex cannot be used (none, or outside the sizes trained), None if it can."""
    if isinstance(vertex, str):
        return vertex
    if not vertex.inside:
        sizes = [float(r["params"]) for r in runs]
        return f"N* = {vertex.params:.3g} lies outside the sizes trained [{min(sizes):.3g}, {max(sizes):.3g}]"
    return None


def budget_optimum(
    budget: float, runs: Sequence[Run], *, bootstrap: int = 200, seed: int = 0
) -> BudgetOptimum:
    """One budget's optimum, with intervals for L* and N* from resampling its rungs and their seeds.

    A resample without a bracketed vertex is drawn again: the intervals describe the optima the sweep
    pins down, and a budget whose own vertex is not bracketed is not usable at all. With 6-7 sizes a
    percentile bootstrap runs narrow: on synthetic sweeps the 95% interval for L* held the truth about
    85% of the time with one seed a rung, 96% with three.
    """
    rungs = _rungs(runs)
    vertex = isoflop_vertex(budget, runs)
    problem = _problem(vertex, runs)
    if isinstance(vertex, str) or problem is not None:
        profile = None if isinstance(vertex, str) else vertex
        return BudgetOptimum(budget, len(rungs), len(runs), profile, None, None, problem)
    rng = np.random.default_rng(seed)

    def draw() -> IsoflopProfile | None:
        sample = _resample(rungs, rng)
        found = isoflop_vertex(budget, sample)
        return None if isinstance(found, str) or _problem(found, sample) else found

    samples = _draws(draw, bootstrap) or [vertex]
    loss, params = _interval([p.loss for p in samples]), _interval([p.params for p in samples])
    return BudgetOptimum(budget, len(rungs), len(runs), vertex, loss, params, None)


def fit_frontier(budgets: Sequence[float], losses: Sequence[float]) -> Frontier:
    """L*(C) = E + A C^-a through (budget, optimal loss) points; see the module docstring."""
    if len(budgets) < MIN_BUDGETS:
        raise ValueError(f"the frontier has 3 unknowns: it needs {MIN_BUDGETS} budgets, got {len(budgets)}")
    log_c = np.log(np.asarray(budgets, dtype=float))
    reference = float(log_c.mean())
    x, y = log_c - reference, np.asarray(losses, dtype=float)
    ceiling = float(y.min()) * (1 - 1e-9)
    # The start: for each E on a grid, log(L* - E) is linear in x (centred); keep the best E.
    e = np.linspace(0.0, ceiling * (1 - 1e-3), E_GRID)[:, None]
    log_excess = np.log(y - e)
    slope = (x * log_excess).sum(axis=1, keepdims=True) / (x**2).sum()
    intercept = log_excess.mean(axis=1, keepdims=True)
    best = int(np.argmin((((e + np.exp(intercept + slope * x)) / y - 1) ** 2).sum(axis=1)))
    start = np.array([e[best, 0], intercept[best, 0], max(-slope[best, 0], 0.0)])

    def residuals(theta: np.ndarray) -> np.ndarray:
        e0, log_a, a = theta
        return (e0 + np.exp(log_a - a * x)) / y - 1

    if len(budgets) == MIN_BUDGETS:  # 3 points, 3 unknowns: the curve would run through their noise
        start = np.array([intercept[0, 0], max(-slope[0, 0], 0.0)])
        fitted = least_squares(lambda t: residuals(np.array([0.0, *t])), start, bounds=([-np.inf, 0], np.inf))
        log_a, a = (float(v) for v in fitted.x)
        return Frontier(E=0.0, A=float(np.exp(log_a + a * reference)), a=a)
    bounds = ([0.0, -np.inf, 0.0], [ceiling, np.inf, np.inf])
    e0, log_a, a = (float(v) for v in least_squares(residuals, start, bounds=bounds).x)
    return Frontier(E=e0, A=float(np.exp(log_a + a * reference)), a=a)


def seed_spread(runs: Sequence[Run]) -> float | None:
    """Pooled std of loss across runs sharing (budget, N): the seeds' noise, None without repeats."""
    groups: dict[tuple[float, float], list[float]] = defaultdict(list)
    for run in runs:
        groups[float(run["budget"]), float(run["params"])].append(float(run["loss"]))
    repeated = [np.asarray(g) for g in groups.values() if len(g) > 1]
    if not repeated:
        return None
    squares = sum(float(((g - g.mean()) ** 2).sum()) for g in repeated)
    return math.sqrt(squares / sum(len(g) - 1 for g in repeated))


def _check(runs: Sequence[Run], target_budget: float) -> None:
    if not (target_budget > 0 and math.isfinite(target_budget)):
        raise ValueError(f"target_budget must be positive and finite, got {target_budget}")
    for key in ("budget", "params", "tokens", "loss"):
        bad = [r for r in runs if not (float(r[key]) > 0 and math.isfinite(float(r[key])))]
        if bad:
            raise ValueError(f"every run's {key} must be positive and finite, got {bad[:3]}")
    seen: set[tuple[float, float, float]] = set()
    for run in runs:
        if "seed" in run:
            key = (float(run["budget"]), float(run["params"]), float(run["seed"]))
            if key in seen:
                raise ValueError(f"two runs share budget, params and seed {key}: a duplicate record")
            seen.add(key)


class Chain(NamedTuple):
    """One pass of the frontier chain: the optima it went through (budgets ascending) and the fits."""

    frontier: Frontier
    params_law: PowerLaw  # N*(C)
    tokens_law: PowerLaw  # D*(C)
    budgets: list[float]
    losses: list[float]  # the optima's L*


def _chain(runs: Sequence[Run], budgets: int = MIN_BUDGETS) -> Chain | None:
    """Optima, then the frontier and N*, D* power laws through them; None under ``budgets`` bracketed
    budgets (a resample must keep all of the point fit's: with one fewer the frontier's form can change)."""
    iso = fit_isoflops(runs)
    bracketed = sorted((p for p in iso.profiles if p.inside), key=lambda p: p.budget)
    if len(bracketed) < budgets or iso.params is None or iso.tokens is None:
        return None
    c, loss = [p.budget for p in bracketed], [p.loss for p in bracketed]
    return Chain(fit_frontier(c, loss), iso.params, iso.tokens, c, loss)


def _small_sample(runs: int) -> float:
    """How much a bootstrap of a parabola (3 unknowns) through ``runs`` points underrates its spread:
    sqrt(n / (n - 3)), as residuals underrate a regression's variance. A sweep of 5 sizes and one seed
    gives 1.58 (its 95% interval held the truth about 85% of the time, ``budget_optimum``); 3 seeds, 1.12."""
    return math.sqrt(runs / max(runs - 3, 1))


def _relative_spread(optimum: BudgetOptimum) -> float:
    """An optimum's standard deviation relative to its loss, from its bootstrap's 95% interval."""
    assert optimum.profile is not None and optimum.loss_interval is not None
    low, high = optimum.loss_interval
    spread = (high - low) / (2 * Z_95 * optimum.profile.loss) * _small_sample(optimum.n_runs)
    return max(MIN_SPREAD, spread)


def backtest(budgets: Sequence[float], losses: Sequence[float]) -> float:
    """The top budget's optimum forecast from the budgets below it by the same rule (a power law through
    two), as a relative error: how the frontier's form fares one step past what it was fitted on."""
    below, below_loss = budgets[:-1], losses[:-1]
    fit = fit_frontier(below, below_loss) if len(below) >= MIN_BUDGETS else fit_power_law(below, below_loss)
    return fit(budgets[-1]) / losses[-1] - 1


def _at_floor(chain: Chain, floor: float, target: float) -> float:
    """The forecast of a power law through L* - ``floor``: the frontier with its floor held."""
    b, k, _, reference = power_law_with_floor(chain.budgets, chain.losses, [1.0] * len(chain.losses), floor)
    return floor + math.exp(b[0] + k[0] * (math.log(target) - reference))


def _predictive(
    point: Chain,
    usable: Sequence[BudgetOptimum],
    at_floor: Sequence[float],
    backtests: Sequence[float],
    target: float,
) -> dict[float, PredictiveInterval]:
    """The loss's predictive intervals (``forecast_interval.py``) from the resamples' forecasts at the held
    floor (``at_floor``) and their backtests' errors; with no resamples, the point alone."""
    loss = point.frontier(target)
    if not at_floor:
        return predictive_intervals(loss, [], {}, 0.0)
    # the resamples about the frontier's own forecast, widened as small samples ask
    centre = _at_floor(point, point.frontier.E, target)
    widen = float(np.mean([_small_sample(o.n_runs) for o in usable]))
    noise = [loss * (1 + widen * (value / centre - 1)) for value in at_floor]
    floors = floor_ranges(point.budgets, point.losses, [_relative_spread(o) for o in usable], target)
    bias = form_bias(backtest(point.budgets, point.losses), backtests)
    return predictive_intervals(loss, noise, floors, bias * extrapolation_scale(point.budgets, target))


def _cross_check(runs: Sequence[Run]) -> tuple[ChinchillaLaw | None, str]:
    problem = chinchilla_fits(runs)
    if problem:
        return None, f"not fitted: {problem}"
    n, d, loss = (np.array([float(r[k]) for r in runs]) for k in ("params", "tokens", "loss"))
    return fit_chinchilla(n, d, loss), f"fitted to {len(runs)} runs"


def forecast(
    runs: Sequence[Run],
    target_budget: float,
    *,
    bootstrap: int = 200,
    seed: int = 0,
    cross_check: bool = True,
) -> Forecast:
    """L*, N* and D* at ``target_budget`` from an IsoFLOP ladder, with seeded bootstrap intervals.

    Raises ValueError, with each budget's problem, when fewer than 3 budgets have a bracketed optimum.
    ``cross_check`` also fits the 5-parameter L(N, D) where the ladder supports it (a fraction of a
    second); the bootstrap is of the frontier chain only.
    """
    _check(runs, target_budget)
    # Hundreds of tiny least-squares problems: BLAS threads only contend (see fit.py). A resample may
    # fit an exponent away and overflow A; _interval drops those values.
    with threadpool_limits(1), np.errstate(over="ignore", invalid="ignore"):
        return _forecast(runs, target_budget, bootstrap, seed, cross_check)


def _forecast(runs: Sequence[Run], target: float, bootstrap: int, seed: int, cross_check: bool) -> Forecast:
    by_budget = group_by_budget(runs)
    optima = tuple(budget_optimum(b, group, bootstrap=bootstrap, seed=seed) for b, group in by_budget.items())
    used = [by_budget[o.budget] for o in optima if o.usable]
    if len(used) < MIN_BUDGETS:
        problems = "; ".join(f"budget {o.budget:.3g}: {o.problem}" for o in optima if not o.usable)
        raise ValueError(
            f"the frontier needs {MIN_BUDGETS} budgets with a bracketed optimum, got {len(used)}"
            + (f" ({problems})" if problems else "")
        )
    point = _chain([r for group in used for r in group])
    assert point is not None  # every usable budget's vertex is bracketed
    frontier, params_law, tokens_law = point.frontier, point.params_law, point.tokens_law
    rng = np.random.default_rng(seed)
    rungs = [_rungs(group) for group in used]

    def draw() -> tuple[float, ...] | None:
        chain = _chain([r for budget in rungs for r in _resample(budget, rng)], len(used))
        if chain is None:
            return None
        at_floor = _at_floor(chain, frontier.E, target)
        fits = (chain.frontier, chain.params_law, chain.tokens_law)
        return (*(f(target) for f in fits), chain.frontier.E, at_floor, backtest(chain.budgets, chain.losses))

    samples = _draws(draw, bootstrap)
    point_values = (frontier(target), params_law(target), tokens_law(target), frontier.E)
    # per quantity: loss, N*, D*, E, the loss at the held floor, the backtest's error; without resamples
    # every interval is the point's
    empty: list[list[float]] = [[value] for value in point_values] + [[], []]
    columns = list(zip(*samples, strict=True)) if samples else empty
    intervals = [_interval(values) for values in columns[:4]]
    predictive = _predictive(point, [o for o in optima if o.usable], columns[4], columns[5], target)
    loss, params, tokens = point_values[:3]
    law, reason = _cross_check(runs) if cross_check else (None, "not asked for")
    return Forecast(
        target_budget=target,
        loss=loss,
        loss_interval=(predictive[CONFIDENCE].low, predictive[CONFIDENCE].high),
        intervals=predictive,
        bootstrap_interval=intervals[0],
        backtest_error=backtest(point.budgets, point.losses),
        form_scale=extrapolation_scale(point.budgets, target),
        params=params,
        params_interval=intervals[1],
        tokens=tokens,
        tokens_interval=intervals[2],
        frontier=frontier,
        floor_interval=intervals[3],
        params_law=params_law,
        tokens_law=tokens_law,
        optima=optima,
        n_budgets=len(used),
        n_rungs=sum(len(r) for r in rungs),
        n_runs=sum(len(g) for g in used),
        seed_spread=seed_spread(runs),
        chinchilla=law,
        chinchilla_reason=reason,
        flops_per_token=fit_power_law(
            [float(r["params"]) for r in runs], [float(r["budget"]) / float(r["tokens"]) for r in runs]
        ),
        bootstrap=len(samples),
        seed=seed,
    )
