"""Meshes of data, expert and model axes over forced host CPU devices: the same losses as one device,
less memory per device as the shards grow, refusals that name the field, and checkpoints that resume on
another layout."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh
from pydantic import BaseModel, TypeAdapter, ValidationError
from test_checkpoint import MODEL, TRAIN, read_metrics, repeating_batches

from marin_pipelines.train.checkpoint import flatten
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.moe import MoEConfig
from marin_pipelines.train.optimizer import make_optimizer
from marin_pipelines.train.sharding import AXES, check_layout, data_mesh, state_shardings
from marin_pipelines.train.throughput import peak_operand
from marin_pipelines.train.train_config import MeshConfig, TrainConfig
from marin_pipelines.train.trainer import _initial_state, train

HERE = Path(__file__).parent
MOE = MODEL.model_copy(update={"moe": MoEConfig(experts=4, top_k=2, dropless=False)})
# 20 steps, checkpoints at 10 (where runs resume on another layout) and 20
RESUMABLE = TRAIN.model_copy(update={"steps": 20, "checkpoint_every": 10})
SINGLE_AXIS = MeshConfig()  # every device on data


def forced_devices(count: int) -> dict[str, str]:
    """The environment of a process with ``count`` CPU devices."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}"
    return {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}


def on_devices(count: int, function: str, argument: str = "") -> str:
    """What ``function(argument)`` of this module prints when called in a process with ``count`` devices."""
    script = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_sharding as t; t.{function}(sys.argv[1])"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, argument], env=forced_devices(count), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


class Run(BaseModel):
    """One training run of ``repeating_batches``, passed to a process with forced devices as JSON."""

    out: str
    model: LlamaConfig
    train: TrainConfig
    resume: tuple[str, int] | None = None  # first copy this run folder as a crash after this step left it


RUNS = TypeAdapter(list[Run])


def train_runs(runs: str) -> None:
    for run in RUNS.validate_json(runs):
        if run.resume is not None:
            copy_until(*run.resume, run.out)
        train(run.model, run.train, repeating_batches, run.out, progress=False)


def copy_until(source: str, step: int, out: str) -> None:
    """A copy of the run folder ``source`` as a crash just after its checkpoint of ``step`` would leave it."""
    shutil.copytree(source, out)
    for saved in (Path(out) / "checkpoints").iterdir():
        if saved.name.isdigit() and int(saved.name) > step:
            shutil.rmtree(saved)


def summary(out: Path) -> dict:
    return json.loads((out / "train.json").read_text())["summary"]


