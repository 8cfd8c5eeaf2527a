"""AdamW vs AdamH vs Muon on the recipe's runs at two budgets. AdamW and Muon share the recipe's learning
rate (Muon reuses it through its RMS matching, train/optimizer.py); AdamH reads its learning rate as a
relative step per update and gives the leaves off its spheres (norm scales) their own Adam learning rate, so
it gets its own pair, the best of a sweep at 2e11 FLOPs (own-data validation loss; reference angular rate
and Adam rate): 0.03 and Levanter's 6e-4: 6.90, 3e-3: 6.62, 1e-2: 6.00, 3e-2: 4.74, 0.1: 3.92, 0.3: 3.82,
1.0: 3.83; 0.1 and 0.1: 4.11; 0.02, 0.01, 0.006, 0.003 with 0.3: 3.74, 3.70, 3.80, 4.11; 0.01 and 1.0:
3.70. On these 2-layer models every matrix keeps its initial norm, so the norm scales alone set the
logits' scale, and they want a large step (before issue 48 they moved at the angular rate, which hid it).
Every data step is the demo's; only the optimiser differs."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import Claim, compare, evaluate, variant

BUDGETS = {"2e11": 2e11, "8e11": 8e11}
OPTIMIZERS = {  # the recipe's fields for each arm
    "adamw": {"optimizer": "adamw"},
    "adamh": {"optimizer": "adamh", "learning_rate": 0.01, "max_learning_rate": 1.0},  # a relative step
    "muon": {"optimizer": "muon"},
}
TRAIN = {"adamh": {"adam_learning_rate": 0.3}}  # the sweep's (above); unscaled by the recipe

evaluations = {
    f"{optimizer}_{label}": evaluate(
        f"optimizer_ablation/eval_{optimizer}_{label}",
        variant(
            demo.target.checkpoint,
            f"optimizer_ablation/checkpoint_{optimizer}_{label}",
            target={"target_budget": budget, "recipe": recipe},
            train=TRAIN.get(optimizer, {}),
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
            "loss at both budgets; AdamH, at its own swept learning rates (angular and Adam) and without a "
            "weight decay to tune, too.",
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
