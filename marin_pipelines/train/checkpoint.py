"""Checkpoint I/O: resumable training state on disk (an orbax CheckpointManager, asynchronous, atomic per
step), and the loading of a trained model from a run directory.

A step directory holds three items: ``params`` (the model), ``state`` (optimiser state, update
counters, the loss-spike window, the RNG) and ``meta`` (the configs that wrote it). Leaves are saved
under flat dotted names (``blocks.0.attn.wq.kernel``) and restored into the tree of a freshly built
state, so the on-disk format does not depend on optax's or flax's pytree classes. Orbax writes each
step into a temporary directory and renames it when complete: a process killed mid-save leaves no
step that a later run would read. The directory may be a ``gs://`` URL: orbax writes there itself
(tensorstore), and every process of a multi-host run takes part in each save and restore.
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx
from upath import UPath

from marin_pipelines.store import is_local
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.train_config import CHECKPOINTS_DIR, MODEL_FILE


def leaf_name(path: tuple) -> str:
    """``blocks.0.attn.wq.kernel`` for a path of dict keys, sequence indices and attributes."""
    parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", None)))) for k in path]
    return ".".join(parts[:-1] if parts[-1:] == ["value"] else parts)  # nnx Variables hold .value


def flatten(tree: Any) -> dict[str, Any]:
    return {leaf_name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def unflatten(like: Any, flat: dict[str, Any]) -> Any:
    names = [leaf_name(path) for path, _ in jax.tree_util.tree_flatten_with_path(like)[0]]
    return jax.tree.unflatten(jax.tree.structure(like), [flat[name] for name in names])


def params_sha256(params: Any) -> str:
    """One hash of every parameter: names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name, leaf in sorted(flatten(params).items()):
        array = np.asarray(leaf)
        digest.update(f"{name}:{array.dtype}:{array.shape};".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _abstract(tree: Any, shardings: Any) -> dict[str, jax.ShapeDtypeStruct]:
    flat, flat_shardings = flatten(tree), flatten(shardings)
    return {
        name: jax.ShapeDtypeStruct(np.shape(leaf), leaf.dtype, sharding=flat_shardings[name])
        for name, leaf in flat.items()
    }


class Checkpoints:
    """Checkpoints under ``directory``: the last ``keep_last``, plus every ``keep_every``-th step."""

    def __init__(
        self, directory: str | os.PathLike[str], keep_last: int | None = None, keep_every: int | None = None
    ):
        """``keep_last=None`` opens existing checkpoints for reading: nothing is created or cleaned up."""
        writing = keep_last is not None
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep_last,
            keep_period=keep_every,
            enable_async_checkpointing=writing,
            cleanup_tmp_directories=writing,
            create=writing,
        )
        self.directory = Path(directory).absolute() if is_local(directory) else epath.Path(str(directory))
        handlers = {
            "params": ocp.StandardCheckpointHandler(),
            "state": ocp.StandardCheckpointHandler(),
            "meta": ocp.JsonCheckpointHandler(),
        }
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)

    def __enter__(self) -> Checkpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.manager.wait_until_finished()
        self.manager.close()

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any]) -> None:
        """Start writing ``state`` (a dict with ``params``) as ``step``; returns once arrays are copied."""
        self._check_room(state)
        rest = {k: v for k, v in state.items() if k != "params"}
        self.manager.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(flatten(state["params"])),
                state=ocp.args.StandardSave(flatten(rest)),
                meta=ocp.args.JsonSave(meta),
            ),
        )

    def _check_room(self, state: dict[str, Any]) -> None:
        """A checkpoint starts only where it fits (a local disk's free space, and the file size limit of
        ``ulimit -f``): one clear error naming the folder, rather than the writer threads' failures mid-way.
        The state's whole size is asked for (the shards of every process: an upper bound)."""
        if not isinstance(self.directory, Path):
            return
        need = sum(leaf.nbytes for leaf in jax.tree.leaves(state) if hasattr(leaf, "nbytes"))
        free = shutil.disk_usage(self.directory).free
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]  # ulimit -f
        room = free if limit == resource.RLIM_INFINITY else min(free, limit)
        if need > room:
            raise OSError(
                errno.ENOSPC, f"a checkpoint needs {need:,} bytes, {room:,} are left", str(self.directory)
            )

    def restore(self, step: int, like: dict[str, Any], shardings: dict[str, Any]) -> dict[str, Any]:
        """The state saved at ``step``, in the tree structure and shardings of ``like``."""
        rest = {k: v for k, v in like.items() if k != "params"}
        rest_shardings = {k: v for k, v in shardings.items() if k != "params"}
        self._check_names(step, like["params"])
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(_abstract(like["params"], shardings["params"])),
                state=ocp.args.StandardRestore(_abstract(rest, rest_shardings)),
            ),
        )
        return {"params": unflatten(like["params"], restored["params"]), **unflatten(rest, restored["state"])}

    def restore_params(self, step: int, like: Any) -> Any:
        """Only the parameters (for evaluation and export), on the default device."""
        self._check_names(step, like)
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        abstract = _abstract(like, jax.tree.map(lambda _: device, like))
        restored = self.manager.restore(
            step, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract))
        )
        return unflatten(like, restored["params"])

    def restore_flat(self, step: int, items: tuple[str, ...] = ("params", "state")) -> dict[str, dict]:
        """``items`` of ``step`` by flat name, as saved (shapes from the checkpoint, not from a model), on
        the default device: what a warm start picks from (the training state only when it keeps it)."""
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        metadata = self.manager.item_metadata(step)
        abstract = {
            item: {
                name: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=device)
                for name, leaf in metadata[item].items()
            }
            for item in items
        }
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(**{item: ocp.args.StandardRestore(a) for item, a in abstract.items()}),
        )
        return {item: {name: np.asarray(leaf) for name, leaf in restored[item].items()} for item in items}

    def shapes(self, step: int, item: str) -> dict[str, tuple[int, ...]]:
        """The shape of each of ``item``'s leaves at ``step``, by flat name, from the checkpoint's metadata:
        no array is read (a warm start's checks before it records anything)."""
        return {name: tuple(leaf.shape) for name, leaf in self.manager.item_metadata(step)[item].items()}

    def meta(self, step: int) -> dict[str, Any]:
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def _check_names(self, step: int, params: Any) -> None:
        found = set(self.manager.item_metadata(step)["params"].keys())
        expected = set(flatten(params))
        if found != expected:
            raise ValueError(
                f"parameters of step {step} in {self.directory} do not match the model: "
                f"missing {sorted(expected - found)}, unexpected {sorted(found - expected)}"
            )


