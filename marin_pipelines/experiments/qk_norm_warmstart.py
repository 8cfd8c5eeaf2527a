"""Adding QK-norm to a running model without starting over ("no FLOP left behind", as Marin fixed a
spiking 32B run): a base run, then two continuations of it from its final checkpoint at the same budget,
one with QK-norm warm-started into it (every weight and Adam moment loaded, the norms' scales new, the
learning rate re-warmed) and one without, as the control. Every data step is the demo's."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import Claim, compare, evaluate, variant, warm_started

BUDGET = {"target_budget": 4e11}

base = variant(demo.target.checkpoint, "qk_norm_warmstart/checkpoint_base", target=BUDGET)
runs = {
    "base": base,
    "continued": warm_started(base, "qk_norm_warmstart/checkpoint_continued"),
    "continued_qk_norm": warm_started(
        base, "qk_norm_warmstart/checkpoint_continued_qk_norm", target={"recipe": {"qk_norm": True}}
    ),
}

qk_norm_warmstart = Experiment(
    "qk_norm_warmstart",
    steps=[
        compare(
            "qk_norm_warmstart/comparison",
            {
                name: evaluate(f"qk_norm_warmstart/eval_{name}", run, evals=demo.EVALS)
                for name, run in runs.items()
            },
            hypothesis="QK-norm added mid-run costs nothing: the continuation with QK-norm ends within 1% of "
            "the plain continuation's validation loss, both below the base's.",
            metrics=["own-data validation loss"],
            claims=[  # what the hypothesis is about first, then its second clause
                Claim("continued_qk_norm", "same", "continued"),
                Claim("continued", "better", "base"),
                Claim("continued_qk_norm", "better", "base"),
            ],
            tolerance=0.01,  # "within 1%"
        )
    ],
    description="A base run continued with QK-norm warm-started into it vs without: 4e11 FLOPs each of their "
    "own, the continuations 8e11 with the base's.",
)
