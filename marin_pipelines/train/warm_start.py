"""Starting a run from another run's checkpoint, across an architecture change ("no FLOP left behind").

A run that spiked gets QK-norm; an MoE gets more experts; a base is fine-tuned. The new run builds its own
model and optimiser state, then takes from the base's latest checkpoint every parameter whose name and
shape match, and, when asked, every optimiser leaf (Adam's moments and their bias-correction count, Muon's
momentum, AdamH's radii) whose name and shape match: the optimisers must then be the same kind. What the
base lacks (QK-norm's scales) keeps its initialisation and fresh moments; what the new model lacks is
dropped. The learning-rate schedule always restarts and AdamH measures its radii on the loaded parameters
(``optimizer.warm_optimizer_state``): the run re-warms, and no loaded matrix is rescaled.

Experts may be added: an MoE weight whose expert axis grew takes the base's experts first and initialises
the rest (the router's new columns too). A new expert's balance bias starts at the mean of the base's: the
bias only shifts which experts are picked, so there a new expert is neither favoured nor starved, where 0
would put it below every base expert the balancing raised and above every one it lowered. Any other shape
change is an error naming the parameter.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jax
import numpy as np

from marin_pipelines.train.checkpoint import (
    Checkpoints,
    abstract_model,
    flatten,
    params_sha256,
    training_dir,
    unflatten,
)
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.moe import expert_axis
from marin_pipelines.train.optimizer import make_optimizer, warm_optimizer_state
from marin_pipelines.train.train_config import CHECKPOINTS_DIR, IMPORTED, TrainConfig

OPTIMIZER = "opt_state"  # the optimiser's leaves in a checkpoint's training state


@contextmanager
def _latest_checkpoint(
    base: str | os.PathLike[str], optimizer: bool
) -> Iterator[tuple[Checkpoints, int, dict[str, Any], tuple[str, ...]]]:
    """The base's checkpoints, open, with their latest step, its metadata and the items a warm start reads
    (``params``, and ``state`` with the optimiser when ``optimizer`` and the base was trained, not imported
    by ``import_hf``)."""
    folder = training_dir(base)
    with Checkpoints(folder / CHECKPOINTS_DIR) as checkpoints:
        step = checkpoints.latest_step()
        if step is None:
            raise FileNotFoundError(f"warm start: no complete checkpoint in {folder}")
        meta = checkpoints.meta(step)
        yield (
            checkpoints,
            step,
            meta,
            ("params", "state") if optimizer and IMPORTED not in meta else ("params",),
        )


def read_base(base: str | os.PathLike[str], optimizer: bool) -> tuple[int, dict[str, dict], dict[str, Any]]:
    """The base's latest checkpoint: its step, its flat items (see ``_latest_checkpoint``) and the configs
    that wrote it."""
    with _latest_checkpoint(base, optimizer) as (checkpoints, step, meta, items):
        return step, checkpoints.restore_flat(step, items), meta


def _grows(name: str, mine: tuple[int, ...], theirs: tuple[int, ...], where: str) -> bool:
    """Whether the base's leaf of shape ``theirs`` loads into this run's of shape ``mine`` widened (more
    experts); an error naming it where it cannot load at all."""
    if mine == theirs:
        return False
    axis = expert_axis(name, len(mine))
    grown = [a for a in range(len(mine)) if mine[a] != theirs[a]] if len(mine) == len(theirs) else []
    if axis is None or grown != [axis] or mine[axis] < theirs[axis]:
        raise ValueError(
            f"warm start from {where}: {name} has shape {list(theirs)} in the base and {list(mine)} here; a "
            "parameter that changes shape cannot be loaded (only an MoE layer's experts may grow)"
        )
    return True


def _take(name: str, mine: np.ndarray, theirs: np.ndarray, where: str) -> tuple[np.ndarray, bool]:
    """The base's value for a leaf of this run, and whether it was widened (more experts)."""
    if not _grows(name, mine.shape, theirs.shape, where):
        return np.asarray(theirs, mine.dtype), False
    axis = expert_axis(name, mine.ndim)
    widened = np.array(mine)
    widened[(slice(None),) * axis + (slice(0, theirs.shape[axis]),)] = theirs
    return widened, True


