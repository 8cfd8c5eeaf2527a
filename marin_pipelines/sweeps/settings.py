"""How a sweep searches: the number of trials, the sampler, the pruner, the seed and the metric (plain
pydantic: an experiment's sweep step and the command line give the same fields)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from marin_pipelines.train.reporting import REPORTED_METRICS, VALIDATION_BATCHES

REPORTS_PER_RUN = 10  # where report_every is not given: a report every tenth of the run


class SweepSettings(BaseModel):
    """A sweep's search. Every trial counts towards ``trials``: complete, pruned or failed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trials: int = Field(gt=0, description="trials to finish (complete, pruned or failed); more continues it")
    sampler: Literal["tpe", "random", "grid"] = Field(
        "tpe", description="tpe: Bayesian (Optuna's TPE); random; grid: every point of the space's grid"
    )
    pruner: Literal["hyperband", "median", "none"] = Field(
        "hyperband",
        description="hyperband: successive halving over brackets of report steps; median: stop a trial whose "
        "best report is worse than the median of earlier trials at that step; none: every trial runs out",
    )
    seed: int = Field(
        0, ge=0, description="of the sampler: trial n is drawn from (seed, n) and the trials before"
    )
    metric: str = Field(
        "val_loss", description=f"what trials are ranked by (lower is better): {REPORTED_METRICS}"
    )
    report_every: int | None = Field(
        None, gt=0, description=f"steps between reports; None: a tenth of the run ({REPORTS_PER_RUN} reports)"
    )
    validation_batches: int = Field(VALIDATION_BATCHES, gt=0, description="batches of each validation report")
    startup_trials: int = Field(
        5,
        ge=0,
        description="trials drawn at random before TPE models the space, and finished before the median "
        "pruner compares (Optuna's MedianPruner default; TPE's own, 10, is most of a small sweep)",
    )

    @field_validator("metric")
    @classmethod
    def _reported(cls, metric: str) -> str:
        if metric not in REPORTED_METRICS:
            raise ValueError(f"no trial reports {metric!r}; trials report {', '.join(REPORTED_METRICS)}")
        return metric

    def reports_every(self, steps: int) -> int:
        """Steps between reports in a run of ``steps``."""
        return self.report_every or max(1, steps // REPORTS_PER_RUN)
