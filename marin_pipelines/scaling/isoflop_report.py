"""The tables and plots a paper shows for an IsoFLOP ladder and its preregistered forecast.

``rung_table`` is every run of the ladder as one flat table (a parquet file a reader loads with
``polars.read_parquet``); the plots show what the forecast rests on: each budget's sweep and parabola
(``plot_isoflop_curves``), the optima, the frontier through them and the target
(``plot_frontier``), and the seeds' noise the intervals carry (``plot_seed_spread``). Plots draw on a
``Figure`` of their own (no pyplot, no global state).
"""

from __future__ import annotations

import math
import numbers
import os
import re
import textwrap
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FormatStrFormatter, FuncFormatter, LogLocator, MaxNLocator, NullLocator

from marin_pipelines.scaling.fit import CONFIDENCE
from marin_pipelines.scaling.frontier import BudgetOptimum, Forecast, seed_spread
from marin_pipelines.scaling.isoflop import group_by_budget

FIXED_COLUMNS = ("budget", "size", "seed", "params", "tokens", "flops", "loss")
# The dtype of a fixed column no run fills (an empty ladder): the one its values have when present.
FIXED_DTYPES = {**dict.fromkeys(FIXED_COLUMNS, pl.Float64), "size": pl.String, "seed": pl.Int64}
Pathish = str | os.PathLike[str]
Interval = tuple[float, float] | None

# ---------------------------------------------------------------------------------------------- table


def _kind(key: str, value: Any, index: int) -> type | None:
    """The column kind of one value (None for a missing one); anything but a scalar is refused, so every
    column is one parquet type a reader can filter and plot."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_):
        return bool
    if isinstance(value, numbers.Integral):
        return int
    if isinstance(value, numbers.Real):
        return float
    if isinstance(value, str):
        return str
    raise ValueError(
        f"run {index}: {key!r} holds a {type(value).__name__}; the rung table holds numbers and strings "
        f"only: flatten it into keys of its own (e.g. '{key}/name')"
    )


def _column(key: str, values: Sequence[Any]) -> pl.Series:
    kinds = {_kind(key, v, i) for i, v in enumerate(values)} - {None}
    if not kinds:
        return pl.Series(key, values, dtype=FIXED_DTYPES.get(key, pl.Null))
    if kinds <= {int, float}:  # an integer and a float column of one key is a float column
        kind = float if float in kinds else int
    elif len(kinds) == 1:
        kind = kinds.pop()
    else:
        names = sorted(k.__name__ for k in kinds)
        raise ValueError(f"{key!r} mixes {' and '.join(names)} values across runs: a column holds one type")
    dtype = {bool: pl.Boolean, int: pl.Int64, float: pl.Float64, str: pl.String}[kind]
    return pl.Series(key, [None if v is None else kind(v) for v in values], dtype=dtype)


def rung_table(runs: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """One row per run: the fixed columns first, then every other key any run has, by name (null where a
    run lacks it); rows by budget, params, seed. A fixed key missing from a run, a nested value (dict,
    list...) or a key with mixed types is a ValueError naming the key."""
    for i, run in enumerate(runs):
        missing = [k for k in FIXED_COLUMNS if k not in run]
        if missing:
            raise ValueError(f"run {i} lacks {missing}: every run has {list(FIXED_COLUMNS)}")
    extra = sorted({k for run in runs for k in run} - set(FIXED_COLUMNS))
    columns = [_column(k, [run.get(k) for run in runs]) for k in (*FIXED_COLUMNS, *extra)]
    return pl.DataFrame(columns).sort(["budget", "params", "seed"], maintain_order=True)


def write_rung_table(runs: Sequence[Mapping[str, Any]], path: Pathish) -> pl.DataFrame:
    """``rung_table`` as parquet, written whole or not at all (a ``.partial`` sibling, then a rename), so a
    reader never loads half a ladder. Returns the table."""
    table = rung_table(runs)
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    try:
        table.write_parquet(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return table


# ---------------------------------------------------------------------------------------- axis labels


def _sci(value: float) -> str:
    """A FLOP count as a paper writes it: 1e18, 2.5e18."""
    return f"{value:.3g}".replace("e+", "e")


def _si(value: float) -> str:
    """A parameter count as a paper writes it: 250k, 1.5M, 7B."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _log_axis(axis: Axis, name: Callable[[float], str]) -> None:
    """Decades labelled, and the 2s (and 5s, 3s) between them where the axis spans few decades: a sweep
    spans one or two, where decade labels alone leave one label or none. Call after plotting."""
    low, high = sorted(axis.get_view_interval())
    decades = math.log10(high / low) if low > 0 else math.inf
    labelled = {2, 3, 5} if decades < 1.2 else {2, 5} if decades < 2.5 else set()

    def minor(x: float, _: int) -> str:
        mantissa = round(x / 10 ** math.floor(math.log10(x) + 1e-9))
        return name(x) if mantissa in labelled else ""

    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(FuncFormatter(lambda x, _: name(x)))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(2, 10))))
    axis.set_minor_formatter(FuncFormatter(minor))


