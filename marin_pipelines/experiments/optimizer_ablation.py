"""AdamW vs AdamH vs Muon on the recipe's runs at two budgets. The recipe sets one learning rate per run
for all three: AdamW's, which AdamH reads as a relative step per update and Muon reuses through its RMS
matching (train/optimizer.py). Every data step is the demo's; only the optimiser differs."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import compare, evaluate, variant

BUDGETS = {"2e11": 2e11, "8e11": 8e11}
OPTIMIZERS = ("adamw", "adamh", "muon")

evaluations = {
    f"{optimizer}_{label}": evaluate(
        f"optimizer_ablation/eval_{optimizer}_{label}",
        variant(
            demo.target.checkpoint,
            f"optimizer_ablation/checkpoint_{optimizer}_{label}",
            target={"target_budget": budget, "recipe": {"optimizer": optimizer}},
        ),
        evals=demo.EVALS,
    )
    for label, budget in BUDGETS.items()
    for optimizer in OPTIMIZERS
}

optimizer_ablation = Experiment(
    "optimizer_ablation",
    steps=[
        compare(
            "optimizer_ablation/comparison",
            evaluations,
            hypothesis="With the recipe's learning rate unchanged, Muon matches or beats AdamW's validation "
            "loss at both budgets, and AdamH does too without a weight decay to tune.",
        )
    ],
    description="AdamW, AdamH and Muon on the delphi recipe's runs at 2e11 and 8e11 FLOPs.",
)
