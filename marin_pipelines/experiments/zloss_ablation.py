"""Does a z-loss (PaLM's 1e-4 x mean log Z^2) change a small model's loss? The demo's target run, taken down
to one of the ladder's budgets (runs of seconds, where the target's are minutes), with z-loss off and on:
every data step, the tokenizer and the caches are the demo's own, so only the two runs and their evaluations
are new."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import Claim, compare, evaluate, variant

BUDGET = {"target_budget": 2e11}  # the recipe's run at this budget, as the demo's is at its own

runs = {
    name: variant(demo.target.checkpoint, f"zloss_ablation/checkpoint_{name}", target=BUDGET, train=train)
    for name, train in (("zloss_0", {}), ("zloss_1e_4", {"z_loss_weight": 1e-4}))
}

zloss_ablation = Experiment(
    "zloss_ablation",
    steps=[
        compare(
            "zloss_ablation/comparison",
            {
                name: evaluate(f"zloss_ablation/eval_{name}", run, evals=demo.EVALS)
                for name, run in runs.items()
            },
            hypothesis="A z-loss of 1e-4 keeps the log-partition near 0 at no cost in loss: validation loss "
            "and bits-per-byte within 1% of the run without it.",
            metrics=["own-data validation loss", "own-data bits-per-byte"],
            claims=[Claim("zloss_1e_4", "same", "zloss_0")],
            tolerance=0.01,  # "within 1%"
        )
    ],
    description="z-loss 0 vs 1e-4 on the demo's data: the recipe's run at 2e11 FLOPs.",
)
