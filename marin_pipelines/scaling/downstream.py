"""Forecast a downstream metric at a target budget in two steps, compute -> loss -> metric (as Delphi did).

1. ``frontier.forecast`` gives the optimal validation loss L at the target budget, with an interval.
2. Across the ladder's runs (every run, on or off its budget's optimum: the map is of loss, not compute)
   the metric is fitted as a function of L, and evaluated at the forecast loss:

   - ``affine``: m = a + b L, by least squares. For a bits-per-byte or a loss on another held-out text
     set: over a ladder's range of losses it is close to linear in the main loss.
   - ``sigmoid``: m = low + (high - low) / (1 + exp(k (L - mid))), for an accuracy: bounded, falling as
     L rises (k >= 0). ``low`` is fixed at the task's chance level (passed in); ``high`` is fitted in
     [chance, 1], since few tasks saturate at exactly 1 (label noise, ambiguous items) and fixing it
     would bend the fitted curve wherever a ladder's best runs approach a lower ceiling. ``k`` and
     ``mid`` are fitted too, by ``scipy.optimize.least_squares`` with bounds, in loss standardised over
     the runs so that the unknowns are of order one, from the best of a few starts (linear fits of the
     logit at a few ceilings). Three unknowns need the curve's bend inside the ladder: a ladder whose
     runs all sit near chance pins down neither ``high`` nor ``mid``, and the interval says so.

   A map needs more runs than unknowns: 3 for affine, 4 for sigmoid.

The interval is a percentile over bootstrap samples, each combining both steps' uncertainty: the runs
resampled with replacement and the map refitted, then evaluated at a loss drawn from the forecast's
interval. Two approximations, both documented here rather than hidden:

- The loss forecast's own bootstrap distribution is not kept, so each sample's loss comes from a
  split normal (two half normals joined at the point forecast, each scaled so that the 2.5% and 97.5%
  points fall on the interval's ends): a skewed interval keeps its asymmetry, its tails are normal.
  An end on the wrong side of the point forecast (a percentile interval can miss its own point) counts
  as a zero-width half.
- The two draws are independent, though the frontier and the map rest on the same runs: any
  correlation between the two steps' errors is ignored. On synthetic ladders (4 budgets x 5 sizes x 2
  seeds, independent noise on loss and metric; tests/scaling/test_downstream.py) the 95% interval held
  the truth in 40 of 40 ladders for an affine metric and 38 to 39 of 40 for a sigmoid one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy.optimize import least_squares
from scipy.special import expit
from threadpoolctl import threadpool_limits

from marin_pipelines.scaling.fit import CONFIDENCE, _interval
from marin_pipelines.scaling.frontier import Forecast, _draws

Kind = Literal["affine", "sigmoid"]
KINDS: tuple[str, ...] = ("affine", "sigmoid")
FITTED = {"affine": ("a", "b"), "sigmoid": ("high", "k", "mid")}  # ``low`` is fixed at chance
SIGMOID_CEILINGS = (0.1, 0.5, 0.9)  # start ceilings: this far from the best metric seen towards 1
# dogbox: for small problems with bounds; it lands exactly on an active bound (high = 1, k = 0) where
# trf stops 1e-4 short, and it is faster here. Both agree elsewhere (40 synthetic ladders).
METHOD = "dogbox"
Z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.96: half a 95% interval, in standard deviations


@dataclass(frozen=True)
class MetricMap:
    """The metric as a function of validation loss, fitted across a ladder's runs.

    ``parameters``: a, b (affine); low, high, k, mid (sigmoid, low fixed at chance). ``r2`` and
    ``residual_std`` (on n_runs minus fitted unknowns degrees of freedom) are of the metric itself.
    """

    kind: str
    parameters: dict[str, float]
    r2: float
    residual_std: float
    n_runs: int
    loss_range: tuple[float, float]  # the losses it was fitted over

    def __call__(self, loss: Any) -> Any:
        """The metric at ``loss``: a float for a number, an array for an array."""
        x = np.asarray(loss, dtype=float)
        p = self.parameters
        if self.kind == "affine":
            value = p["a"] + p["b"] * x
        else:
            value = p["low"] + (p["high"] - p["low"]) * expit(-p["k"] * (x - p["mid"]))
        return float(value) if value.ndim == 0 else value

    @property
    def fixed(self) -> tuple[str, ...]:
        """Parameters set, not fitted."""
        return ("low",) if self.kind == "sigmoid" else ()

    @property
    def formula(self) -> str:
        p = self.parameters
        if self.kind == "affine":
            sign = "-" if p["b"] < 0 else "+"
            return f"m = {p['a']:.4g} {sign} {abs(p['b']):.4g} L"
        low, high = f"{p['low']:.3g}", f"{p['high']:.3g}"
        return f"m = {low} + ({high} - {low}) / (1 + exp({p['k']:.3g} (L - {p['mid']:.4g})))"

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "parameters": dict(self.parameters),
            "fixed": list(self.fixed),
            "formula": self.formula,
            "r2": self.r2,
            "residual_std": self.residual_std,
            "n_runs": self.n_runs,
            "loss_range": list(self.loss_range),
        }


@dataclass(frozen=True)
class DownstreamForecast:
    """A metric at the target budget: the map evaluated at the forecast loss, with a bootstrap interval."""

    metric: str
    kind: str
    value: float  # map(loss)
    interval: tuple[float, float]  # both steps' uncertainty
    map_interval: tuple[float, float]  # the map's alone: as if the loss were known exactly
    loss: float  # the forecast loss it was evaluated at
    loss_interval: tuple[float, float]  # the loss forecast's
    target_budget: float
    map: MetricMap
    n_runs: int  # runs with the metric, fitted
    n_skipped: int  # runs without it
    bootstrap: int  # samples drawn
    seed: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "kind": self.kind,
            "value": self.value,
            "interval": list(self.interval),
            "map_interval": list(self.map_interval),
            "loss": self.loss,
            "loss_interval": list(self.loss_interval),
            "target_budget": self.target_budget,
            "map": self.map.as_dict(),
            "n_runs": self.n_runs,
            "n_skipped": self.n_skipped,
            "confidence": CONFIDENCE,
            "bootstrap": self.bootstrap,
            "seed": self.seed,
        }


def _r2_std(residuals: np.ndarray, metrics: np.ndarray, fitted: int) -> tuple[float, float]:
    squares = float((residuals**2).sum())
    total = float(((metrics - metrics.mean()) ** 2).sum())
    r2 = 1.0 - squares / total if total > 0 else 1.0
    return r2, math.sqrt(squares / (len(metrics) - fitted))


def _affine(loss: np.ndarray, metrics: np.ndarray) -> MetricMap:
    centred = loss - loss.mean()
    spread = float((centred**2).sum())
    if not spread > 1e-24 * max(1.0, float(loss.mean()) ** 2):
        raise ValueError(f"the losses do not vary (all {loss[0]:.6g}): the slope is undetermined")
    b = float((centred * (metrics - metrics.mean())).sum()) / spread
    a = float(metrics.mean()) - b * float(loss.mean())
    r2, std = _r2_std(metrics - (a + b * loss), metrics, 2)
    return MetricMap("affine", {"a": a, "b": b}, r2, std, len(loss), (float(loss.min()), float(loss.max())))


def _sigmoid_starts(u: np.ndarray, metrics: np.ndarray, chance: float) -> list[np.ndarray]:
    """(high, kappa, m) in standardised loss u: for each start ceiling, the logit's line through the runs."""
    best = float(metrics.max())
    starts = []
    for fraction in SIGMOID_CEILINGS:
        high = min(1.0, max(best, chance) + fraction * (1 - max(best, chance)))
        high = max(high, chance + 1e-3)
        y = np.clip((metrics - chance) / (high - chance), 0.02, 0.98)
        slope, intercept = np.polyfit(u, np.log((1 - y) / y), 1)  # logit = kappa (u - m)
        kappa = float(slope) if slope > 1e-3 else 1.0
        m = float(-intercept / slope) if slope > 1e-3 else 0.0
        starts.append(np.array([min(high, 1.0), kappa, float(np.clip(m, -10, 10))]))
    return starts