def losses(out: Path) -> list[float]:
    return [m["loss"] for m in read_metrics(out)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Runs of RESUMABLE on one device, on 4 (data 2 x model 2; the MoE model on data 2 x expert 2), and
    the data 2 x model 2 run resumed from step 10 on data 4 and on 2 devices (data 2)."""
    root = tmp_path_factory.mktemp("layouts")

    def run(name: str, model: LlamaConfig = MODEL, mesh: MeshConfig = SINGLE_AXIS, resume: str = "") -> Run:
        config = RESUMABLE.model_copy(update={"mesh": mesh})
        from_step = (str(root / resume), 10) if resume else None
        return Run(out=str(root / name), model=model, train=config, resume=from_step)

    train_runs(RUNS.dump_json([run("one"), run("moe_one", MOE)]).decode())
    four = [
        run("data2_model2", mesh=MeshConfig(model=2)),
        run("moe_data2_expert2", MOE, MeshConfig(expert=2)),
        run("data2_model2_then_data4", resume="data2_model2"),
    ]
    on_devices(4, "train_runs", RUNS.dump_json(four).decode())
    on_devices(
        2, "train_runs", RUNS.dump_json([run("data2_model2_then_2_devices", resume="data2_model2")]).decode()
    )
    return root


def test_model_and_expert_parallel_meshes_match_one_device(runs):
    """Splitting heads, d_ff and experts changes the order of float sums only. MoE routing stays over the
    whole batch (capacity included), as on one device: the expert axis drops no other assignments."""
    np.testing.assert_allclose(losses(runs / "data2_model2"), losses(runs / "one"), rtol=2e-4)
    np.testing.assert_allclose(losses(runs / "moe_data2_expert2"), losses(runs / "moe_one"), rtol=2e-4)
    assert summary(runs / "data2_model2")["mesh"] == {"data": 2, "expert": 1, "model": 2}
    assert summary(runs / "moe_data2_expert2")["mesh"] == {"data": 2, "expert": 2, "model": 1}
    assert losses(runs / "one")[-1] < 0.5 * losses(runs / "one")[0]


def test_a_checkpoint_resumes_on_another_layout(runs):
    """Orbax restores each array into the new layout's shardings; the steps after differ from the
    uninterrupted run's by float reduction order only."""
    uninterrupted = "data2_model2"
    for resumed, devices, meshes in [
        ("data2_model2_then_2_devices", [4, 2], [(2, 1, 2), (2, 1, 1)]),
        ("data2_model2_then_data4", [4, 4], [(2, 1, 2), (4, 1, 1)]),
    ]:
        reference, after = summary(runs / uninterrupted), summary(runs / resumed)
        assert after["resumed_from_step"] == 10
        assert after["final_loss"] == pytest.approx(reference["final_loss"], rel=0.02)
        np.testing.assert_allclose(losses(runs / resumed), losses(runs / uninterrupted), rtol=2e-3)
        assert [layout["from_step"] for layout in after["layouts"]] == [0, 10]
        assert [layout["devices"] for layout in after["layouts"]] == devices
        assert [tuple(layout["mesh"].values()) for layout in after["layouts"]] == meshes
    # the layout's fields are not a change of run; any other still is
    changed = RESUMABLE.model_copy(update={"fsdp": False, "peak_flops": 1e12, "warmup_steps": 2})
    with pytest.raises(ValueError, match=re.escape("another train config (fields ['warmup_steps'])")):
        train(MODEL, changed, repeating_batches, runs / "one", progress=False)


def place_every_optimizer(root: str) -> None:
    """Places the whole training state of each optimiser on 4 devices, the dense model on data 2 x model 2
    and the MoE on data 1 x expert 2 x model 2 (a dense model has no experts to put on an expert axis:
    ``check_layout`` refuses one); then trains AdamH's MoE two steps there. Prints the specs
    of the MoE states' expert leaves and the run's mesh and losses."""
    specs = {}
    for optimizer in ("adamw", "adamh", "muon"):
        for model, mesh in ((MODEL, MeshConfig(model=2)), (MOE, MeshConfig(expert=2, model=2))):
            config = TRAIN.model_copy(update={"optimizer": optimizer, "mesh": mesh})
            state = _initial_state(Llama(model, nnx.Rngs(0)), make_optimizer(config), config)
            placed = jax.device_put(state, state_shardings(state, data_mesh(mesh), config.fsdp))
            specs |= {
                f"{optimizer}:{name}": list(leaf.sharding.spec)
                for name, leaf in flatten(placed).items()
                if name.endswith("blocks.0.mlp.w_up")
            }
    adamh = TRAIN.model_copy(
        update={"optimizer": "adamh", "steps": 2, "warmup_steps": 1, "mesh": MeshConfig(expert=2, model=2)}
    )
    out = Path(root) / "adamh_moe"
    moe_bf16 = MOE.model_copy(update={"dtype": "bfloat16"})
    run = train(
        moe_bf16, adamh.model_copy(update={"peak_flops": None}), repeating_batches, out, progress=False
    )
    operand = peak_operand(data_mesh(adamh.mesh), "bfloat16", 64)
    peak = {
        "source": run["peak_flops_source"],
        "devices": sorted(shard.device.id for shard in operand.addressable_shards),
        "block": list(operand.addressable_shards[0].data.shape),
        "dtype": str(operand.dtype),
    }
    print(json.dumps({"specs": specs, "mesh": run["mesh"], "losses": losses(out), "peak": peak}))


@pytest.fixture(scope="module")
def placed(tmp_path_factory) -> dict:
    return json.loads(
        on_devices(4, "place_every_optimizer", str(tmp_path_factory.mktemp("placed"))).splitlines()[-1]
    )


def test_every_optimizer_places_dense_and_moe_models_on_model_and_expert_axes(placed):
    """AdamH's per-expert radius [experts, 1, 1] mirrors the expert weights' path: the model axis must not
    split its size-1 dimensions (it did: IndivisibleError), while its experts stay on the expert axis."""
    specs = placed["specs"]
    assert specs["adamh:params.blocks.0.mlp.w_up"] == ["expert", None, "model"]
    assert specs["adamh:opt_state.2.radius.blocks.0.mlp.w_up"] == ["expert", None, None]
    assert specs["muon:opt_state.1.inner_states.muon.inner_state.0.mu.blocks.0.mlp.w_up"] == [
        "expert",
        None,
        "model",
    ]
    assert placed["mesh"] == {"data": 1, "expert": 2, "model": 2}
    assert len(placed["losses"]) == 2 and all(map(math.isfinite, placed["losses"]))


def test_the_mfu_peak_is_the_meshs_in_the_runs_dtype(runs, placed):
    """Measured, every device of the mesh runs its own matmul chain at once, in the run's compute dtype (a
    bf16 run was measured against one device's float32 matmuls); configured, the per-device peak x the
    devices. The summary says which, the measured source read from the operand that was timed (its dtype
    and its devices), so a measurement of one device in float32 cannot be reported as the mesh's."""
    peak = placed["peak"]
    assert peak["source"] == "measured: bfloat16 1024x1024 matmuls on all 4 devices at once"
    assert peak["devices"] == [0, 1, 2, 3] and peak["block"] == [1, 64, 64] and peak["dtype"] == "bfloat16"
    configured = summary(runs / "data2_model2")
    assert configured["peak_flops"] == 4 * TRAIN.peak_flops
    assert configured["peak_flops_source"] == "train.peak_flops 1e+10 x 4 devices"


# data x expert x model: each mesh splits the training state into more pieces than the one before
MESHES = [(1, 1, 1), (2, 1, 1), (2, 1, 2), (2, 2, 2)]


def print_bytes_per_device(_: str) -> None:
    """Prints the bytes of a training state (a dense and an MoE layer, AdamW) on the first device of each
    of MESHES, and each leaf's PartitionSpec on the last."""
    model = MOE.model_copy(update={"moe": MoEConfig(experts=4, top_k=2, dropless=False, every=2)})
    _, params = nnx.split(Llama(model, nnx.Rngs(0)))
    state = {"params": params, "opt_state": make_optimizer(TRAIN).init(params)}
    sizes = []
    for shape in MESHES:
        mesh = Mesh(np.array(jax.devices()[: math.prod(shape)]).reshape(shape), AXES)
        shardings = state_shardings(state, mesh, fsdp=True)
        placed = jax.device_put(state, shardings)
        sizes.append(sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(placed)))
    specs = {name: list(sharding.spec) for name, sharding in flatten(shardings).items()}
    print(json.dumps({"bytes": sizes, "specs": specs}))


