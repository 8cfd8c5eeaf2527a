"""Mixture of experts vs dense at equal compute: the demo's recipe run at two budgets, dense and with every
MLP a mixture of 4 SwiGLU experts (each token through 1, capacity 1.25, auxiliary-loss-free balancing).
The recipe counts active parameters, so both arms get the same shape, the same tokens and the same FLOPs
per token (the router adds 0.1%); the MoE holds 4x the MLP weights. Every data step is the demo's."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import Claim, compare, evaluate, variant
from marin_pipelines.scaling.seed_noise import MEASURED_SEED_NOISE

BUDGETS = {"2e11": 2e11, "8e11": 8e11}
MOE = {"experts": 4, "top_k": 1, "capacity_factor": 1.25}

evaluations = {}
for label, budget in BUDGETS.items():
    for arm, recipe in (("dense", {}), ("moe", {"moe": MOE})):
        run = variant(
            demo.target.checkpoint,
            f"moe_vs_dense/checkpoint_{arm}_{label}",
            target={"target_budget": budget, "recipe": recipe},
        )
        evaluations[f"{arm}_{label}"] = evaluate(f"moe_vs_dense/eval_{arm}_{label}", run, evals=demo.EVALS)

moe_vs_dense = Experiment(
    "moe_vs_dense",
    steps=[
        compare(
            "moe_vs_dense/comparison",
            evaluations,
            hypothesis="At equal active compute an MoE of 4 experts (top-1) reaches a lower validation loss "
            "than the dense model at both budgets, and its advantage does not shrink with the budget.",
            metrics=["own-data validation loss"],
            # each at its own budget; no tolerance is stated and no seeds run: the project's measured seed
            # noise decides what is the same
            claims=[Claim(f"moe_{label}", "better", f"dense_{label}") for label in BUDGETS],
            noise=MEASURED_SEED_NOISE,
        )
    ],
    description="Dense vs a 4-expert top-1 MoE at equal active FLOPs: the recipe's runs at 2e11 and 8e11.",
)