def _sigmoid(
    loss: np.ndarray, metrics: np.ndarray, chance: float, start: MetricMap | None = None
) -> MetricMap:
    centre, scale = float(loss.mean()), float(loss.std())
    if not scale > 1e-12 * max(1.0, abs(centre)):
        raise ValueError(f"the losses do not vary (all {loss[0]:.6g}): the curve is undetermined")
    u = (loss - centre) / scale

    def residuals(theta: np.ndarray) -> np.ndarray:
        high, kappa, m = theta
        return chance + (high - chance) * expit(-kappa * (u - m)) - metrics

    if start is None:
        starts = _sigmoid_starts(u, metrics, chance)
    else:
        p = start.parameters
        starts = [np.array([p["high"], p["k"] * scale, (p["mid"] - centre) / scale])]
    bounds = ([chance, 0.0, -np.inf], [1.0, np.inf, np.inf])
    fits = [
        least_squares(residuals, np.clip(s, bounds[0], bounds[1]), bounds=bounds, method=METHOD)
        for s in starts
    ]
    best = min(fits, key=lambda f: f.cost)
    high, kappa, m = (float(v) for v in best.x)
    parameters = {"low": chance, "high": high, "k": kappa / scale, "mid": centre + m * scale}
    r2, std = _r2_std(best.fun, metrics, 3)
    return MetricMap("sigmoid", parameters, r2, std, len(loss), (float(loss.min()), float(loss.max())))