def _loss_axis(ax: Axes) -> None:
    """Log loss with evenly spaced labelled ticks: losses span a fraction of a decade, where log ticks
    would label one value or none."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.2f"))
    ax.yaxis.set_minor_locator(NullLocator())


def _bars(centres: Sequence[float], intervals: Sequence[Interval]) -> np.ndarray:
    """Error bars (2 x n) from intervals, none where an interval is missing or not finite; a point
    estimate a percentile interval leaves out gets a one-sided bar rather than a negative one."""
    bars = np.zeros((2, len(centres)))
    for i, (centre, interval) in enumerate(zip(centres, intervals, strict=True)):
        if interval is not None and all(math.isfinite(v) for v in interval):
            bars[:, i] = max(centre - interval[0], 0.0), max(interval[1] - centre, 0.0)
    return bars


def _short(problem: str, width: int = 48) -> str:
    """A budget's problem fit for a legend: without its parenthesised and bracketed details, cut to width."""
    plain = re.sub(r"\s*[(\[][^)\]]*[)\]]", "", problem)
    return textwrap.shorten(plain, width, placeholder="…")


def _save(figure: Figure, path: Pathish) -> None:
    figure.tight_layout()
    figure.savefig(path)


def _budget_colours(budgets: Sequence[float]) -> dict[float, Any]:
    """A colour per budget, in compute order (viridis, stopping short of its yellow on white paper)."""
    cmap = colormaps["viridis"]
    steps = np.linspace(0.0, 0.85, len(budgets)) if len(budgets) > 1 else [0.0]
    return {b: cmap(s) for b, s in zip(sorted(budgets), steps, strict=True)}


# -------------------------------------------------------------------------------------------- plots


