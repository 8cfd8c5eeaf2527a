"""Fit a scaling law to ladder runs, with seeded bootstrap intervals, and predict larger runs from it.

The Chinchilla form E + A / N^alpha + B / D^beta has 5 parameters: it needs more runs than that and
at least 3 distinct sizes and 3 distinct token counts, or E trades off against A and B freely. A
smaller ladder (the 2 x 2 test ladder has 4 runs) gets the log-linear A N^-alpha D^-beta instead,
and ``method`` says which was used. Intervals are percentiles over fits to runs resampled with
replacement: they show how much the ladder pins each parameter down, not how wrong the form is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from marin_pipelines.scaling.chinchilla import ChinchillaLaw, fit_chinchilla, law_start
from marin_pipelines.scaling.isoflop import IsoflopFit, fit_isoflops
from marin_pipelines.scaling.scaling_law import ScalingLaw, fit_scaling_law

Law = ChinchillaLaw | ScalingLaw
CONFIDENCE = 0.95


def chinchilla_fits(runs: Sequence[dict[str, float]]) -> str | None:
    """Why the 5-parameter form cannot be fitted to these runs, or None if it can."""
    sizes, tokens = ({float(r[k]) for r in runs} for k in ("params", "tokens"))
    if len(runs) <= len(ChinchillaLaw.PARAMETERS):
        return f"{len(runs)} runs for 5 parameters"
    if len(sizes) < 3 or len(tokens) < 3:
        return f"{len(sizes)} distinct sizes and {len(tokens)} distinct token counts (3 of each needed)"
    return None


def _fit(runs: Sequence[dict[str, float]], method: str, start: Law | None = None) -> Law:
    if method == "log_linear":
        return fit_scaling_law(runs)
    n, d, loss = (np.array([float(r[k]) for r in runs]) for k in ("params", "tokens", "loss"))
    return fit_chinchilla(n, d, loss, starts=None if start is None else law_start(start))


def _interval(values: Sequence[float]) -> tuple[float, float]:
    """Percentiles over the finite values: a resample can fit a term away (A or B overflowing)."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return math.nan, math.nan
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class LawFit:
    """The fitted law, why its form was chosen, bootstrap resamples and isoflop profiles."""

    law: Law
    method: str
    reason: str
    resamples: tuple[Law, ...]
    isoflops: IsoflopFit
    n_runs: int
    seed: int

    @property
    def parameters(self) -> tuple[str, ...]:
        return self.law.PARAMETERS

    def intervals(self) -> dict[str, tuple[float, float]]:
        """Each parameter's bootstrap percentile interval (the point estimate twice without resamples)."""
        return {
            name: _interval([getattr(law, name) for law in self.resamples or (self.law,)])
            for name in self.parameters
        }

    def compute_optimal(self, flops: float) -> dict[str, Any] | None:
        """N*, D* at ``flops``: from the isoflop power laws if there are two profiles, else the law's."""
        isoflop = self.isoflops.compute_optimal(flops)
        if isoflop is not None:
            return {"params": isoflop[0], "tokens": isoflop[1], "source": "isoflop"}
        if not isinstance(self.law, ChinchillaLaw):
            return None  # the log-linear law has no optimum: loss falls forever in N and D
        params, tokens = self.law.compute_optimal(flops)
        resampled = [law.compute_optimal(flops) for law in self.resamples]
        return {
            "params": params,
            "tokens": tokens,
            "source": "law (C = 6ND)",
            "params_interval": _interval([p for p, _ in resampled]) if resampled else None,
            "tokens_interval": _interval([t for _, t in resampled]) if resampled else None,
        }

    def predict(self, params: float, tokens: float, flops: float | None = None) -> dict[str, Any]:
        """The loss at (N, D) with its bootstrap interval, and the compute-optimal N, D at the same FLOPs."""
        loss = self.law.predict(params, tokens)
        low, high = _interval([law.predict(params, tokens) for law in self.resamples] or [loss])
        flops = 6 * params * tokens if flops is None else flops
        return {
            "params": params,
            "tokens": tokens,
            "flops": flops,
            "loss": loss,
            "loss_interval": [low, high],
            "compute_optimal": self.compute_optimal(flops),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "reason": self.reason,
            "law": self.law.as_dict(),
            "formula": self.law.formula,
            "intervals": {k: list(v) for k, v in self.intervals().items()},
            "confidence": CONFIDENCE,
            "bootstrap_samples": len(self.resamples),
            "seed": self.seed,
            "n_runs": self.n_runs,
            "isoflops": self.isoflops.as_dict(),
        }


def fit(runs: Sequence[dict[str, float]], bootstrap: int = 100, seed: int = 0) -> LawFit:
    """Fit runs (keys params, tokens, loss, and budget for the isoflop profiles).

    Each resample refits from the full fit's optimum; a resample too degenerate to fit (too few
    distinct sizes for the log-linear form) is drawn again, so there are always ``bootstrap`` of them.
    """
    # L-BFGS on 5 parameters: BLAS threads only contend (30x slower on a busy machine). A resample may
    # fit a term away and overflow it; _interval drops those values.
    with threadpool_limits(1), np.errstate(over="ignore", invalid="ignore"):
        return _fit_all(runs, bootstrap, seed)


def _fit_all(runs: Sequence[dict[str, float]], bootstrap: int, seed: int) -> LawFit:
    problem = chinchilla_fits(runs)
    method = "log_linear" if problem else "chinchilla"
    reason = f"log-linear fallback: {problem}" if problem else f"{len(runs)} runs, Huber on log loss"
    law = _fit(runs, method)
    rng = np.random.default_rng(seed)
    resamples: list[Law] = []
    attempts = 0
    while len(resamples) < bootstrap and attempts < 20 * bootstrap:
        attempts += 1
        sample = [runs[i] for i in rng.integers(0, len(runs), len(runs))]
        try:
            resamples.append(_fit(sample, method, start=law))
        except ValueError:
            continue
    isoflops = fit_isoflops(runs) if all("budget" in r for r in runs) else IsoflopFit((), None, None)
    return LawFit(law, method, reason, tuple(resamples), isoflops, len(runs), seed)
