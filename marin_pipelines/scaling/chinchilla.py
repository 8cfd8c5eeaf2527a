"""L(N, D) = E + A / N^alpha + B / D^beta (Chinchilla approach 3), fitted as Besiroglu et al. (2024) did.

Minimise sum_i Huber_delta(LSE(a - alpha log N_i, b - beta log D_i, e) - log L_i) over
(a, b, e, alpha, beta) = (log A, log B, log E, alpha, beta) with L-BFGS, from the best few points of a
grid of starts: the loss surface has many shallow basins and one start is not enough. Huber on
log loss makes the fit relative (a 1% miss costs the same at loss 2 and loss 6) and robust to a
diverged run. The gradient is analytic, so one fit takes milliseconds and a bootstrap is cheap.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

HUBER_DELTA = 1e-3
# Besiroglu et al.'s grid: e in [-1, 1.5], a and b in [0, 25], alpha and beta in [0, 2].
GRID = {
    "a": np.arange(0.0, 30.0, 5.0),
    "b": np.arange(0.0, 30.0, 5.0),
    "e": np.arange(-1.0, 2.0, 0.5),
    "alpha": np.arange(0.0, 2.5, 0.5),
    "beta": np.arange(0.0, 2.5, 0.5),
}
N_STARTS = 16  # L-BFGS runs from the grid's best points


@dataclass(frozen=True)
class ChinchillaLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float

    method = "chinchilla"
    PARAMETERS = ("E", "A", "B", "alpha", "beta")

    def predict(self, params: float, tokens: float) -> float:
        return self.E + self.A * params**-self.alpha + self.B * tokens**-self.beta

    def compute_optimal(self, flops: float) -> tuple[float, float]:
        """N*, D* minimising L at C = 6ND (Hoffmann et al. eq. 4)."""
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        n = g * (flops / 6) ** (self.beta / (self.alpha + self.beta))
        return n, flops / (6 * n)

    @property
    def formula(self) -> str:
        return f"L = {self.E:.3g} + {self.A:.3g}/N^{self.alpha:.3f} + {self.B:.3g}/D^{self.beta:.3f}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _objective(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray, delta: float):
    """Huber loss / delta (same minimiser, better-scaled for L-BFGS) and its gradient."""
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    top = terms.max(axis=0)
    weights = np.exp(terms - top)
    total = weights.sum(axis=0)
    residual = top + np.log(total) - log_l
    small = np.abs(residual) <= delta
    loss = np.where(small, 0.5 * residual**2, delta * (np.abs(residual) - 0.5 * delta)).sum() / delta
    slope = np.where(small, residual, delta * np.sign(residual)) / delta
    w = weights / total * slope  # d LSE / d term (softmax), times d Huber / d residual
    grad = np.array([w[0].sum(), w[1].sum(), w[2].sum(), -(w[0] * log_n).sum(), -(w[1] * log_d).sum()])
    return loss, grad


def _grid_losses(log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray, delta: float) -> np.ndarray:
    starts = np.array(list(itertools.product(*GRID.values())))  # (a, b, e, alpha, beta)
    a, b, e, alpha, beta = (starts[:, i : i + 1] for i in range(5))
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.broadcast_to(e, (len(starts), len(log_n)))])
    top = terms.max(axis=0)
    r = np.abs(top + np.log(np.exp(terms - top).sum(axis=0)) - log_l)
    return starts, np.where(r <= delta, 0.5 * r**2, delta * (r - 0.5 * delta)).sum(axis=1)


def fit_chinchilla(
    params: np.ndarray,
    tokens: np.ndarray,
    loss: np.ndarray,
    delta: float = HUBER_DELTA,
    starts: np.ndarray | None = None,
) -> ChinchillaLaw:
    """The Huber fit from the ``N_STARTS`` best grid points, or from ``starts`` (rows a, b, e, alpha, beta).

    A bootstrap passes the full fit's optimum as its start: resamples are close to the original.
    """
    log_n, log_d, log_l = np.log(params), np.log(tokens), np.log(loss)
    if starts is None:
        grid, losses = _grid_losses(log_n, log_d, log_l, delta)
        starts = grid[np.argsort(losses)[:N_STARTS]]
    bounds = [(None, None), (None, None), (None, None), (0.0, None), (0.0, None)]
    best = None
    for start in starts:
        result = minimize(
            _objective,
            start,
            args=(log_n, log_d, log_l, delta),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-10},
        )
        if np.isfinite(result.fun) and (best is None or result.fun < best.fun):
            best = result
    assert best is not None
    a, b, e, alpha, beta = best.x
    return ChinchillaLaw(E=float(np.exp(e)), A=float(np.exp(a)), B=float(np.exp(b)), alpha=alpha, beta=beta)


def law_start(law: ChinchillaLaw) -> np.ndarray:
    """A fitted law as an L-BFGS start for ``fit_chinchilla``."""
    a, b, e = np.log(np.maximum([law.A, law.B, law.E], np.finfo(float).tiny))  # a term fitted away: A = 0
    return np.array([[a, b, e, law.alpha, law.beta]])