def plot_isoflop_curves(runs: Sequence[Mapping[str, Any]], forecast: Forecast, path: Pathish) -> None:
    """Loss vs N per budget: the runs (a point per seed), the parabola in log N each budget's optimum is
    the vertex of (refitted as ``isoflop.isoflop_vertex`` fits it: all seeds, degree 2 in log N), and the
    optimum with its bootstrap intervals. A budget the forecast left out is drawn hollow, with a dashed
    parabola and its reason in the legend, and no optimum: its vertex is not bracketed."""
    by_budget = group_by_budget(runs)
    optima: dict[float, BudgetOptimum] = {o.budget: o for o in forecast.optima}
    colours = _budget_colours(list(by_budget))
    figure = Figure(figsize=(10, 5.5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    for budget, group in by_budget.items():
        colour, optimum = colours[budget], optima.get(budget)
        problem = optimum.problem if optimum is not None else None
        params = np.array([float(r["params"]) for r in group])
        loss = np.array([float(r["loss"]) for r in group])
        label = f"C = {_sci(budget)}  ({len(group)} runs)" + (
            f"\nnot used: {_short(problem)}" if problem else ""
        )
        style = {"facecolors": "none", "edgecolors": [colour]} if problem else {"color": colour}
        ax.scatter(params, loss, s=22, label=label, zorder=3, **style)
        if len(np.unique(params)) >= 3:
            log_n = np.log(params)
            grid = np.linspace(log_n.min(), log_n.max(), 64)
            fitted = np.polyval(np.polyfit(log_n, loss, 2), grid)
            ax.plot(np.exp(grid), fitted, color=colour, alpha=0.7, linestyle="--" if problem else "-")
        if optimum is not None and optimum.usable and optimum.profile is not None:
            best = optimum.profile
            ax.errorbar(
                [best.params],
                [best.loss],
                xerr=_bars([best.params], [optimum.params_interval]),
                yerr=_bars([best.loss], [optimum.loss_interval]),
                fmt="D",
                ms=7,
                color=colour,
                mec="black",
                capsize=3,
                zorder=4,
            )
    handles, _ = ax.get_legend_handles_labels()
    marker = Line2D([], [], marker="D", color="grey", mec="black", linestyle="none")
    marker.set_label(f"optimum N*, L* ({CONFIDENCE:.0%} intervals)")
    # Outside the axes: a sweep's points fill any corner of them.
    ax.legend(
        handles=[*handles, marker], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0
    )
    ax.set_xscale("log")
    _log_axis(ax.xaxis, _si)
    ax.set_xlabel("non-embedding parameters N")
    ax.set_ylabel("validation loss")
    usable = sum(1 for b in by_budget if b in optima and optima[b].usable)
    ax.set_title(
        f"IsoFLOP profiles: {len(by_budget)} budgets ({usable} usable), {len(runs)} runs", fontsize=11
    )
    ax.grid(True, which="both", alpha=0.3)
    _save(figure, path)


def _law_panel(
    ax: Axes,
    law: Callable[[float], float],
    grid: np.ndarray,
    optima: tuple[Sequence[float], Sequence[float], Sequence[Interval]],
    target: tuple[float, float, Interval],
    colour: str,
    labels: tuple[str, str, str],
) -> list[Any]:
    """The budgets' optima with their intervals, a law fitted through them drawn over ``grid``, and the
    law at the target as a star with its interval; returns the legend handles in that order."""
    budgets, values, intervals = optima
    points = ax.errorbar(
        budgets, values, yerr=_bars(values, intervals), fmt="o", color=colour, capsize=3, label=labels[0]
    )
    (fit,) = ax.plot(grid, [law(c) for c in grid], color=colour, label=labels[1])
    at, value, interval = target
    star = ax.errorbar(
        [at], [value], yerr=_bars([value], [interval]), fmt="*", ms=15, color="black", capsize=4, zorder=5
    )
    star.set_label(labels[2])
    ax.set_xscale("log")
    ax.set_xlabel("training compute C (FLOPs)")
    ax.grid(True, which="both", alpha=0.3)
    return [points, fit, star]


def plot_frontier(
    forecast: Forecast, path: Pathish, actual: float | None = None, target_label: str | None = None
) -> None:
    """The forecast and what it rests on, side by side: left, the optima L* vs C, the frontier fitted
    through them out to 1.5x the target, the forecast with its interval (and the L(N, D) fit's optimum
    beside it when there is one) and, once the target has run, its actual loss and the forecast's
    relative error; right, N*(C) through the optima's N* and the target's N*. ``target_label`` names the
    target in the legend (e.g. its shape)."""
    target = forecast.target_budget
    usable = [(o, o.profile) for o in forecast.optima if o.usable and o.profile is not None]
    budgets = [o.budget for o, _ in usable]
    grid = np.geomspace(min(budgets), max(1.5 * target, max(budgets)), 128)
    name = target_label or f"target C = {_sci(target)}"
    figure = Figure(figsize=(12, 5), dpi=100)
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)

    (low, high), loss = forecast.loss_interval, forecast.loss
    handles = _law_panel(
        left,
        forecast.frontier,
        grid,
        (budgets, [p.loss for _, p in usable], [o.loss_interval for o, _ in usable]),
        (target, loss, forecast.loss_interval),
        "C0",
        (f"budget optima L* ({len(usable)} budgets)", "frontier fit", f"{name}: forecast {loss:.4f}"),
    )
    handles[-1].set_label(f"{handles[-1].get_label()}, 95% [{low:.4f}, {high:.4f}]")
    if 0.8 in forecast.intervals:  # the 80% interval, a thicker bar inside the 95% one
        narrow = forecast.intervals[0.8]
        handles.append(
            left.errorbar(
                [target],
                [loss],
                yerr=[[loss - narrow.low], [narrow.high - loss]],
                fmt="none",
                elinewidth=5,
                alpha=0.45,
                color="C0",
                zorder=5,
                label=f"80% [{narrow.low:.4f}, {narrow.high:.4f}]",
            )
        )
    if forecast.chinchilla_loss is not None:
        handles.append(
            left.scatter(
                [target],
                [forecast.chinchilla_loss],
                marker="D",
                s=60,
                facecolors="none",
                edgecolors="C2",
                zorder=4,  # under the star: the two agree when all is well
                label=f"L(N, D) fit's optimum {forecast.chinchilla_loss:.4f}",
            )
        )
    if actual is not None:
        handles.append(
            left.scatter(
                [target], [actual], marker="X", s=90, color="C3", zorder=7, label=f"actual {actual:.4f}"
            )
        )
        left.annotate(
            f"forecast error {100 * (loss - actual) / actual:+.2f}%",
            (target, actual),
            xytext=(-12, -4),
            textcoords="offset points",
            ha="right",
            va="top",
            fontsize=9,
            color="C3",
        )
    _loss_axis(left)
    _log_axis(left.xaxis, _sci)
    left.set_ylabel("optimal validation loss L*")
    left.set_title(forecast.frontier.formula, fontsize=10)
    left.legend(handles=handles, fontsize=8, loc="upper right")

    (low, high), law = forecast.params_interval, forecast.params_law
    handles = _law_panel(
        right,
        law,
        grid,
        (budgets, [p.params for _, p in usable], [o.params_interval for o, _ in usable]),
        (target, forecast.params, forecast.params_interval),
        "C1",
        (
            f"budget optima N* ({len(usable)} budgets)",
            "N*(C) fit",
            f"{name}: N* {_si(forecast.params)} [{_si(low)}, {_si(high)}]",
        ),
    )
    right.set_yscale("log")
    _log_axis(right.xaxis, _sci)
    _log_axis(right.yaxis, _si)
    right.set_ylabel("compute-optimal non-embedding parameters N*")
    right.set_title(f"N*(C) = {law.coefficient:.3g} C^{law.exponent:.3f}", fontsize=10)
    right.legend(handles=handles, fontsize=8, loc="upper left")

    figure.suptitle(
        f"Forecast at C = {_sci(target)} from {forecast.n_budgets} budgets, {forecast.n_runs} runs "
        f"({CONFIDENCE:.0%} intervals, {forecast.bootstrap} bootstrap resamples)",
        fontsize=11,
    )
    _save(figure, path)


def plot_seed_spread(runs: Sequence[Mapping[str, Any]], path: Pathish) -> float | None:
    """Each seed's loss minus its rung's mean vs budget, for rungs (budget, N) trained with several seeds,
    with the pooled std (``frontier.seed_spread``) as a band: the noise the forecast's intervals carry,
    and whether it grows or shrinks with compute. Sizes sit side by side around their budget, coloured by
    N. Returns the pooled std, None (and a figure saying so) when no rung has repeats."""
    rungs: dict[float, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        rungs[float(run["budget"])][float(run["params"])].append(float(run["loss"]))
    repeated = {
        budget: {n: losses for n, losses in sizes.items() if len(losses) > 1}
        for budget, sizes in rungs.items()
    }
    repeated = {budget: sizes for budget, sizes in repeated.items() if sizes}
    spread = seed_spread(runs)
    figure = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    if spread is None:
        ax.text(0.5, 0.5, "one seed per rung: no spread measured", ha="center", va="center", fontsize=12)
        ax.set_axis_off()
        _save(figure, path)
        return None

    log_budgets = np.log10(sorted(repeated))
    gap = float(np.diff(log_budgets).min()) if len(log_budgets) > 1 else 0.5
    x, y, sizes = [], [], []
    for budget, by_size in repeated.items():
        step = min(gap, 0.5) * 0.6 / len(by_size)  # the budget's sizes span 60% of the gap to the next
        for i, n in enumerate(sorted(by_size)):
            losses = np.asarray(by_size[n])
            offset = 10 ** ((i - (len(by_size) - 1) / 2) * step)
            x += [budget * offset] * len(losses)
            y += list(losses - losses.mean())
            sizes += [n] * len(losses)
    ax.axhspan(-spread, spread, color="grey", alpha=0.2, label=f"±1 pooled std = {spread:.4f}")
    ax.axhline(0.0, color="black", linewidth=0.8)
    points = ax.scatter(x, y, c=sizes, cmap="viridis", norm=LogNorm(min(sizes), max(sizes)), s=22, zorder=3)
    colourbar = figure.colorbar(points, ax=ax)
    colourbar.set_label("non-embedding parameters N")
    colourbar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _si(v)))
    colourbar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xscale("log")
    _log_axis(ax.xaxis, _sci)
    ax.set_xlabel("budget C (FLOPs)")
    ax.set_ylabel("loss − rung mean")
    n_rungs = sum(len(s) for s in repeated.values())
    n_runs = sum(len(losses) for s in repeated.values() for losses in s.values())
    rungs_with = f"{n_rungs} rung{'s' * (n_rungs != 1)} with repeats"
    ax.set_title(f"Seed spread: {rungs_with} ({n_runs} runs)", fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(figure, path)
    return spread
