"""The constant ladder rule (named sizes x FLOP budgets, one batch size and LR) and the log-linear law.

L(N, D) = A * N^-alpha * D^-beta, fitted by least squares on log L (3 unknowns, exact linear algebra,
no initial guess), is the fallback for ladders too small for the 5-parameter Chinchilla form
(``scaling/fit.py``): a local fit, good for ranking and nearby extrapolation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from marin_pipelines.train.model import MODEL_SIZES, LlamaConfig, preset
from marin_pipelines.train.train_config import TrainConfig


def ladder_steps(budget_flops: float, flops_per_token: float, tokens_per_step: int) -> int:
    """Training steps that spend the budget: budget / flops_per_token tokens, whole steps, at least 1."""
    if budget_flops <= 0 or flops_per_token <= 0 or tokens_per_step <= 0:
        raise ValueError(
            f"budget_flops ({budget_flops}), flops_per_token ({flops_per_token}) and "
            f"tokens_per_step ({tokens_per_step}) must be positive"
        )
    return max(1, round(budget_flops / flops_per_token / tokens_per_step))


def budget_key(budget_flops: float) -> str:
    """A budget's name in partition keys and run names: three significant figures, e.g. ``1.5e11``."""
    return f"{budget_flops:.3g}".replace("+", "")


def check_budgets(budgets: list[float]) -> list[float]:
    """Budgets that name partitions: positive, finite and distinct in their keys (3 significant figures)."""
    if any(not (b > 0 and math.isfinite(b)) for b in budgets):
        raise ValueError(f"budgets must be positive and finite, got {budgets}")
    keys = [budget_key(b) for b in budgets]
    if len(set(keys)) < len(keys):
        raise ValueError(f"budgets must differ in their first 3 significant figures, got {keys}")
    return budgets


class LadderRun(BaseModel):
    """One rung: a model size trained for one FLOP budget."""

    model_config = ConfigDict(frozen=True)

    size: str
    budget_flops: float
    model: LlamaConfig
    train: TrainConfig

    @property
    def name(self) -> str:
        """Partition-friendly key, e.g. ``nano-1e12``."""
        return f"{self.size}-{budget_key(self.budget_flops)}"


class LadderConfig(BaseModel):
    """Sizes x budgets, one shared batch size, and the learning-rate rule across widths: the rule of the
    ``constant`` recipe (``scaling/recipe.py``), kept to compare the Delphi-style recipe against."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sizes: list[str] = Field(default=["nano", "micro"], min_length=1)
    budgets: list[float] = Field(default=[5e11, 2e12], min_length=1, description="training FLOP budgets")
    batch_size: int = Field(default=16, gt=0)
    learning_rate: float = Field(
        default=3e-3, gt=0, description="peak LR (at reference_d_model under inverse_width)"
    )
    lr_rule: Literal["constant", "inverse_width"] = Field(
        default="constant",
        description="constant: one LR for every size (measured best for nano/micro); "
        "inverse_width: LR x reference_d_model / d_model (muP-style for Adam, for wider ladders)",
    )
    reference_d_model: int = Field(default=64, gt=0)
    warmup_fraction: float = Field(default=0.1, ge=0, lt=1)

    @field_validator("sizes")
    @classmethod
    def _known_sizes(cls, sizes: list[str]) -> list[str]:
        unknown = [s for s in sizes if s not in MODEL_SIZES]
        if unknown:
            raise ValueError(f"unknown model sizes {unknown}; allowed: {sorted(MODEL_SIZES)}")
        return sizes

    @field_validator("budgets")
    @classmethod
    def _positive_budgets(cls, budgets: list[float]) -> list[float]:
        return check_budgets(budgets)

    def learning_rate_for(self, model: LlamaConfig) -> float:
        if self.lr_rule == "constant":
            return self.learning_rate
        return self.learning_rate * self.reference_d_model / model.d_model

    def run(
        self, size: str, budget_flops: float, vocab_size: int, seq_len: int, base: TrainConfig | None = None
    ) -> LadderRun:
        """One rung: steps, batch size, LR and warmup from the ladder; seed, betas, decay... from ``base``."""
        model = preset(size, vocab_size, seq_len)
        steps = ladder_steps(budget_flops, model.flops_per_token(), self.batch_size * seq_len)
        train = TrainConfig(
            **{
                **(base or TrainConfig()).model_dump(),
                "steps": steps,
                "batch_size": self.batch_size,
                "learning_rate": self.learning_rate_for(model),
                "warmup_steps": int(self.warmup_fraction * steps),
            }
        )
        return LadderRun(size=size, budget_flops=budget_flops, model=model, train=train)

    def plan(self, vocab_size: int, seq_len: int, base: TrainConfig | None = None) -> list[LadderRun]:
        """Every rung, sizes outer, budgets inner."""
        return [
            self.run(size, budget, vocab_size, seq_len, base)
            for size in self.sizes
            for budget in self.budgets
        ]


@dataclass(frozen=True)
class ScalingLaw:
    """L(N, D) = A * N^-alpha * D^-beta. r2 and residuals are of log L; residuals in run order."""

    A: float
    alpha: float
    beta: float
    r2: float
    residuals: tuple[float, ...]
    n_runs: int

    method = "log_linear"
    PARAMETERS = ("A", "alpha", "beta")

    def predict(self, params: float, tokens: float) -> float:
        return self.A * params**-self.alpha * tokens**-self.beta

    @property
    def formula(self) -> str:
        return f"L = {self.A:.3g} N^-{self.alpha:.3f} D^-{self.beta:.3f}  (R² {self.r2:.3f})"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "residuals": list(self.residuals)}


def fit_scaling_law(runs: Sequence[dict[str, float]]) -> ScalingLaw:
    """Least squares of log L on [1, log N, log D] over runs with keys params, tokens, loss.

    Pass non-embedding params as N (Kaplan et al.): at these sizes a 4k-vocab embedding is most of
    the parameters and would hide the effect of depth and width.
    """
    if len(runs) < 3:
        raise ValueError(f"fitting A, alpha, beta needs at least 3 runs, got {len(runs)}")
    n, d, loss = (np.array([float(r[key]) for r in runs]) for key in ("params", "tokens", "loss"))
    for name, values in (("params", n), ("tokens", d), ("loss", loss)):
        if not np.all(np.isfinite(values) & (values > 0)):
            raise ValueError(f"every run's {name} must be positive and finite, got {values.tolist()}")
    if len(np.unique(n)) < 2 or len(np.unique(d)) < 2:
        raise ValueError(
            f"the fit needs at least 2 distinct params and 2 distinct tokens, got params "
            f"{sorted(set(n.tolist()))} and tokens {sorted(set(d.tolist()))}"
        )
    design = np.column_stack([np.ones_like(n), np.log(n), np.log(d)])
    if np.linalg.matrix_rank(design) < 3:
        raise ValueError(
            "log params and log tokens are collinear across runs: alpha and beta cannot be separated"
        )
    y = np.log(loss)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residuals = y - design @ coef
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residuals**2)) / total if total > 0 else 1.0
    return ScalingLaw(
        A=float(np.exp(coef[0])),
        alpha=float(-coef[1]),
        beta=float(-coef[2]),
        r2=r2,
        residuals=tuple(float(r) for r in residuals),
        n_runs=len(runs),
    )
