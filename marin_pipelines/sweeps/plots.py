"""A sweep's plots (PNG bytes, matplotlib without a display): the optimisation history, each parameter against
the metric, and the reported curves of complete and pruned trials."""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import optuna
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

HISTORY_FILE, PARAMS_FILE, CURVES_FILE = "history.png", "params.png", "curves.png"


def sweep_plots(study: optuna.Study, metric: str) -> dict[str, bytes]:
    """File name -> PNG of each plot."""
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    return {
        HISTORY_FILE: _png(lambda figure: _history(figure, complete, pruned, metric)),
        PARAMS_FILE: _png(lambda figure: _params(figure, complete, metric), _params_size(complete)),
        CURVES_FILE: _png(lambda figure: _curves(figure, complete, pruned, metric)),
    }


def _png(draw: Callable[[Figure], None], size: tuple[float, float] = (6, 4)) -> bytes:
    figure = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(figure)
    draw(figure)
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return png.getvalue()


def _history(figure: Figure, complete: list[FrozenTrial], pruned: list[FrozenTrial], metric: str) -> None:
    ax = figure.add_subplot()
    ax.scatter([t.number for t in complete], [t.value for t in complete], s=14, label="complete")
    stopped = [t for t in pruned if t.intermediate_values]
    if stopped:
        last = [t.intermediate_values[max(t.intermediate_values)] for t in stopped]
        ax.scatter(
            [t.number for t in stopped], last, s=14, marker="x", c="grey", label="pruned (last report)"
        )
    best, line = math.inf, []
    for trial in sorted(complete, key=lambda t: t.number):
        best = min(best, trial.value if trial.value is not None else math.inf)
        line.append((trial.number, best))
    if line:
        ax.step(*zip(*line, strict=True), where="post", c="red", label="best so far")
    _labels(ax, "trial", metric, "optimisation history")


def _params_size(complete: list[FrozenTrial]) -> tuple[float, float]:
    names = sorted({name for t in complete for name in t.params})
    return (max(4.0, 3.2 * len(names)), 3.4)


def _params(figure: Figure, complete: list[FrozenTrial], metric: str) -> None:
    names = sorted({name for t in complete for name in t.params})
    if not names:
        _labels(figure.add_subplot(), "parameter", metric, "no complete trial")
        return
    for index, name in enumerate(names):
        ax = figure.add_subplot(1, len(names), index + 1)
        shown = [t for t in complete if name in t.params]
        values = [t.params[name] for t in shown]
        distribution = shown[0].distributions[name]
        if isinstance(distribution, CategoricalDistribution):
            choices = [repr(c) for c in distribution.choices]
            ax.set_xticks(range(len(choices)), choices, rotation=30)
            values = [choices.index(repr(v)) for v in values]
        elif getattr(distribution, "log", False):
            ax.set_xscale("log")
        ax.scatter(values, [t.value for t in shown], s=14, c=[t.number for t in shown], cmap="viridis")
        _labels(ax, name, metric if index == 0 else "", None)


def _curves(figure: Figure, complete: list[FrozenTrial], pruned: list[FrozenTrial], metric: str) -> None:
    ax = figure.add_subplot()
    for trials, colour, label in ((complete, "tab:blue", "complete"), (pruned, "tab:grey", "pruned")):
        for i, trial in enumerate(sorted(trials, key=lambda t: t.number)):
            steps = sorted(trial.intermediate_values)
            values = [trial.intermediate_values[s] for s in steps]
            ax.plot(
                steps, values, c=colour, alpha=0.7, linewidth=1, marker=".", label=label if i == 0 else None
            )
    _labels(ax, "step", metric, "reported curves")


def _labels(ax: Axes, x: str, y: str, title: str | None) -> None:
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
