"""AdamW vs AdamH vs Muon on the recipe's runs at two budgets. AdamW and Muon share the recipe's learning
rate (Muon reuses it through its RMS matching, train/optimizer.py); AdamH reads its learning rate as a
relative step per update, so it gets its own reference, the best of a sweep at 2e11 FLOPs (peak 0.02 capped:
5.25, 0.069: 4.08, 0.23: 4.12, 0.69: 4.37 final training loss). Every data step is the demo's; only the
optimiser differs."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import Claim, compare, evaluate, variant

BUDGETS = {"2e11": 2e11, "8e11": 8e11}
OPTIMIZERS = {  # the recipe's fields for each arm
    "adamw": {"optimizer": "adamw"},
    "adamh": {"optimizer": "adamh", "learning_rate": 0.03, "max_learning_rate": 1.0},  # 10x: a relative step
    "muon": {"optimizer": "muon"},
}

evaluations = {
    f"{optimizer}_{label}": evaluate(
        f"optimizer_ablation/eval_{optimizer}_{label}",
        variant(
            demo.target.checkpoint,
            f"optimizer_ablation/checkpoint_{optimizer}_{label}",
            target={"target_budget": budget, "recipe": recipe},
        ),
        evals=demo.EVALS,
    )
    for label, budget in BUDGETS.items()
    for optimizer, recipe in OPTIMIZERS.items()
}

optimizer_ablation = Experiment(
    "optimizer_ablation",
    steps=[
        compare(
            "optimizer_ablation/comparison",
            evaluations,
            hypothesis="With the recipe's learning rate unchanged, Muon ends within 1% of AdamW's validation "
            "loss at both budgets; AdamH, at its own learning rate and without a weight decay to tune, too.",
            metrics=["own-data validation loss"],
            claims=[  # each against AdamW at its own budget
                Claim(f"{arm}_{label}", "same", f"adamw_{label}")
                for arm in ("muon", "adamh")
                for label in BUDGETS
            ],
            tolerance=0.01,  # "within 1%"
        )
    ],
    description="AdamW, AdamH and Muon on the delphi recipe's runs at 2e11 and 8e11 FLOPs.",
)
