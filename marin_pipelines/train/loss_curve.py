"""The loss curve a training run saves beside its checkpoints (PNG)."""

from __future__ import annotations

import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def loss_curve_png(metrics: list[dict[str, Any]], summary: dict[str, Any]) -> bytes:
    """The training loss by step, skipped updates marked, as PNG bytes."""
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    ax.plot([m["step"] for m in metrics], [m["loss"] for m in metrics], linewidth=1)
    skipped = [m for m in metrics if m["skipped"]]
    if skipped:
        ax.scatter([m["step"] for m in skipped], [m["loss"] for m in skipped], c="red", s=8, label="skipped")
        ax.legend()
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(
        f"{summary['params'] / 1e6:.2f}M params, {summary['tokens_seen']:,} tokens: "
        f"loss {summary['initial_loss']:.2f} -> {summary['final_loss']:.2f}"
    )
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return png.getvalue()
