"""The scaling law fitted over the ladder's evaluations, checked against the experiment's main run."""

from __future__ import annotations

import json

from dagster import AssetsDefinition

from marin_pipelines.assets.stage import stage_asset
from marin_pipelines.experiment import Experiment
from marin_pipelines.scaling.scaling_law import fit_scaling_law, plot_scaling_law
from marin_pipelines.store import Artifact, PendingArtifact

PLOT = "scaling_law.png"


def _run(name: str, evals: Artifact) -> dict:
    m = evals.metadata
    return {
        "run": name,
        "params": m["params"],
        "tokens": m["train_tokens"],
        "flops": m["flops"],
        "loss": m["loss"],
    }


def scaling_assets(experiment: Experiment) -> list[AssetsDefinition]:
    @stage_asset(experiment, "scaling_law", group="scaling", ins=("ladder_eval_results", "eval_results"))
    def scaling_law(
        out: PendingArtifact, ladder_eval_results: dict[str, Artifact], eval_results: Artifact
    ) -> None:
        """L(N, D) fitted over the ladder's validation losses, and its prediction for the main run."""
        runs = [_run(key, evals) for key, evals in sorted(ladder_eval_results.items())]
        law = fit_scaling_law(runs)
        main = _run("checkpoint", eval_results)
        predicted = law.predict(main["params"], main["tokens"])
        prediction = {
            **main,
            "predicted_loss": predicted,
            "relative_error": (predicted - main["loss"]) / main["loss"],
        }
        plot_scaling_law(
            runs, law, out.path / PLOT, predictions=[(main["params"], main["tokens"], main["flops"])]
        )
        (out.path / "scaling_law.json").write_text(
            json.dumps({"law": law.as_dict(), "runs": runs, "main_run": prediction}, indent=2)
        )
        out.metadata.update(law.as_dict())
        out.metadata.update(runs=runs, main_run=prediction, plots={"scaling_law": PLOT})

    return [scaling_law]
