"""Does a z-loss (PaLM's 1e-4 x mean log Z^2) change a small model's loss? The demo's target run against
the same run with z-loss on: every data step, the tokenizer, the cache and the baseline run are the demo's
own, so only one run and its evaluation are new."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import compare, evaluate, variant

with_zloss = variant(
    demo.target.checkpoint, "zloss_ablation/checkpoint_zloss_1e_4", train={"z_loss_weight": 1e-4}
)

zloss_ablation = Experiment(
    "zloss_ablation",
    steps=[
        compare(
            "zloss_ablation/comparison",
            {
                "zloss_0": demo.target.evaluation,
                "zloss_1e_4": evaluate("zloss_ablation/eval_zloss_1e_4", with_zloss, evals=demo.EVALS),
            },
            hypothesis="A z-loss of 1e-4 keeps the log-partition near 0 at no cost in loss: validation loss "
            "and bits-per-byte within 1% of the run without it.",
        )
    ],
    description="z-loss 0 vs 1e-4 on the demo's data and target run.",
)
