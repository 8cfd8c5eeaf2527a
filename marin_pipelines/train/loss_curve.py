"""The loss curve a training run saves beside its checkpoints (PNG)."""

from __future__ import annotations

import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def loss_curve_png(metrics: list[dict[str, Any]], summary: dict[str, Any]) -> bytes:
    """``loss_curve_figure`` as PNG bytes."""
    png = io.BytesIO()
    loss_curve_figure(metrics, summary).savefig(png, format="png")
    return png.getvalue()


def loss_curve_figure(metrics: list[dict[str, Any]], summary: dict[str, Any]) -> Figure:
    """The training loss by step, skipped updates marked, the validation loss where the run reported it
    (``reporting``); the title gives the parameter counts, each with its base, the tokens and the loss;
    a run stopped early (``stopped_at`` in ``summary``) says so."""
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    ax.plot([m["step"] for m in metrics], [m["loss"] for m in metrics], linewidth=1)
    skipped = [m for m in metrics if m["skipped"]]
    if skipped:
        ax.scatter([m["step"] for m in skipped], [m["loss"] for m in skipped], c="red", s=8, label="skipped")
        ax.legend()
    validated = [m for m in metrics if "val_loss" in m]
    if validated:  # measured after the step's update
        steps, losses = [m["step"] + 1 for m in validated], [m["val_loss"] for m in validated]
        ax.plot(steps, losses, "o-", markersize=3, label="validation")
        ax.legend()
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(
        f"{params_text(summary)}, {summary['tokens_seen']:,} tokens: "
        f"loss {summary['initial_loss']:.2f} -> {summary['final_loss']:.2f}"
        + (f", stopped at step {summary['stopped_at']}" if "stopped_at" in summary else ""),
        fontsize=8 if "stopped_at" in summary else 9,
    )
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    return figure


def params_text(summary: dict[str, Any]) -> str:
    """The run's parameter counts with their base said: "0.03M params non-embedding (0.16M total)", the
    non-embedding count first (the one recipes, forecasts and comparisons use); a summary without it (an
    older run's) gives the total, said to be one."""
    total = f"{summary['params'] / 1e6:.2f}M"
    if (layers := summary.get("non_embedding_params")) is None:
        return f"{total} params total with embeddings"
    return f"{layers / 1e6:.2f}M params non-embedding ({total} total)"
