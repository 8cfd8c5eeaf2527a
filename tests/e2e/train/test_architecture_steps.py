"""The step helpers and the Dagster assets take the new architectures: an MoE trained by Muon, then QK-norm
warm-started into it, materialised over the tiny pipeline's data."""

import pytest
from dagster import DagsterInstance
from tiny_pipeline import MODEL, TRAIN, tiny_tokens

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import train, warm_started
from marin_pipelines.steps import StepError
from marin_pipelines.store import ArtifactStore

MOE = {"experts": 4, "top_k": 1}


def test_an_moe_muon_run_then_qk_norm_warm_started_into_it(tiny_store):
    tokens = tiny_tokens()
    base = train(
        "arch/moe_muon",
        tokens,
        model={**MODEL, "moe": MOE},
        train={**TRAIN, "optimizer": "muon", "steps": 8},
    )
    continued = warm_started(base, "arch/moe_muon_qk_norm", model={"qk_norm": True}, train={"steps": 4})
    assert continued.inputs["warm_start"] is base and continued.config.model.qk_norm
    result = materialize_experiment(
        Experiment("arch", steps=[continued]), tiny_store, DagsterInstance.ephemeral()
    )
    assert result.checks_passed
    store = ArtifactStore(tiny_store)
    trained = store.get(base.key, base.version).metadata
    assert trained["active_params"] < trained["params"]
    warm = store.get(continued.key, continued.version).metadata
    record = warm["warm_start"]
    assert record["step"] == 8 and record["params_sha256"] and record["dropped"] == []
    assert sorted(record["new"])[:2] == ["blocks.0.attn.k_norm.scale", "blocks.0.attn.q_norm.scale"]
    assert record["optimizer"]["loaded"] > 0 and warm["resumed_from_step"] == 0


def test_warm_started_takes_a_training_step():
    tokens = tiny_tokens()
    with pytest.raises(StepError, match="base must be a training step"):
        warm_started(tokens.cache, "arch/nonsense")
    with pytest.raises(StepError, match="model.moe"):
        train("arch/bad", tokens, model={**MODEL, "moe": {"experts": 4, "top_k": 8}})