def abstract_model(config: LlamaConfig) -> tuple[nnx.GraphDef, nnx.State]:
    """The model's structure and parameter shapes, without allocating or initialising anything."""
    return nnx.split(nnx.eval_shape(lambda: Llama(config, nnx.Rngs(0))))


def training_dir(path: str | os.PathLike[str]) -> UPath:
    """``path`` as a training directory (a run's model file and checkpoints), or an error naming it."""
    path = UPath(path)
    if not (path / MODEL_FILE).is_file() or not (path / CHECKPOINTS_DIR).is_dir():
        raise FileNotFoundError(f"not a training directory (no {MODEL_FILE} and {CHECKPOINTS_DIR}/): {path}")
    return path


def load_params(
    path: str | os.PathLike[str], step: int | None = None
) -> tuple[nnx.GraphDef, nnx.State, LlamaConfig, int]:
    """Parameters of a training directory's (path or URL) checkpoint ``step`` (default: the latest), on
    one device."""
    path = training_dir(path)
    config = LlamaConfig.model_validate_json((path / MODEL_FILE).read_text())
    graphdef, like = abstract_model(config)
    with Checkpoints(path / CHECKPOINTS_DIR) as checkpoints:
        step = checkpoints.latest_step() if step is None else step
        if step is None or step not in checkpoints.all_steps():
            raise FileNotFoundError(f"no complete checkpoint {step if step is not None else ''} in {path}")
        params = checkpoints.restore_params(step, like)
    return graphdef, params, config, step


def load_checkpoint(path: str | os.PathLike[str]) -> tuple[Llama, LlamaConfig]:
    """The model exactly as trained, from the last checkpoint of a directory written by ``train``."""
    graphdef, params, config, _ = load_params(path)
    return nnx.merge(graphdef, params), config