def _merge(
    mine: dict[str, Any], theirs: dict[str, Any], where: str
) -> tuple[dict[str, Any], dict[str, list]]:
    """``mine`` with every leaf the base has by the same name taken from it; the names loaded, widened, new
    (kept as initialised) and dropped (the base's, unused)."""
    merged, report = (
        dict(mine),
        {"loaded": [], "widened": [], "new": [], "dropped": sorted(theirs.keys() - mine.keys())},
    )
    for name, leaf in mine.items():
        if name not in theirs:
            report["new"].append(name)
            continue
        merged[name], widened = _take(name, np.asarray(leaf), theirs[name], where)
        report["widened" if widened else "loaded"].append(name)
    return merged, report


def warm_state(
    state: dict[str, Any], base: str | os.PathLike[str], optimizer: bool, optimizer_name: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``state`` (a fresh run's, on the host) with the base's matching parameters and, with ``optimizer``,
    its matching optimiser leaves; the schedule restarted. Returns it and the record of the warm start."""
    step, saved, meta = read_base(base, optimizer)
    base_params = saved["params"]
    params, report = _merge(flatten(state["params"]), base_params, str(base))
    for name in report["widened"]:
        if name.endswith("router_bias"):  # new experts start where the base's average expert stands
            params[name][base_params[name].shape[0] :] = base_params[name].mean()
    record: dict[str, Any] = {"dir": str(base), "step": step, "params_sha256": params_sha256(base_params)}
    record |= {key: report[key] for key in ("loaded", "widened", "new", "dropped")}
    opt_state = state["opt_state"]
    if optimizer and IMPORTED in meta:  # a model brought in from Hugging Face has no optimiser state
        record["optimizer"] = "fresh: the base was imported, it has no optimiser state"
    elif optimizer:
        _same_optimizer(meta, optimizer_name, str(base))
        base_optimizer = {k: v for k, v in saved["state"].items() if k.split(".")[0] == OPTIMIZER}
        merged, opt_report = _merge(flatten({OPTIMIZER: opt_state}), base_optimizer, str(base))
        opt_state = unflatten({OPTIMIZER: opt_state}, merged)[OPTIMIZER]
        record["optimizer"] = {key: len(names) for key, names in opt_report.items()}
    else:
        record["optimizer"] = "fresh"
    loaded = unflatten(state["params"], params)
    warmed = {**state, "params": loaded, "opt_state": warm_optimizer_state(opt_state, loaded)}
    return jax.tree.map(np.asarray, warmed), record


def _same_optimizer(meta: dict[str, Any], optimizer_name: str, where: str) -> None:
    theirs = meta.get("train", {}).get("optimizer", "adamw")
    if theirs != optimizer_name:
        raise ValueError(
            f"warm start from {where}: the base trained with {theirs} and this run uses {optimizer_name}; "
            "an optimiser's state loads only into the same optimiser (start with a fresh optimiser instead)"
        )


def check_base(
    base: str | os.PathLike[str], model: LlamaConfig, config: TrainConfig, optimizer: bool
) -> None:
    """Refuse, reading no weight, a warm start of ``model`` trained by ``config`` from ``base`` that
    ``warm_state`` would refuse: a leaf whose shape changes (other than experts grown), or, with
    ``optimizer``, another optimiser or an optimiser leaf that cannot load. Shapes come from the base's
    checkpoint metadata and this run's abstract model and optimiser state. Called before the run folder
    records its inputs (``launched.py``): a refused warm start leaves nothing that would refuse the corrected
    rerun."""
    where = str(base)
    with _latest_checkpoint(base, optimizer) as (checkpoints, step, meta, items):
        stored = {item: checkpoints.shapes(step, item) for item in items}
    _, params = abstract_model(model)
    _check_shapes(params, stored["params"], where)
    if "state" in items:
        _same_optimizer(meta, config.optimizer, where)
        opt_state = jax.eval_shape(make_optimizer(config).init, params)
        _check_shapes({OPTIMIZER: opt_state}, stored["state"], where)


def _check_shapes(tree: Any, stored: dict[str, tuple[int, ...]], where: str) -> None:
    """Each leaf of this run's ``tree`` (shapes only) against the base's of its name, in ``warm_state``'s
    order, so that the same leaf is named first."""
    for name, leaf in flatten(tree).items():
        if name in stored:
            _grows(name, tuple(leaf.shape), stored[name], where)
