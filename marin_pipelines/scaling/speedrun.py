"""The speedrun: submissions trained at fixed FLOP budgets, ranked by validation bits-per-byte.

A submission is a Python file under ``marin_pipelines/experiments/speedrun/`` that defines
``SUBMISSION = Submission(...)``: who, what, the model shape, the training settings and the budgets.
Each (submission, budget) trains for budget / FLOPs-per-token tokens and records a result:

- model FLOPs = 3 x forward FLOPs per token x tokens (``LlamaConfig.flops_per_token`` is the 6N + attention
  training count, which is exactly that), the number the budget caps;
- hardware FLOPs = measured step time x device peak FLOP/s x devices (the trainer's peak: configured, or
  measured on matmuls): what the hardware could have done in the time it took; model / hardware is the MFU.

The leaderboard ranks within a budget, draws bits-per-byte against model FLOPs with the Pareto frontier,
and for a submission run at several budgets fits bpb = k C^slope.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import BaseModel, ConfigDict, Field, field_validator

from marin_pipelines.scaling.scaling_law import ladder_steps
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.train_config import TrainConfig

SUBMISSIONS_PACKAGE = "marin_pipelines.experiments.speedrun"
SHAPE_FIELDS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")
ARCHITECTURE_FIELDS = ("qk_norm", "moe", "tie_embeddings")  # optional: LlamaConfig's defaults otherwise


class Submission(BaseModel):
    """One speedrun entry. ``train`` holds TrainConfig fields; steps and warmup are set per budget."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    author: str = Field(min_length=1)
    description: str = Field(min_length=1)
    model: dict[str, Any] = Field(
        description=f"the shape: {', '.join(SHAPE_FIELDS)}; optionally {', '.join(ARCHITECTURE_FIELDS)} "
        "(an MoE's budget is spent by its active parameters)"
    )
    seq_len: int = Field(128, gt=0)
    train: dict[str, Any] = Field(
        default_factory=dict, description="TrainConfig fields but steps, warmup_steps"
    )
    warmup_fraction: float = Field(0.1, ge=0, lt=1)
    budgets: list[float] = Field(min_length=1, description="model-FLOP budgets, one run each")

    @field_validator("model")
    @classmethod
    def _shape(cls, model: dict[str, Any]) -> dict[str, Any]:
        missing, unknown = set(SHAPE_FIELDS) - set(model), set(model) - {*SHAPE_FIELDS, *ARCHITECTURE_FIELDS}
        if missing or unknown:
            raise ValueError(
                f"model must give {list(SHAPE_FIELDS)} and may give {list(ARCHITECTURE_FIELDS)}; "
                f"missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        return model

    @field_validator("train")
    @classmethod
    def _train(cls, train: dict[str, Any]) -> dict[str, Any]:
        derived = sorted({"steps", "warmup_steps"} & set(train))
        if derived:
            raise ValueError(f"train sets {derived}: they follow from the budget and warmup_fraction")
        TrainConfig(**train)  # unknown or invalid fields fail here, named
        return train

    @field_validator("budgets")
    @classmethod
    def _positive(cls, budgets: list[float]) -> list[float]:
        if any(not b > 0 for b in budgets):
            raise ValueError(f"budgets must be positive, got {budgets}")
        return budgets

    def run_config(self, budget: float, vocab_size: int) -> tuple[LlamaConfig, TrainConfig]:
        """The model and the training for one budget: whole steps that spend it."""
        model = LlamaConfig(vocab_size=vocab_size, seq_len=self.seq_len, **self.model)
        batch_size = TrainConfig(**self.train).batch_size
        steps = ladder_steps(budget, model.flops_per_token(), batch_size * self.seq_len)
        return model, TrainConfig(**self.train, steps=steps, warmup_steps=int(self.warmup_fraction * steps))


def discover_submissions() -> list[Submission]:
    """Every ``SUBMISSION`` in the speedrun package, by name; two files with one name are an error."""
    package = importlib.import_module(SUBMISSIONS_PACKAGE)
    found: dict[str, Submission] = {}
    for module in pkgutil.iter_modules(package.__path__):
        submission = getattr(
            importlib.import_module(f"{SUBMISSIONS_PACKAGE}.{module.name}"), "SUBMISSION", None
        )
        if not isinstance(submission, Submission):
            continue
        if submission.name in found:
            raise ValueError(f"two speedrun submissions are named {submission.name!r}")
        found[submission.name] = submission
    return [found[name] for name in sorted(found)]


def submission_result(
    submission: Submission, budget: float, summary: dict[str, Any], bits_per_byte: float
) -> dict[str, Any]:
    """One run's leaderboard entry from its training summary (``train.json``) and validation bpb."""
    step_seconds = summary["tokens_seen"] / summary["tokens_per_s"]  # steady-state: compile excluded
    devices = summary["devices"]  # peak_flops: the configured per-device peak x devices, or measured
    return {
        "submission": submission.name,
        "author": submission.author,
        "description": submission.description,
        "budget": budget,
        "params": summary["params"],
        "non_embedding_params": summary["non_embedding_params"],
        "active_params": summary.get("active_params", summary["params"]),
        "tokens": summary["tokens_seen"],
        "model_flops": summary["flops"],
        "hardware_flops": step_seconds * summary["peak_flops"],
        "wall_seconds": summary["wall_seconds"],
        "hardware": summary["hardware"],
        "devices": devices,
        "peak_flops": summary["peak_flops"] / devices,
        "bits_per_byte": bits_per_byte,
    }


def load_results(folder: Path) -> list[dict[str, Any]]:
    """Every results JSON under ``folder`` (searched recursively)."""
    files = sorted(Path(folder).rglob("results.json"))
    if not files:
        raise FileNotFoundError(f"no speedrun results.json under {folder}")
    return [json.loads(f.read_text()) for f in files]


def pareto_frontier(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs no other run beats on both model FLOPs and bits-per-byte, cheapest first."""
    frontier: list[dict[str, Any]] = []
    for r in sorted(results, key=lambda r: (r["model_flops"], r["bits_per_byte"])):
        if not frontier or r["bits_per_byte"] < frontier[-1]["bits_per_byte"]:
            frontier.append(r)
    return frontier


def submission_slopes(results: Sequence[dict[str, Any]]) -> dict[str, float]:
    """d log bpb / d log FLOPs for each submission run at two or more budgets."""
    slopes = {}
    for name in sorted({r["submission"] for r in results}):
        runs = [r for r in results if r["submission"] == name]
        if len({r["model_flops"] for r in runs}) >= 2:
            x, y = np.log([r["model_flops"] for r in runs]), np.log([r["bits_per_byte"] for r in runs])
            slopes[name] = float(np.polyfit(x, y, 1)[0])
    return slopes


def leaderboard_markdown(results: Sequence[dict[str, Any]]) -> str:
    """A table per budget, best bits-per-byte first; frontier runs marked, slopes below."""
    frontier = {(r["submission"], r["budget"]) for r in pareto_frontier(results)}
    lines = [
        "| budget | rank | submission | author | bpb | params | tokens | model FLOPs | hardware FLOPs | MFU "
        "| wall s | hardware |",
        "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for budget in sorted({r["budget"] for r in results}):
        ranked = sorted((r for r in results if r["budget"] == budget), key=lambda r: r["bits_per_byte"])
        for rank, r in enumerate(ranked, 1):
            star = " *" if (r["submission"], r["budget"]) in frontier else ""
            active = r.get("active_params", r["params"])
            params = f"{r['params']:,}" + (f" ({active:,} active)" if active != r["params"] else "")
            lines.append(
                f"| {budget:.2g} | {rank} | {r['submission']}{star} | {r['author']} "
                f"| {r['bits_per_byte']:.4f} "
                f"| {params} | {r['tokens']:,} | {r['model_flops']:.3g} | {r['hardware_flops']:.3g} "
                f"| {r['model_flops'] / r['hardware_flops']:.1%} | {r['wall_seconds']:.1f} "
                f"| {r['hardware']} x{r['devices']} |"
            )
    lines.append("\n\\* on the Pareto frontier of bits-per-byte vs model FLOPs")
    for name, slope in submission_slopes(results).items():
        lines.append(f"\n{name}: bpb ∝ C^{slope:.3f} across its budgets")
    return "\n".join(lines)


def plot_leaderboard(results: Sequence[dict[str, Any]], path: Path) -> None:
    """Bits-per-byte vs model FLOPs, one colour per submission, the frontier as a step line."""
    figure = Figure(figsize=(7, 5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    slopes = submission_slopes(results)
    for i, name in enumerate(sorted({r["submission"] for r in results})):
        runs = sorted((r for r in results if r["submission"] == name), key=lambda r: r["model_flops"])
        label = name + (f" (slope {slopes[name]:.3f})" if name in slopes else "")
        ax.plot(
            [r["model_flops"] for r in runs],
            [r["bits_per_byte"] for r in runs],
            "o-",
            color=f"C{i % 10}",
            label=label,
        )
    frontier = pareto_frontier(results)
    ax.step(
        [r["model_flops"] for r in frontier],
        [r["bits_per_byte"] for r in frontier],
        "k--",
        where="post",
        alpha=0.5,
        label="Pareto frontier",
    )
    ax.set_xscale("log")
    ax.set_xlabel("model FLOPs (3 x forward x tokens)")
    ax.set_ylabel("validation bits-per-byte")
    ax.set_title(f"speedrun: {len(results)} runs", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