def _check_kind(kind: str, chance: float | None, metrics: np.ndarray) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "affine":
        if chance is not None:
            raise ValueError("chance is the sigmoid's floor: an affine map takes none")
        return
    if chance is None or not (0 <= chance < 1):
        raise ValueError(f"a sigmoid needs the task's chance level in [0, 1), got {chance}")
    if not np.all((metrics >= 0) & (metrics <= 1)):
        raise ValueError(
            f"a sigmoid is for an accuracy in [0, 1], got values {metrics.min():.4g} to {metrics.max():.4g}"
        )


def fit_metric(
    losses: Sequence[float], metrics: Sequence[float], kind: Kind = "affine", chance: float | None = None
) -> MetricMap:
    """The metric as a function of validation loss across runs (see the module docstring for the forms).

    ``chance`` is the sigmoid's floor, the task's chance accuracy (0.25 for 4-way multiple choice), and
    is required for it. Raises ValueError for too few runs (3 affine, 4 sigmoid: more than the unknowns),
    mismatched lengths, non-finite values, losses that do not vary, or a sigmoid metric outside [0, 1].
    """
    loss, values = np.asarray(losses, dtype=float), np.asarray(metrics, dtype=float)
    if loss.shape != values.shape or loss.ndim != 1:
        raise ValueError(
            f"losses and metrics must be two lists of one length, got {loss.shape} and {values.shape}"
        )
    for name, array in (("loss", loss), ("metric", values)):
        if not np.all(np.isfinite(array)):
            raise ValueError(f"every {name} must be finite, got {array[~np.isfinite(array)].tolist()[:3]}")
    _check_kind(kind, chance, values)
    needed = len(FITTED[kind]) + 1
    if len(loss) < needed:
        raise ValueError(
            f"a {kind} map fits {len(FITTED[kind])} unknowns: it needs {needed} runs, got {len(loss)}"
        )
    if kind == "affine":
        return _affine(loss, values)
    with np.errstate(over="ignore"):
        return _sigmoid(loss, values, float(chance))  # type: ignore[arg-type]


