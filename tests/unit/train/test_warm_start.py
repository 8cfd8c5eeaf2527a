"""Warm starts across an architecture change: QK-norm added to a running model with its optimiser state kept,
experts added to an MoE, the load lists, the re-warmed schedule, the errors, and an exact resume; a launched
warm start refused before its run folder records anything."""

import json
import shutil

import numpy as np
import pytest
from flax import nnx
from resumed import assert_resumes_bit_identically

from marin_pipelines.train.checkpoint import Checkpoints, flatten, params_sha256
from marin_pipelines.train.launch_config import TrainLaunch
from marin_pipelines.train.launched import train_launched
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.moe import MoEConfig
from marin_pipelines.train.optimizer import make_optimizer
from marin_pipelines.train.run_config import RunConfig
from marin_pipelines.train.run_inputs import INPUTS_FILE, OtherTokenizer
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import _initial_state, train
from marin_pipelines.train.warm_start import check_base, warm_state

MODEL = LlamaConfig(vocab_size=32, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
RUN = TrainConfig(
    steps=20, batch_size=8, learning_rate=1e-2, warmup_steps=2, checkpoint_every=10, peak_flops=1e10
)
PATTERN = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7])


def batches(step: int) -> np.ndarray:
    offsets = np.random.default_rng(step).integers(0, len(PATTERN), RUN.batch_size)
    return np.stack([np.resize(np.roll(PATTERN, -o), MODEL.seq_len + 1) for o in offsets])


