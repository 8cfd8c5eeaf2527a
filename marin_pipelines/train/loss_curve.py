"""The loss curve a training run saves beside its checkpoints (PNG)."""

from __future__ import annotations

import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def loss_curve_png(metrics: list[dict[str, Any]], summary: dict[str, Any]) -> bytes:
    """The training loss by step, skipped updates marked, the validation loss where the run reported it
    (``reporting``), as PNG bytes; a run stopped early (``stopped_at`` in ``summary``) says so."""
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
        f"{summary['params'] / 1e6:.2f}M params, {summary['tokens_seen']:,} tokens: "
        f"loss {summary['initial_loss']:.2f} -> {summary['final_loss']:.2f}"
        + (f", stopped at step {summary['stopped_at']}" if "stopped_at" in summary else ""),
        fontsize=10 if "stopped_at" in summary else None,
    )
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return png.getvalue()