def test_memory_per_device_falls_as_the_shards_grow():
    measured = json.loads(on_devices(8, "print_bytes_per_device").splitlines()[-1])
    sizes, specs = measured["bytes"], measured["specs"]
    assert all(smaller < larger for larger, smaller in pairwise(sizes)), sizes
    assert specs["params.blocks.0.attn.wq.kernel"] == ["data", "model"]  # heads over model
    assert specs["params.blocks.0.attn.wo.kernel"] == ["model", "data"]
    assert specs["params.blocks.0.mlp.w_up.kernel"] == ["data", "model"]  # d_ff over model
    assert specs["params.blocks.0.mlp.w_down.kernel"] == ["model", "data"]
    assert specs["params.blocks.1.mlp.w_gate"] == ["expert", "data", "model"]  # experts, then d_ff
    assert specs["params.blocks.1.mlp.w_down"] == ["expert", "model", "data"]
    assert specs["params.blocks.1.mlp.router.kernel"] == ["data", None]  # FSDP only
    assert specs["params.embed.embedding"] == ["data", None]
    params = {
        name.removeprefix("params."): spec for name, spec in specs.items() if name.startswith("params.")
    }
    mirrors = {name: spec for name, spec in specs.items() if name.startswith("opt_state.")}
    matched = [(name, param) for name in mirrors for param in params if name.endswith("." + param)]
    assert len(matched) == 2 * len(params)  # Adam's mu and nu
    assert all(specs[name] == params[param] for name, param in matched)


@pytest.mark.parametrize(
    ("model", "devices", "mesh", "message"),
    [
        (MODEL, 4, {"model": 3}, "train.mesh: 4 devices cannot be split into model 3 x expert 1"),
        (MODEL, 4, {"expert": 2}, "train.mesh.expert: 2 needs a mixture-of-experts model (model.moe)"),
        (MOE, 3, {"expert": 3}, "train.mesh.expert: 3 does not divide model.moe.experts (4)"),
        (MODEL, 6, {"model": 3}, "train.mesh.model: 3 does not divide model.n_heads (4)"),
        (MODEL, 4, {"model": 4}, "train.mesh.model: 4 does not divide model.n_kv_heads (2)"),
        (
            MODEL.model_copy(update={"d_ff": 65}),
            2,
            {"model": 2},
            "train.mesh.model: 2 does not divide model.d_ff (65)",
        ),
        (
            MODEL.model_copy(update={"moe": MoEConfig(experts=4, top_k=2, d_ff=33)}),
            2,
            {"model": 2},
            "train.mesh.model: 2 does not divide model.moe.d_ff (33)",
        ),
        (
            MOE,
            12,
            {"expert": 2},
            "train.batch_size: 8 rows cannot be split into the batch's 12 shards (data 6 x expert 2); "
            "use a multiple of 12",
        ),
    ],
)
def test_impossible_meshes_are_refused_naming_the_field(model, devices, mesh, message):
    config = TRAIN.model_copy(update={"mesh": MeshConfig(**mesh)})
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_layout(config, model, devices)


def test_a_run_on_an_impossible_mesh_is_refused_before_anything_is_built(tmp_path):
    with pytest.raises(ValueError, match="train.mesh: 1 devices cannot be split into model 2 x expert 1"):
        train(
            MODEL, TRAIN.model_copy(update={"mesh": MeshConfig(model=2)}), repeating_batches, tmp_path / "o"
        )
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValidationError, match=r"mesh.model\n.*greater than or equal to 1"):
        TrainConfig(mesh={"model": 0})
    with pytest.raises(ValidationError, match=r"mesh.experts\n.*Extra inputs"):
        TrainConfig(mesh={"experts": 2})
