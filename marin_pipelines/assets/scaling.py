"""The scaling law fitted over the ladder's evaluations."""

from __future__ import annotations

import json

from dagster import AssetsDefinition

from marin_pipelines.assets.stage import stage_asset
from marin_pipelines.experiment import Experiment
from marin_pipelines.scaling.scaling_law import fit_scaling_law, plot_scaling_law
from marin_pipelines.store import Artifact, PendingArtifact

PLOT = "scaling_law.png"


def scaling_assets(experiment: Experiment) -> list[AssetsDefinition]:
    @stage_asset(experiment, "scaling_law", group="scaling", ins=("ladder_eval_results",))
    def scaling_law(out: PendingArtifact, ladder_eval_results: dict[str, Artifact]) -> None:
        """L(N, D) fitted over the ladder's validation losses, with a prediction for a larger run."""
        runs = [
            {"partition": key, "params": r.metadata["params"], "tokens": r.metadata["train_tokens"],
             "flops": 6 * r.metadata["params"] * r.metadata["train_tokens"], "loss": r.metadata["loss"]}
            for key, r in sorted(ladder_eval_results.items())
        ]
        law = fit_scaling_law(runs)
        biggest = max(runs, key=lambda r: r["flops"])
        target = (biggest["params"], 10 * biggest["tokens"])
        prediction = {"params": target[0], "tokens": target[1], "loss": law.predict(*target)}
        plot_scaling_law(runs, law, out.path / PLOT, predictions=[target])
        result = {"law": law.as_dict(), "runs": runs, "prediction_10x_tokens": prediction}
        (out.path / "scaling_law.json").write_text(json.dumps(result, indent=2))
        out.metadata.update(result["law"], runs=runs, prediction=prediction, plots={"scaling_law": PLOT})

    return [scaling_law]
