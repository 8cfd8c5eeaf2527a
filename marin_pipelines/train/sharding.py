"""The device mesh and where each array lives on it: data, expert and model parallelism, and FSDP.

Every device of every process forms one mesh of three named axes, ``data x expert x model``
(``train.mesh`` sets ``model`` and ``expert``; ``data`` takes the devices that remain). Devices are
ordered by process with ``model`` the innermost axis, so a model group sits in one process where the
devices per process allow.

- **The batch** is split along its rows over ``data`` and ``expert`` together (expert-parallel devices
  take their share of the batch, as in GShard) and replicated over ``model``. In a run of several
  processes each process's devices hold one contiguous block of rows (``process_rows``), which that
  process alone reads.
- **Parameters** are split by the end of their path name (Megatron-style, ``RULES``): attention
  ``wq``/``wk``/``wv`` kernels ``[d_model, heads x head_dim]`` split their output (heads) over ``model``,
  ``wo`` its input; SwiGLU ``w_gate``/``w_up`` kernels ``[d_model, d_ff]`` split d_ff (output) and
  ``w_down`` d_ff (input) over ``model``, shared experts too; routed MoE experts ``[experts, d_in, d_out]``
  split the experts over ``expert`` and d_ff over ``model``. Embeddings, LM head, norms, the router and
  its balance bias follow no rule. An axis of size 1 splits nothing, and a dimension an axis does not
  divide stays whole: AdamH's per-expert radius ``[experts, 1, 1]`` mirrors the expert weights' path and
  splits its experts only (``check_layout`` has already refused parameters the mesh cannot split).
- **FSDP** (``fsdp: true``, ZeRO-3 as Levanter) then splits each array's largest remaining dimension
  that ``data`` divides over ``data``; without it the rest is replicated. XLA inserts the all-gathers,
  all-reduces and reduce-scatters.
- **MoE routing** stays over the whole batch: one device's result, each expert's capacity included, on
  any mesh (XLA moves the tokens to their experts' devices). Routing each batch shard's tokens apart
  (GShard's groups) would move fewer tokens but make the dropped assignments depend on the layout.
- **Optimiser state** leaves end with the path of the parameter they mirror
  (``opt_state.1.0.mu.blocks.0.attn.wq.kernel``), so the same rules give them the parameter's sharding:
  memory per device falls with every axis.

With ``model = expert = 1`` the mesh is the single ``data`` axis of data parallelism + FSDP, sharded as
it always was. ``check_layout`` refuses, before anything is built, a mesh the devices, the batch or the
model cannot be split into.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from marin_pipelines.train.checkpoint import leaf_name
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.train_config import MeshConfig, TrainConfig

DATA, EXPERT, MODEL = AXES = ("data", "expert", "model")  # outermost to innermost

# (the end of a leaf's path name, the mesh axis of each of its dimensions); the first match applies.
RULES: list[tuple[re.Pattern[str], tuple[str | None, ...]]] = [
    (re.compile(r"attn\.w[qkv]\.kernel$"), (None, MODEL)),  # [d_model, heads x head_dim]
    (re.compile(r"attn\.wo\.kernel$"), (MODEL, None)),  # [heads x head_dim, d_model]
    (re.compile(r"w_(gate|up)\.kernel$"), (None, MODEL)),  # dense and shared SwiGLU [d_model, d_ff]
    (re.compile(r"w_down\.kernel$"), (MODEL, None)),  # [d_ff, d_model]
    (re.compile(r"mlp\.w_(gate|up)$"), (EXPERT, None, MODEL)),  # routed experts [experts, d_model, d_ff]
    (re.compile(r"mlp\.w_down$"), (EXPERT, MODEL, None)),  # [experts, d_ff, d_model]
]


def check_layout(config: TrainConfig, model: LlamaConfig, devices: int) -> None:
    """Refuse a mesh that ``devices``, the batch or the model cannot be split into, naming the field."""
    mesh = config.mesh
    if devices % (mesh.model * mesh.expert):
        raise ValueError(
            f"train.mesh: {devices} devices cannot be split into model {mesh.model} x expert {mesh.expert}"
        )
    if mesh.expert > 1 and model.moe is None:
        raise ValueError(f"train.mesh.expert: {mesh.expert} needs a mixture-of-experts model (model.moe)")
    split = {"model.n_heads": model.n_heads, "model.n_kv_heads": model.n_kv_heads}
    if any(not model.is_moe_layer(layer) for layer in range(model.n_layers)):
        split["model.d_ff"] = model.d_ff
    if model.moe is not None:
        split["model.moe.d_ff"] = model.moe.expert_d_ff(model.d_ff)
        if model.moe.experts % mesh.expert:
            raise ValueError(
                f"train.mesh.expert: {mesh.expert} does not divide model.moe.experts ({model.moe.experts})"
            )
    for field, size in split.items():
        if size % mesh.model:
            raise ValueError(f"train.mesh.model: {mesh.model} does not divide {field} ({size})")
    shards = devices // mesh.model  # the batch's: data x expert
    if config.batch_size % shards:
        raise ValueError(
            f"train.batch_size: {config.batch_size} rows cannot be split into the batch's {shards} shards "
            f"(data {shards // mesh.expert} x expert {mesh.expert}); use a multiple of {shards}"
        )


def data_mesh(config: MeshConfig | None = None) -> Mesh:
    """Every device of every process, ordered by process, as ``data x expert x model`` (by default all on
    ``data``)."""
    config = config or MeshConfig()
    devices = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))
    return Mesh(devices.reshape(-1, config.expert, config.model), AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows over ``data`` and ``expert``, replicated over ``model``."""
    return NamedSharding(mesh, PartitionSpec((DATA, EXPERT)))


def process_rows(sharding: NamedSharding, shape: tuple[int, ...]) -> slice:
    """The rows of a global batch of ``shape`` that this process's devices hold: one contiguous block."""
    blocks = sorted(
        index[0].indices(shape[0])[:2] for index in sharding.addressable_devices_indices_map(shape).values()
    )
    start, stop = blocks[0][0], blocks[-1][1]
    if sum(high - low for low, high in set(blocks)) != stop - start:
        raise ValueError(f"this process's devices hold rows {blocks} of the batch: not one block")
    return slice(start, stop)


def leaf_spec(name: str, shape: tuple[int, ...], mesh: Mesh, fsdp: bool) -> PartitionSpec:
    """Where the array called ``name`` lives: the first matching rule's axes, then FSDP over ``data``."""
    spec: list[str | None] = [None] * len(shape)
    for pattern, axes in RULES:
        if pattern.search(name) and len(axes) == len(shape):
            spec = [
                axis if axis is not None and mesh.shape[axis] > 1 and size % mesh.shape[axis] == 0 else None
                for axis, size in zip(axes, shape, strict=True)
            ]
            break
    data = mesh.shape[DATA]
    free = [dim for dim, size in enumerate(shape) if spec[dim] is None and size % data == 0 and size >= data]
    if fsdp and data > 1 and free:
        spec[max(free, key=lambda dim: shape[dim])] = DATA
    return PartitionSpec(*spec)


def state_shardings(state: Any, mesh: Mesh, fsdp: bool) -> Any:
    """A NamedSharding per leaf of ``state`` (parameters and optimiser state alike), by its path name."""

    def sharding(path: tuple, leaf: Any) -> NamedSharding:
        return NamedSharding(mesh, leaf_spec(leaf_name(path), np.shape(leaf), mesh, fsdp))

    return jax.tree_util.tree_map_with_path(sharding, state)
