"""AdamW, AdamH and Muon each tuned before they are compared: ``optimizer_ablation``'s runs at two budgets,
each optimiser's learning rate (AdamW's weight decay too; AdamH's angular and Adam rates) searched by TPE with
Hyperband, then each trained at its best and set beside the ablation's untuned arms. Compared at untuned
settings, optimisers rank as their defaults happen to suit the model (Marin's "Fantastic pretraining
optimizers"): the question is whether the ranking holds once each is tuned."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo, optimizer_ablation
from marin_pipelines.experiments.defaults import Claim, compare, evaluate, sweep, variant

LOG = {"log": True}
SPACES = {  # around each arm's setting in optimizer_ablation, a decade and more each way
    "adamw": {
        "train.learning_rate": {"low": 1e-3, "high": 1e-1, **LOG},
        "train.weight_decay": {"low": 0.0, "high": 0.3},
    },
    "adamh": {
        "train.learning_rate": {"low": 1e-3, "high": 1e-1, **LOG},
        "train.adam_learning_rate": {"low": 1e-2, "high": 1.0, **LOG},
    },
    "muon": {"train.learning_rate": {"low": 1e-3, "high": 1e-1, **LOG}},
}
TRIALS = 8  # each: TPE's first 3 random, Hyperband stopping the worst early

sweeps = {
    f"{optimizer}_{label}": sweep(
        f"optimizer_sweep/sweep_{optimizer}_{label}",
        base=optimizer_ablation.evaluations[f"{optimizer}_{label}"].inputs["checkpoint"],
        space=SPACES[optimizer],
        trials=TRIALS,
        startup_trials=3,
    )
    for label in optimizer_ablation.BUDGETS
    for optimizer in optimizer_ablation.OPTIMIZERS
}
tuned = {
    f"{arm}_tuned": evaluate(
        f"optimizer_sweep/eval_{arm}_tuned",
        variant(found.base, f"optimizer_sweep/checkpoint_{arm}_tuned", best_of=found),
        evals=demo.EVALS,
    )
    for arm, found in sweeps.items()
}

optimizer_sweep = Experiment(
    "optimizer_sweep",
    steps=[
        compare(
            "optimizer_sweep/comparison",
            {**tuned, **optimizer_ablation.evaluations},
            hypothesis="Tuned, Muon and AdamH each end within 1% of tuned AdamW's validation loss at both "
            "budgets, as optimizer_ablation found them untuned; the ranking holds.",
            metrics=["own-data validation loss"],
            claims=[
                Claim(f"{arm}_{label}_tuned", "same", f"adamw_{label}_tuned")
                for arm in ("muon", "adamh")
                for label in optimizer_ablation.BUDGETS
            ],
            tolerance=0.01,
        )
    ],
    description="AdamW, AdamH and Muon tuned (TPE + Hyperband) at 2e11 and 8e11 FLOPs, then compared.",
)