def _points(runs: Sequence[Mapping[str, Any]], metric: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Losses and metric values of the runs with the metric, and how many lack it (no key, or None)."""
    having = [r for r in runs if r.get(metric) is not None]
    lacking = [r for r in having if r.get("loss") is None]
    if lacking:
        raise ValueError(f"{len(lacking)} runs with {metric!r} have no loss, e.g. {lacking[0]}")
    loss = np.array([float(r["loss"]) for r in having])
    values = np.array([float(r[metric]) for r in having])
    return loss, values, len(runs) - len(having)


def _split_normal(loss: float, interval: tuple[float, float]) -> tuple[float, float]:
    """The two halves' standard deviations whose 2.5% and 97.5% points are the interval's ends."""
    low, high = interval
    if not (math.isfinite(loss) and math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"the loss forecast must be finite with a finite interval, got {loss} {interval}")
    return max(loss - low, 0.0) / Z, max(high - loss, 0.0) / Z


def downstream_forecast(
    runs: Sequence[Mapping[str, Any]],
    metric: str,
    loss_forecast: Forecast,
    *,
    kind: Kind = "affine",
    chance: float | None = None,
    bootstrap: int = 200,
    seed: int = 0,
) -> DownstreamForecast:
    """``metric`` at ``loss_forecast``'s budget: the map fitted across ``runs``, at the forecast loss.

    ``runs`` are dicts with ``loss`` and, where measured, ``metric`` (e.g. "bpb/stdlib"): runs without it
    (or with None) are left out and counted in ``n_skipped``. The interval's bootstrap draws runs with
    replacement (a resample whose map cannot be fitted is drawn again) and the loss from a split normal
    matching ``loss_forecast.loss_interval``; see the module docstring. Seeded: the same inputs and
    ``seed`` give the same forecast.
    """
    loss, values, skipped = _points(runs, metric)
    try:
        fitted = fit_metric(loss, values, kind, chance)
    except ValueError as error:
        raise ValueError(
            f"metric {metric!r} ({len(loss)} runs with it, {skipped} without): {error}"
        ) from error
    below, above = _split_normal(loss_forecast.loss, loss_forecast.loss_interval)
    rng = np.random.default_rng(seed)

    def draw() -> tuple[float, float] | None:
        chosen = rng.integers(0, len(loss), len(loss))
        e = float(rng.standard_normal())
        at = loss_forecast.loss + e * (above if e > 0 else below)
        try:
            if kind == "affine":
                sample = _affine(loss[chosen], values[chosen])
            else:
                sample = _sigmoid(loss[chosen], values[chosen], float(chance), start=fitted)  # type: ignore[arg-type]
        except ValueError:
            return None
        return sample(at), sample(loss_forecast.loss)

    # Hundreds of tiny fits: BLAS threads only contend (see fit.py).
    with threadpool_limits(1), np.errstate(over="ignore", invalid="ignore"):
        samples = _draws(draw, bootstrap)
    value = fitted(loss_forecast.loss)
    combined, map_only = zip(*samples, strict=True) if samples else ((value,), (value,))
    return DownstreamForecast(
        metric=metric,
        kind=kind,
        value=value,
        interval=_interval(combined),
        map_interval=_interval(map_only),
        loss=float(loss_forecast.loss),
        loss_interval=(float(loss_forecast.loss_interval[0]), float(loss_forecast.loss_interval[1])),
        target_budget=float(loss_forecast.target_budget),
        map=fitted,
        n_runs=len(loss),
        n_skipped=skipped,
        bootstrap=len(samples),
        seed=seed,
    )


def downstream_error(prediction: DownstreamForecast, actual: float) -> dict[str, Any]:
    """How far the forecast fell from the measured metric; relative_error is (predicted - actual) / actual
    (None where actual is 0)."""
    actual = float(actual)
    if not math.isfinite(actual):
        raise ValueError(f"the actual {prediction.metric!r} must be finite, got {actual}")
    low, high = prediction.interval
    return {
        "metric": prediction.metric,
        "predicted": prediction.value,
        "actual": actual,
        "error": prediction.value - actual,
        "relative_error": (prediction.value - actual) / actual if actual != 0 else None,
        "within_interval": bool(low <= actual <= high),
    }


def _draw_map(ax: Any, fitted: MetricMap, left: float, right: float, label: str | None) -> None:
    """The map over [left, right]: solid over the losses it was fitted to, dashed beyond."""
    low, high = fitted.loss_range
    for lo, hi, style in ((left, low, "--"), (max(left, low), min(right, high), "-"), (high, right, "--")):
        if hi > lo:
            grid = np.linspace(lo, hi, 128)
            solid = style == "-"
            ax.plot(
                grid, fitted(grid), "k" + style, alpha=0.7 if solid else 0.5, label=label if solid else None
            )


def _draw_forecast(ax: Any, prediction: DownstreamForecast, size: float, zoomed: bool) -> None:
    """The star, the loss interval across, the metric interval up and down, the map's own interval."""
    x, y = prediction.loss, prediction.value
    (x_low, x_high), (y_low, y_high) = prediction.loss_interval, prediction.interval
    ax.errorbar(
        [x], [y], xerr=[[x - x_low], [x_high - x]], yerr=[[y - y_low], [y_high - y]],
        color="C3", capsize=4, zorder=4,
    )  # fmt: skip
    m_low, m_high = prediction.map_interval
    ax.plot(
        [x, x],
        [m_low, m_high],
        color="C1",
        linewidth=5,
        alpha=0.6,
        zorder=4,
        label="map's own interval" if zoomed else None,
    )
    at = f" at {prediction.target_budget:.2g} FLOPs" if prediction.target_budget else ""
    ax.scatter([x], [y], marker="*", s=size, color="C3", zorder=5, label=f"forecast{at}")


def plot_downstream(
    runs: Sequence[Mapping[str, Any]],
    prediction: DownstreamForecast,
    path: Path | str,
    actual: float | None = None,
    *,
    actual_loss: float | None = None,
) -> None:
    """The metric against loss, in two panels: left, the runs (one colour per budget) and the map (solid
    over the runs' losses, dashed beyond) out to the forecast; right, a zoom on the forecast, a star with
    the loss interval across and the metric interval up and down (the map's own interval as a thick bar),
    and ``actual`` as a cross (at ``actual_loss``, the target run's measured loss, when given, else at the
    forecast loss). The title gives the numbers and the error in percent.
    """
    loss, values, _ = _points(runs, prediction.metric)
    having = [r for r in runs if r.get(prediction.metric) is not None]
    figure = Figure(figsize=(12, 5), dpi=100)
    FigureCanvasAgg(figure)
    whole, zoom = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    budgets = sorted({float(r["budget"]) for r in having if "budget" in r})
    for ax in (whole, zoom):
        if budgets and all("budget" in r for r in having):
            for i, budget in enumerate(budgets):
                chosen = np.array([float(r["budget"]) == budget for r in having])
                label = f"runs, C = {budget:.2g}" if ax is whole else None
                ax.scatter(loss[chosen], values[chosen], color=f"C{i % 10}", s=20, label=label, zorder=3)
        else:
            ax.scatter(loss, values, color="C0", s=20, label="runs" if ax is whole else None, zorder=3)

    fitted = prediction.map
    at = prediction.loss if actual_loss is None else actual_loss
    xs = [*fitted.loss_range, prediction.loss, *prediction.loss_interval, at]
    margin = 0.03 * (max(xs) - min(xs))
    _draw_map(whole, fitted, min(xs) - margin, max(xs) + margin, f"{fitted.formula}  (R² {fitted.r2:.4f})")
    _draw_forecast(whole, prediction, 250, zoomed=False)
    near = [*prediction.loss_interval, prediction.loss, at]
    pad = 0.25 * max(max(near) - min(near), 1e-3 * abs(prediction.loss))
    left, right = min(near) - pad, max(near) + pad
    _draw_map(zoom, fitted, left, right, None)
    _draw_forecast(zoom, prediction, 400, zoomed=True)

    x, y = prediction.loss, prediction.value
    (x_low, x_high), (y_low, y_high) = prediction.loss_interval, prediction.interval
    text = f"forecast {y:.4g} [{y_low:.4g}, {y_high:.4g}] at loss {x:.4g} [{x_low:.4g}, {x_high:.4g}]"
    ys = [y_low, y_high, *fitted(np.array([left, right]))]
    if actual is not None:
        relative = downstream_error(prediction, actual)["relative_error"]
        for ax in (whole, zoom):
            ax.scatter([at], [actual], marker="X", s=100, color="k", zorder=6, label="actual")
        text += f";  actual {actual:.4g}" + ("" if relative is None else f" ({100 * relative:+.2f}%)")
        ys.append(actual)
    spread = max(ys) - min(ys) or 1e-3 * abs(y) or 1e-3
    zoom.set_xlim(left, right)
    zoom.set_ylim(min(ys) - 0.1 * spread, max(ys) + 0.1 * spread)
    rising = fitted(fitted.loss_range[1]) >= fitted(fitted.loss_range[0])
    whole.legend(fontsize=8, loc="upper left" if rising else "upper right")
    zoom.legend(fontsize=8, loc="best")
    for ax, title in ((whole, f"{prediction.n_runs} runs, {prediction.kind} map"), (zoom, "at the forecast")):
        ax.set_xlabel("validation loss")
        ax.set_ylabel(prediction.metric)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    figure.suptitle(f"{prediction.metric}, compute -> loss -> metric:  {text}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path)