def metrics(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("base")
    train(MODEL, RUN, batches, out, progress=False)
    return out


def saved(out) -> tuple[dict, dict]:
    with Checkpoints(out / "checkpoints") as checkpoints:
        saved = checkpoints.restore_flat(checkpoints.latest_step())
        return saved["params"], saved["state"]


def test_qk_norm_warm_start_keeps_every_matching_weight_and_moment_and_rewarms(base, tmp_path):
    qk = MODEL.model_copy(update={"qk_norm": True})
    check_base(base, qk, RUN, optimizer=True)  # what a launched run checks before it records anything
    fresh = _initial_state(Llama(qk, nnx.Rngs(0)), make_optimizer(RUN), RUN)
    state, record = warm_state(fresh, base, optimizer=True, optimizer_name="adamw")
    base_params, base_state = saved(base)
    assert record["dir"] == str(base) and record["step"] == 20
    assert record["params_sha256"] == params_sha256(base_params)
    assert record["new"] == [f"blocks.{i}.attn.{n}.scale" for i in range(2) for n in ("k_norm", "q_norm")]
    assert sorted(record["loaded"]) == sorted(base_params) and record["dropped"] == record["widened"] == []
    assert record["optimizer"]["loaded"] > 2 * len(base_params) and record["optimizer"]["dropped"] == 0
    params, opt_state = flatten(state["params"]), flatten({"opt_state": state["opt_state"]})
    for name, value in base_params.items():
        np.testing.assert_array_equal(params[name], value)
    np.testing.assert_array_equal(params["blocks.0.attn.q_norm.scale"], 1.0)  # new: as initialised
    for moment in ("mu", "nu"):
        name = f"opt_state.1.0.{moment}.blocks.0.attn.wq.kernel"
        np.testing.assert_array_equal(opt_state[name], base_state[name])
        np.testing.assert_array_equal(opt_state[f"opt_state.1.0.{moment}.blocks.0.attn.q_norm.scale"], 0.0)
    assert (
        base_state["opt_state.1.0.count"] == 20 and opt_state["opt_state.1.0.count"] == 20
    )  # bias correction
    assert (
        base_state["opt_state.1.2.count"] == 20 and opt_state["opt_state.1.2.count"] == 0
    )  # schedule restarts

    continued = RUN.model_copy(update={"steps": 2})
    summary = train(
        qk, continued, batches, tmp_path, progress=False, warm_start=base, warm_start_optimizer=True
    )
    assert summary["warm_start"] == record
    # the model continues where the base was, far below a fresh start
    assert metrics(tmp_path)[0]["loss"] < 0.5 * metrics(base)[0]["loss"]


def test_more_experts_take_the_base_experts_first(tmp_path):
    two = MODEL.model_copy(update={"moe": MoEConfig(experts=2, top_k=1, dropless=True)})
    four = MODEL.model_copy(update={"moe": MoEConfig(experts=4, top_k=1, dropless=True)})
    train(two, RUN.model_copy(update={"steps": 4}), batches, tmp_path / "two", progress=False)
    still = RUN.model_copy(update={"steps": 1, "warmup_steps": 1, "learning_rate": 1e-9})
    summary = train(four, still, batches, tmp_path / "four", progress=False, warm_start=tmp_path / "two")
    record = summary["warm_start"]
    assert {"blocks.0.mlp.w_gate", "blocks.0.mlp.router.kernel", "blocks.1.mlp.router_bias"} <= set(
        record["widened"]
    )
    assert record["optimizer"] == "fresh" and record["new"] == record["dropped"] == []
    base, grown = saved(tmp_path / "two")[0], saved(tmp_path / "four")[0]
    assert grown["blocks.0.mlp.w_gate"].shape == (4, 32, 64)
    np.testing.assert_allclose(grown["blocks.0.mlp.w_gate"][:2], base["blocks.0.mlp.w_gate"], atol=1e-6)
    np.testing.assert_allclose(
        grown["blocks.0.mlp.router.kernel"][:, :2], base["blocks.0.mlp.router.kernel"], atol=1e-6
    )
    new_experts = grown["blocks.0.mlp.w_gate"][2:]
    assert 0.01 < new_experts.std() < 0.03  # initialised (std 0.02), not copied, not zero


def test_a_parameter_that_changes_shape_is_named(base, tmp_path):
    wider = MODEL.model_copy(update={"d_ff": 96})
    with pytest.raises(ValueError, match=r"blocks\.0\.mlp\.w_down\.kernel has shape \[64, 32\] in the base"):
        train(wider, RUN, batches, tmp_path, progress=False, warm_start=base)


def test_optimizer_state_loads_only_into_the_same_optimizer(base, tmp_path):
    muon = RUN.model_copy(update={"optimizer": "muon", "steps": 2, "warmup_steps": 1})
    with pytest.raises(ValueError, match="the base trained with adamw and this run uses muon"):
        train(
            MODEL,
            muon,
            batches,
            tmp_path / "kept",
            progress=False,
            warm_start=base,
            warm_start_optimizer=True,
        )
    summary = train(MODEL, muon, batches, tmp_path / "fresh", progress=False, warm_start=base)
    assert summary["warm_start"]["optimizer"] == "fresh" and summary["warm_start"]["new"] == []


def test_a_warm_started_run_resumes_bit_identically(base, tmp_path):
    qk = MODEL.model_copy(update={"qk_norm": True})
    kwargs = dict(warm_start=base, warm_start_optimizer=True)
    whole, resumed = assert_resumes_bit_identically(qk, RUN, batches, tmp_path, **kwargs)
    assert resumed["resumed_from_step"] == 10 and resumed["warm_start"] == whole["warm_start"]
    assert [m["lr"] for m in metrics(tmp_path / "whole")][:2] == pytest.approx([5e-3, 1e-2])  # re-warmed


def matrix_norms(params: dict) -> dict[str, float]:
    return {name: float(np.linalg.norm(value)) for name, value in params.items() if value.ndim >= 2}


STILL = {
    "steps": 1,
    "warmup_steps": 1,
    "learning_rate": 1e-9,
    "adam_learning_rate": 1e-9,
}  # a step that moves nothing


def test_an_adamh_warm_start_from_an_adamw_base_keeps_the_loaded_norms(base, tmp_path):
    """AdamH's spheres are the loaded matrices' norms, not those of the initialisation the load replaced."""
    adamh = RUN.model_copy(update={"optimizer": "adamh", **STILL})
    train(MODEL, adamh, batches, tmp_path, progress=False, warm_start=base)
    loaded, initialised = (
        matrix_norms(saved(base)[0]),
        matrix_norms(flatten(nnx.state(Llama(MODEL, nnx.Rngs(0))))),
    )
    assert max(abs(loaded[name] / initialised[name] - 1) for name in loaded) > 0.05  # AdamW moved them
    after = matrix_norms(saved(tmp_path)[0])
    for name, norm in loaded.items():
        assert after[name] == pytest.approx(norm, rel=1e-5), name


def test_experts_grown_under_adamh_keep_the_base_router_and_start_at_its_mean_bias(tmp_path):
    """With the optimiser's state loaded, the grown router's sphere is its own loaded norm (the base's radius
    would shrink every column); the new experts' balance bias starts at the mean of the base's."""
    three, five = (  # the grown run's one step moves neither the weights nor the bias
        MODEL.model_copy(update={"moe": MoEConfig(experts=e, top_k=1, dropless=True, bias_rate=rate)})
        for e, rate in ((3, 3e-3), (5, 0.0))
    )
    adamh = RUN.model_copy(update={"optimizer": "adamh", "learning_rate": 0.1, "steps": 6})
    train(three, adamh, batches, tmp_path / "three", progress=False)
    kwargs = dict(warm_start=tmp_path / "three", warm_start_optimizer=True)
    check_base(tmp_path / "three", five, adamh, optimizer=True)  # grown experts' leaves and radii pass
    train(five, adamh.model_copy(update=STILL), batches, tmp_path / "five", progress=False, **kwargs)
    base, grown = saved(tmp_path / "three")[0], saved(tmp_path / "five")[0]
    for layer in range(2):
        router = f"blocks.{layer}.mlp.router.kernel"
        np.testing.assert_allclose(grown[router][:, :3], base[router], rtol=1e-4, atol=1e-7)
        bias = base[f"blocks.{layer}.mlp.router_bias"]
        assert abs(bias.mean()) > 1e-3  # the balancing moved them, not evenly
        np.testing.assert_allclose(
            grown[f"blocks.{layer}.mlp.router_bias"], [*bias, bias.mean(), bias.mean()]
        )


def launch(token_cache, out, model: dict | None = None, train: dict | None = None, **warm) -> TrainLaunch:
    """A launched run of MODEL's shape (``model`` overriding) on the token cache, as `train` launches one."""
    shape = MODEL.model_dump(include={"seq_len", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"})
    fields = {"steps": 2, "batch_size": 4, "warmup_steps": 1, "checkpoint_every": 2, "peak_flops": 1e10}
    run = RunConfig(model={**shape, **(model or {})}, train={**fields, **(train or {})})
    return TrainLaunch(run=run, data=str(token_cache), out=str(out), **warm)


@pytest.fixture(scope="module")
def launched_bases(token_cache, tmp_path_factory) -> dict:
    """Two launched runs with their tokenizer: MODEL's shape and one with a wider MLP."""
    folder = tmp_path_factory.mktemp("launched_bases")
    for name, model in (("base", {}), ("wide", {"d_ff": 96})):
        train_launched(launch(token_cache, folder / name, model))
    return {name: str(folder / name) for name in ("base", "wide")}


@pytest.mark.parametrize(
    "refused, message, corrected",
    [
        ({"warm_start": "wide"}, r"w_down\.kernel has shape \[96, 32\] in the base", {"warm_start": "base"}),
        (
            {"warm_start": "base", "train": {"optimizer": "muon"}},
            "the base trained with adamw and this run uses muon",
            {"warm_start": "base", "train": {"optimizer": "muon"}, "warm_start_optimizer": False},
        ),
    ],
    ids=["shape", "optimizer"],
)
def test_a_refused_warm_start_records_nothing_and_the_corrected_rerun_runs(
    launched_bases, token_cache, tmp_path, refused, message, corrected
):
    """The base's shapes and optimiser are checked before the folder records its inputs: it recorded them
    (the refused base among them), then failed in the trainer, and the rerun from the right base was refused
    as "made from other inputs"."""
    out = tmp_path / "run"

    def attempt(change: dict) -> dict:
        return train_launched(
            launch(token_cache, out, **{**change, "warm_start": launched_bases[change["warm_start"]]})
        )

    with pytest.raises(ValueError, match=message):
        attempt(refused)
    assert not (out / INPUTS_FILE).exists() and not (out / "tokenizer.json").exists()
    assert not (out / "checkpoints").exists()
    assert attempt(corrected)["warm_start"]["dir"] == launched_bases[corrected["warm_start"]]


def test_a_base_without_its_tokenizer_is_refused_unless_that_is_meant(launched_bases, token_cache, tmp_path):
    """With no tokenizer.json beside the base its embeddings could stand for other token ids: the check was
    skipped without a word."""
    base = tmp_path / "base"
    shutil.copytree(launched_bases["base"], base)
    (base / "tokenizer.json").unlink()
    out = tmp_path / "run"
    with pytest.raises(OtherTokenizer, match=f"has no tokenizer.json \\({base}/tokenizer.json is missing\\)"):
        train_launched(launch(token_cache, out, warm_start=str(base)))
    assert not out.exists()
    summary = train_launched(launch(token_cache, out, warm_start=str(base), warm_start_other_tokenizer=True))
    record = summary["warm_start"]["other_tokenizer"]
    assert record["base"] == f"unchecked: {base}/tokenizer.json is missing"
    assert record["run"]["from"] == f"{token_cache}/tokenizer.json"
