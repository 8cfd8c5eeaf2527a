"""A baseline run and a learning-rate ablation over the tiny pipeline's data, ending in a comparison, and a
ladder over the same data that is declared and never trained: what ``tests/e2e/test_steps.py``
materialises, and the code the UI it checks loads (``-f`` this file)."""

from dagster import Definitions
from tiny_ladder import TINY_LADDER
from tiny_pipeline import tiny_tokens

from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import compare, evaluate, isoflop_ladder, train, variant
from marin_pipelines.resources import default_resources

TRAIN = {"steps": 20, "batch_size": 8, "warmup_steps": 2, "log_every": 5}
MODEL = {"size": "nano", "seq_len": 32}

tokens = tiny_tokens()
base_run = train("small/run", tokens, model=MODEL, train=TRAIN)
base_eval = evaluate("small/eval", base_run, batch_size=8)
baseline = Experiment("small", steps=[base_eval])
hot = variant(base_run, "small_ablation/run_hot", train={"learning_rate": 1e-2})
ablation = Experiment(
    "small_ablation",
    steps=[
        compare(
            "small_ablation/comparison",
            {"base": base_eval, "hot": evaluate("small_ablation/eval_hot", hot, batch_size=8)},
            hypothesis="A hotter learning rate lowers the loss of a 20-step run.",
        )
    ],
)
ladder = Experiment(
    "small_ladder", steps=[isoflop_ladder("small_ladder", tokens, ladder=TINY_LADDER).evaluations]
)

defs = Definitions.merge(
    experiment_definitions([baseline, ablation, ladder]), Definitions(resources=default_resources())
)
