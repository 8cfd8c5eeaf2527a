"""The comparison step of a controlled ablation: several trained and evaluated variants side by side.

A researcher deciding whether z-loss or a quality filter helped should read one page, not assemble a
WandB report. It opens with the answer: the verdict on the metrics the hypothesis is about (each variant
against the baseline, the difference and which way it goes), then the hypothesis, a markdown table (best
value per metric in bold), the training loss curves overlaid, each variant's loss minus the baseline's (two
near-equal runs draw one line in the first), and the evaluation scores as bars. Everything is read from
what the training and evaluation steps already wrote, so this step needs no accelerator.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from marin_pipelines.store import read_url
from marin_pipelines.train.train_config import METRICS_FILE, TRAIN_FILE  # no JAX

COMPARISON_FILE = "comparison.json"
LOSS_CURVES_FILE = "loss_curves.png"
LOSS_DIFFERENCE_FILE = "loss_vs_baseline.png"
SCORES_FILE = "scores.png"
# each run's loss and bits-per-byte on the held-out part of the data it trained on: comparable only
# between variants that trained on the same data (the named sets below are comparable between all)
OWN_LOSS, OWN_BPB = "own-data validation loss", "own-data bits-per-byte"
NO_HYPOTHESIS = "(no hypothesis stated)"
MISSING = "-"

Number = int | float
Better = Literal["lower", "higher"] | None


@dataclass(frozen=True)
class Variant:
    """One arm of the ablation: what its training step wrote and what its evaluation step reported."""

    label: str
    checkpoint_dir: str | Path  # a local folder or a URL in the store
    evals: dict[str, Any]


@dataclass(frozen=True)
class Row:
    """One metric across the variants; ``better`` says which way wins (None: a quantity, not a score)."""

    metric: str
    better: Better
    values: dict[str, Number | None]

    def best(self) -> Number | None:
        """Non-finite values never win: a diverged run must not look best on its NaN."""
        finite = [v for v in self.values.values() if v is not None and math.isfinite(v)]
        if self.better is None or not finite:
            return None
        return min(finite) if self.better == "lower" else max(finite)


def against(labels: list[str], baselines: Mapping[str, str]) -> dict[str, str]:
    """Each variant that is judged, with the variant it is judged against: its entry in ``baselines``, else
    the first. A baseline is not judged itself (the dense run at 8e11 is not worse than the dense at 2e11:
    it is another budget's baseline)."""
    bases = {labels[0], *baselines.values()}
    return {label: baselines.get(label, labels[0]) for label in labels if label not in bases}


def compare_variants(
    variants: list[Variant],
    hypothesis: str,
    out_dir: Path,
    metrics: Sequence[str] = (),
    baselines: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Write ``comparison.json`` and the plots into ``out_dir``.

    The first variant is the baseline, of every variant ``baselines`` gives no other (a variant -> the
    variant it is judged against: per budget, say). ``metrics`` are the table's scores the hypothesis is
    about (the own-data validation loss when none is named); the first decides ``best``. Returns metadata
    for the asset's manifest, in the order a reader wants it: ``markdown`` (``verdict``, ``hypothesis``,
    ``comparison``), ``best``, ``metric`` and ``plots``. ``comparison.json`` holds every number.
    """
    if len(variants) < 2:
        raise ValueError(f"a comparison needs at least two variants, got {len(variants)}")
    labels = [v.label for v in variants]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"variant labels must be unique; repeated: {duplicates}")
    judged = against(labels, baselines or {})
    out_dir = Path(out_dir)
    curves = {v.label: _loss_curve(v) for v in variants}
    summaries = {v.label: _train_summary(v) for v in variants}
    rows = _rows(variants, summaries)
    by_metric = {row.metric: row for row in rows}
    asked = list(metrics) or [OWN_LOSS]
    if unknown := [m for m in asked if by_metric.get(m) is None or by_metric[m].better is None]:
        scores = [row.metric for row in rows if row.better is not None]
        raise ValueError(f"comparison metrics {unknown} are not scores of these variants; they have {scores}")
    best = by_metric[asked[0]].best()
    metadata: dict[str, Any] = {
        "markdown": {
            "verdict": "\n\n".join(verdict(by_metric[m], judged) for m in asked),
            "hypothesis": hypothesis.strip() or NO_HYPOTHESIS,
            "comparison": markdown_table(labels, rows),
        },
        "best": None if best is None else next(k for k in labels if by_metric[asked[0]].values[k] == best),
        "metric": asked[0],
        "plots": {
            "loss_vs_baseline": LOSS_DIFFERENCE_FILE,
            "loss_curves": LOSS_CURVES_FILE,
            "scores": SCORES_FILE,
        },
    }
    record = {
        **metadata,
        "variants": labels,
        "against": judged,
        "metrics": asked,
        "hypothesis": metadata["markdown"]["hypothesis"],
        "rows": [{"metric": r.metric, "better": r.better, "values": r.values} for r in rows],
        "loss_curves": curves,
    }
    (out_dir / COMPARISON_FILE).write_text(json.dumps(record, indent=2))
    plot_loss_curves(curves, out_dir / LOSS_CURVES_FILE)
    plot_loss_difference(curves, judged, out_dir / LOSS_DIFFERENCE_FILE)
    plot_scores(labels, [r for r in rows if _is_score(r.metric)], out_dir / SCORES_FILE)
    return metadata


def verdict(row: Row, judged: Mapping[str, str]) -> str:
    """Each judged variant against its baseline (``against``) on ``row``'s metric, in markdown: the values,
    the difference (absolute and relative) and whether that is better, worse or the same."""
    one = len(set(judged.values())) == 1
    lines = [
        f"**{row.metric}** ({row.better} is better), against "
        + (next(iter(judged.values())) if one else "each variant's baseline")
        + ":"
    ]
    for label, baseline in judged.items():
        value, base = row.values[label], row.values[baseline]
        name = label if one else f"{label} (against {baseline})"
        if value is None or base is None or not (math.isfinite(value) and math.isfinite(base)):
            lines.append(f"- {name}: {_format(value, row.better)} vs {_format(base, row.better)}, no verdict")
            continue
        difference = value - base
        relative = f" ({difference / abs(base):+.1%})" if base else ""
        lower = difference < 0
        goes = "better" if lower == (row.better == "lower") else "worse"
        if difference == 0:
            goes = "the same"
        lines.append(
            f"- {name} **{goes}**: {_format(value, row.better)} vs {_format(base, row.better)}, "
            f"{difference:+.4g}{relative}"
        )
    return "\n".join(lines)


def _read_text(path: str, variant: Variant) -> str:
    try:
        return read_url(path)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"variant {variant.label!r}: {path} not found (is it a training output?)"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"variant {variant.label!r}: cannot read {path}: {e}") from e


def _loss_curve(variant: Variant) -> dict[str, list[Any]]:
    """Steps, losses and skipped steps as lists: what comparison.json keeps and the plot draws."""
    path = f"{variant.checkpoint_dir}/{METRICS_FILE}"
    curve: dict[str, list[Any]] = {"step": [], "loss": [], "skipped_steps": []}
    for number, line in enumerate(_read_text(path, variant).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step, loss = int(record["step"]), float(record["loss"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"variant {variant.label!r}: line {number} of {path} is not a step record "
                f"with a step and a loss: {e}"
            ) from e
        curve["step"].append(step)
        curve["loss"].append(loss)
        if record.get("skipped"):
            curve["skipped_steps"].append(step)
    if not curve["step"]:
        raise ValueError(f"variant {variant.label!r}: {path} holds no steps")
    return curve


def _train_summary(variant: Variant) -> dict[str, Any]:
    path = f"{variant.checkpoint_dir}/{TRAIN_FILE}"
    try:
        summary = json.loads(_read_text(path, variant))["summary"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"variant {variant.label!r}: {path} is not a training summary: {e!r}") from e
    if not isinstance(summary, dict):
        raise ValueError(f"variant {variant.label!r}: the summary in {path} is not a JSON object")
    return summary


def _number(value: Any, metric: str, variant: str) -> Number | None:
    """A missing metric is None (a "-" cell); one that is not a number is corrupt metadata, not a gap."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"variant {variant!r}: {metric} is {value!r}, not a number")
    return value


def _direction(score: str) -> Better:
    """bpb, chat losses and perplexities fall as a model improves; accuracies and exact matches rise."""
    metric = score.rsplit("/", 1)[-1]
    lower = score.startswith(("bpb/", "loss/", "chat/"))
    if lower or metric.endswith("perplexity") or metric == "bits_per_byte":
        return "lower"
    return "higher"


def _is_score(metric: str) -> bool:
    """The evaluation scores the bar chart shows: per-set bits per byte and lm-eval task metrics."""
    return "/" in metric


def _rows(variants: list[Variant], summaries: dict[str, dict[str, Any]]) -> list[Row]:
    def row(metric: str, better: Better, values: dict[str, Any]) -> Row:
        return Row(metric, better, {label: _number(v, metric, label) for label, v in values.items()})

    def from_evals(key: str) -> dict[str, Any]:
        return {v.label: v.evals.get(key) for v in variants}

    def from_summary(key: str) -> dict[str, Any]:
        return {label: summary.get(key) for label, summary in summaries.items()}

    scores = {v.label: v.evals.get("scores") or {} for v in variants}
    names = list(dict.fromkeys(name for s in scores.values() for name in s))  # first-seen order
    sets = [n for n in names if n.startswith("bpb/")]
    tasks = [n for n in names if not n.startswith(("bpb/", "loss/"))]  # loss/SET repeats bpb/SET
    return [
        row("final training loss", "lower", from_summary("final_loss")),
        row(OWN_LOSS, "lower", from_evals("loss")),
        row(OWN_BPB, "lower", from_evals("bits_per_byte")),
        *(row(n, _direction(n), {label: s.get(n) for label, s in scores.items()}) for n in sets + tasks),
        row("params (non-embedding)", None, from_evals("params")),
        row("params a token uses (MoE: active)", None, from_summary("active_params")),
        row("training tokens", None, from_evals("train_tokens")),
        row("FLOPs", None, from_evals("flops")),
        row("skipped updates", None, from_summary("skipped_updates")),
        row("train wall seconds", None, from_summary("wall_seconds")),
    ]


def _format(value: Number | None, better: Better) -> str:
    """Scores below 100 to four decimals, since ablations differ in the third; larger ones (perplexities)
    to four significant digits or whole; counts as counts."""
    if value is None:
        return MISSING
    if not math.isfinite(value):
        return str(float(value))  # "nan", "inf", "-inf"
    if isinstance(value, int):
        return f"{value:,}"
    if not better:
        return f"{value:.4g}"
    return f"{value:.4f}" if abs(value) < 100 else f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def markdown_table(labels: list[str], rows: list[Row]) -> str:
    """One row per metric, one column per variant, the best value of each score in bold."""
    arrows = {"lower": " ↓", "higher": " ↑", None: ""}
    header = "| metric | " + " | ".join(label.replace("|", "\\|") for label in labels) + " |"
    lines = [header, "|---|" + "---:|" * len(labels)]
    for row in rows:
        best = row.best()
        cells = []
        for label in labels:
            text = _format(row.values[label], row.better)
            cells.append(f"**{text}**" if best is not None and row.values[label] == best else text)
        lines.append(f"| {row.metric}{arrows[row.better]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_loss_curves(curves: dict[str, dict[str, list[Any]]], path: Path) -> None:
    """Against steps, not tokens: variants may differ in batch size, the table gives their tokens."""
    figure = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    skipped: list[tuple[int, float]] = []
    for label, curve in curves.items():
        ax.plot(curve["step"], curve["loss"], linewidth=1, label=label)
        steps = set(curve["skipped_steps"])
        skipped += [(s, loss) for s, loss in zip(curve["step"], curve["loss"], strict=True) if s in steps]
    if skipped:
        ax.scatter([s for s, _ in skipped], [loss for _, loss in skipped], c="red", s=8, label="skipped")
    ax.legend()
    ax.set_xlabel("step (not tokens: batch sizes may differ)")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(f"training loss of {len(curves)} variants")
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


def plot_loss_difference(
    curves: dict[str, dict[str, list[Any]]], judged: Mapping[str, str], path: Path
) -> None:
    """Each judged variant's training loss minus its baseline's (``against``) at the steps both logged,
    averaged over a window of a tenth of the run: the differences an ablation is about, which the overlaid
    curves hide."""
    figure = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    one = len(set(judged.values())) == 1
    apart = []  # variants that logged no step their baseline did: said on the plot, not left out silently
    for i, (label, baseline) in enumerate(judged.items(), start=1):
        at = dict(zip(curves[baseline]["step"], curves[baseline]["loss"], strict=True))
        curve = curves[label]
        pairs = [(s, loss - at[s]) for s, loss in zip(curve["step"], curve["loss"], strict=True) if s in at]
        if not pairs:
            apart.append(label)
            continue
        window = max(1, len(pairs) // 10)
        smooth = np.convolve([d for _, d in pairs], np.ones(window) / window, mode="valid")
        name = label if one else f"{label} - {baseline}"
        ax.plot([s for s, _ in pairs][window - 1 :], smooth, linewidth=1, color=f"C{i}", label=name)
    baseline = next(iter(judged.values())) if one else "its baseline"
    ax.axhline(0, color="C0", linewidth=1, label=f"{baseline} (baseline)")
    if apart:
        ax.text(0.01, 0.02, f"no step in common with {baseline}: {', '.join(apart)}", transform=ax.transAxes)
    ax.legend()
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss minus {baseline}'s (nats/token)")
    ax.set_title("below 0: lower loss than the baseline at the same step")
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


def plot_scores(labels: list[str], rows: list[Row], path: Path) -> None:
    """One panel per metric, one bar per variant: metrics differ in scale (perplexities in the hundreds,
    accuracies below one), so a shared axis would flatten most of them."""
    height = 0.3 * len(labels) + 0.6
    figure = Figure(figsize=(7, max(2.0, height * len(rows) + 0.8)), dpi=100)
    FigureCanvasAgg(figure)
    if not rows:
        figure.text(0.5, 0.5, "no bits-per-byte sets or task scores to compare", ha="center", va="center")
        figure.savefig(path)
        return
    axes = figure.subplots(len(rows), 1, squeeze=False)[:, 0]
    for ax, row in zip(axes, rows, strict=True):
        for i, label in enumerate(labels):
            value = row.values[label]
            drawn = value if value is not None and math.isfinite(value) else 0
            ax.barh(i, drawn, color=f"C{i}", label=label)
            ax.annotate(
                _format(value, row.better), (drawn, i), xytext=(3, 0), textcoords="offset points", va="center"
            )
        ax.set_yticks([])
        ax.invert_yaxis()
        ax.margins(x=0.2)
        ax.set_title(f"{row.metric} ({row.better} is better)", fontsize=9, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    figure.legend(*axes[0].get_legend_handles_labels(), loc="upper right", fontsize=8)
    figure.tight_layout(rect=(0, 0, 0.85, 1))
    figure.savefig(path)
