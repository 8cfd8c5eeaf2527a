import pytest

from marin_pipelines.experiment import STAGES, Experiment
from marin_pipelines.experiments.demo import demo


def upstream_of(stage: str) -> set[str]:
    seen, todo = set(), [stage]
    while todo:
        for dep in STAGES[todo.pop()].deps:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_prediction_never_depends_on_the_run_it_predicts():
    assert not {"checkpoint", "eval_results"} & upstream_of("scaling_prediction")
    assert {"scaling_prediction", "eval_results"} <= upstream_of("scaling_law")


def test_a_new_rung_repredicts_without_retraining_the_target():
    base = demo()
    ladder = {**base.ladder.model_dump(), "budgets": [*base.ladder.budgets, 8e11]}
    more = Experiment.build(**{**base.model_dump(), "ladder": ladder})
    assert more.versions["scaling_prediction"] != base.versions["scaling_prediction"]
    assert more.versions["checkpoint"] == base.versions["checkpoint"]
    rule = Experiment.build(**{**base.model_dump(), "ladder": {**ladder, "batch_size": 4}})
    assert rule.versions["checkpoint"] != base.versions["checkpoint"]  # the rule trains the target too


def test_the_demo_target_is_ten_times_the_largest_rung():
    experiment = demo()
    model, train = experiment.main_run(vocab_size=2048)
    assert experiment.ladder.target_budget >= 10 * max(experiment.ladder.budgets)
    spent = train.steps * train.batch_size * model.seq_len * model.flops_per_token()
    assert spent == pytest.approx(experiment.ladder.target_budget, rel=0.01)
    assert (train.batch_size, train.learning_rate) == (
        experiment.ladder.batch_size,
        experiment.ladder.learning_rate,
    )
    without = Experiment.build(**{**experiment.model_dump(), "ladder": {"target_budget": None}})
    assert without.main_run(2048)[1] == experiment.train and without.target is None
