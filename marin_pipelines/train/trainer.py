"""The trainer: a config and a batch source in, a checkpoint directory out (``TrainConfig`` in
``train_config``, checkpoint I/O in ``checkpoint``, the loss plot in ``loss_curve``).

The step is functional (``nnx.split`` once, ``nnx.merge`` inside one ``jax.jit``): parameters,
optimiser state, counters and the loss-spike window form one pytree, sharded over the device mesh
(data, expert and model parallelism + FSDP: ``sharding``) and saved by orbax every ``checkpoint_every``
steps. A run is a pure function of its config, its seed and its batches: rerun the same command after a
crash and it resumes from the last checkpoint and ends with bit-identical parameters.

A run may span several processes (hosts; see ``distributed``): each reads only its own rows of every
global batch, every process takes part in each checkpoint, and process 0 alone writes the other files.

A checkpoint resumes on another layout: other devices, processes, mesh, ``fsdp`` or ``peak_flops``
(``LAYOUT_FIELDS``; any other change of config is refused). Orbax restores each array into the resuming
run's shardings, and a step's batch depends on the step alone. The result is then equal within float
tolerance, not bit-identical: the step's sums are reduced in another order (measured: losses within 3e-7
relative over the 10 steps after a change, 4 -> 2 devices, data 2 x model 2 -> data 4, 2 processes -> 1;
the tests allow 2e-3 per step and 2% on the final loss; like any change of reduction order the
difference may grow over a long run). ``layouts`` in each checkpoint's meta and in the summary records
the layout of every segment (the step it started from, processes, devices, mesh, ``fsdp``).

A checkpoint directory (a local path or a ``gs://`` URL) holds ``checkpoints/`` (orbax steps),
``model.json``, ``train.json`` (config + summary), ``metrics.jsonl`` (one line per step) and
``loss_curve.png``. With ``reports`` (``reporting``: a sweep's trial) the run measures its validation loss
every few steps, records it in the step's line and hands it to a callback that may stop the run there.
Object storage has no append and a killed process never closes its file, so the metrics are kept in
memory and ``metrics.jsonl`` is rewritten whole before every checkpoint and at the end: a resumed run
finds every step before its checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm
from upath import UPath

from marin_pipelines.store import is_local, write_url
from marin_pipelines.train.checkpoint import Checkpoints
from marin_pipelines.train.distributed import is_primary
from marin_pipelines.train.fp8 import check_fp8
from marin_pipelines.train.loss_curve import loss_curve_png
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.moe import MoEConfig, RouterStats, rebalance, router_loss, router_metrics
from marin_pipelines.train.optimizer import learning_rate_schedule, make_optimizer
from marin_pipelines.train.reporting import Reports, StopTraining
from marin_pipelines.train.run_inputs import check_steps
from marin_pipelines.train.sharding import (
    batch_sharding,
    check_layout,
    data_mesh,
    process_rows,
    state_shardings,
)
from marin_pipelines.train.throughput import mesh_peak
from marin_pipelines.train.train_config import (
    CHECKPOINTS_DIR,
    LAYOUT_FIELDS,
    LOSS_CURVE_FILE,
    METRICS_FILE,
    MODEL_FILE,
    STARTED_FILE,
    TRAIN_FILE,
    TrainConfig,
)
from marin_pipelines.train.warm_start import warm_state

logger = logging.getLogger(__name__)
REFRESH = 0.5 if sys.stderr.isatty() else 30.0  # seconds between progress lines; logs are not terminals

FINAL_LOSS_WINDOW = 10


TrainState = dict[str, Any]
TrainStep = Callable[[TrainState, jax.Array], tuple[TrainState, dict[str, jax.Array]]]
LossFn = Callable[[nnx.State, jax.Array], tuple[jax.Array, "Losses"]]


@runtime_checkable
class BatchRows(Protocol):
    """A batch source that computes any rows of a step's batch alone (``MixtureLoader``): each process of
    a multi-host run reads its own rows and no others."""

    def rows(self, step: int, start: int, stop: int) -> np.ndarray: ...


Batches = Callable[[int], np.ndarray] | BatchRows


def _is_spike(loss: jax.Array, state: TrainState, config: TrainConfig) -> jax.Array:
    """OLMo's rule: once the window is full, a loss above mean + sigma x std of the window is a spike."""
    if config.spike_window == 0:
        return jnp.bool_(False)
    window = state["losses"]
    full = state["losses_seen"] >= config.spike_window
    return full & (loss > window.mean() + config.spike_sigma * window.std())


def _make_loss(graphdef: nnx.GraphDef, config: TrainConfig, moe: MoEConfig | None) -> LossFn:
    """The training loss of a batch and its parts: one definition for the train step and the validation."""

    def loss_fn(params: nnx.State, batch: jax.Array) -> tuple[jax.Array, Losses]:
        model = nnx.merge(graphdef, params)
        if batch.ndim == 3:  # packed chat examples: tokens, segment ids, assistant mask
            loss, losses = packed_loss(model, batch, config.z_loss_weight)
        else:
            logits, routing = model.forward(batch[:, :-1])
            cross_entropy = optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()
            z_loss = (jax.nn.logsumexp(logits, axis=-1) ** 2).mean()
            losses = Losses(cross_entropy, z_loss, routing)
            loss = cross_entropy + config.z_loss_weight * z_loss
        if moe is not None:
            loss = loss + router_loss(losses.routing, moe)
        return loss, losses

    return loss_fn


def _make_train_step(
    graphdef: nnx.GraphDef, tx: optax.GradientTransformation, config: TrainConfig, moe: MoEConfig | None
) -> TrainStep:
    schedule = learning_rate_schedule(config)
    loss_fn = _make_loss(graphdef, config, moe)

    def train_step(state: TrainState, batch: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
        (loss, (cross_entropy, z_loss, routing)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state["params"], batch
        )
        grad_norm = optax.tree.norm(grads)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        if moe is not None:  # the balance bias moves by the load, not the gradient
            params = rebalance(params, routing, moe)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        skip = ~finite | _is_spike(loss, state, config)

        def unless_skipped(new: Any, old: Any) -> Any:
            return jax.tree.map(lambda n, o: jnp.where(skip, o, n), new, old)

        losses, seen = state["losses"], state["losses_seen"]
        if config.spike_window:  # every finite loss enters the window, so a lasting level shift is accepted
            losses = jnp.where(finite, losses.at[seen % config.spike_window].set(loss), losses)
            seen = seen + finite
        new_state = {
            "params": unless_skipped(params, state["params"]),
            "opt_state": unless_skipped(opt_state, state["opt_state"]),
            "applied": state["applied"] + ~skip,
            "skipped": state["skipped"] + skip,
            "consecutive_skips": jnp.where(skip, state["consecutive_skips"] + 1, 0),
            "losses": losses,
            "losses_seen": seen,
            # No layer draws random numbers today (no dropout); the key is saved and advanced anyway so
            # that one which does keeps resume exact.
            "rng": jax.random.key_data(jax.random.split(jax.random.wrap_key_data(state["rng"]))[0]),
        }
        metrics = {
            "loss": cross_entropy,
            "z_loss": z_loss,
            "grad_norm": grad_norm,
            "lr": schedule(state["applied"]),
            "skipped": skip,
            **(router_metrics(routing) if routing else {}),
        }
        return new_state, metrics

    return train_step


class Losses(NamedTuple):
    """What the loss reports besides its value: the parts logged, and the MoE layers' routing."""

    cross_entropy: jax.Array
    z_loss: jax.Array
    routing: dict[int, RouterStats]


def packed_loss(model: Llama, batch: jax.Array, z_loss_weight: float) -> tuple[jax.Array, Losses]:
    """Loss of packed examples (``batch[B, 3, T + 1]``: tokens, segment ids, assistant mask): the mean over
    the targets that count, assistant tokens predicted from their own example."""
    tokens, segments, assistant = batch[:, 0], batch[:, 1], batch[:, 2]
    logits, routing = model.forward(tokens[:, :-1], segments[:, :-1])
    same = (segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] > 0)
    weights = (assistant[:, 1:] > 0) & same
    count = jnp.maximum(weights.sum(), 1)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
    cross_entropy = jnp.where(weights, nll, 0).sum() / count
    z_loss = jnp.where(weights, jax.nn.logsumexp(logits, axis=-1) ** 2, 0).sum() / count
    return cross_entropy + z_loss_weight * z_loss, Losses(cross_entropy, z_loss, routing)


def _initial_state(model: Llama, tx: optax.GradientTransformation, config: TrainConfig) -> TrainState:
    _, params = nnx.split(model)
    zero = jnp.zeros((), jnp.int32)
    return {
        "params": params,
        "opt_state": tx.init(params),
        "applied": zero,
        "skipped": zero,
        "consecutive_skips": zero,
        "losses": jnp.zeros(config.spike_window, jnp.float32),
        "losses_seen": zero,
        "rng": jax.random.key_data(jax.random.key(config.seed)),
    }


def _check_batch(batch: np.ndarray, call: str, shape: tuple[int, ...], vocab_size: int) -> np.ndarray:
    batch = np.asarray(batch)
    if batch.shape != shape or not np.issubdtype(batch.dtype, np.integer):
        raise ValueError(f"{call} gave {batch.dtype}{list(batch.shape)}; expected int32{list(shape)}")
    tokens = batch[:, 0] if batch.ndim == 3 else batch
    if batch.min() < 0 or tokens.max(initial=0) >= vocab_size:
        raise ValueError(f"{call} gave token ids outside [0, {vocab_size})")
    return batch.astype(np.int32)


def _local_rows(
    batches: Batches, step: int, rows: slice, shape: tuple[int, ...], vocab_size: int
) -> np.ndarray:
    """This process's ``rows`` of the batch of ``step``; a plain function's whole batch is sliced."""
    if isinstance(batches, BatchRows):
        local = (rows.stop - rows.start, *shape[1:])
        return _check_batch(
            batches.rows(step, rows.start, rows.stop),
            f"rows({step}, {rows.start}, {rows.stop})",
            local,
            vocab_size,
        )
    return _check_batch(batches(step), f"batch_fn({step})", shape, vocab_size)[rows]


def _layout(mesh: jax.sharding.Mesh, config: TrainConfig, start: int) -> dict[str, Any]:
    """Where the segment of a run from step ``start`` computes; a resumed run may compute elsewhere."""
    return {
        "from_step": start,
        "processes": jax.process_count(),
        "devices": mesh.size,
        "mesh": dict(mesh.shape),
        "fsdp": config.fsdp,
    }


def _first_start(out_dir: UPath, resuming: bool) -> str | None:
    """When the run first started (ISO time, UTC): recorded before its first step and kept when it resumes,
    so that a forecast written after a crash and before the resume is not taken as written before the run.
    None for a run resumed from before the record existed: its start is not known."""
    path = out_dir / STARTED_FILE
    if path.exists():
        return json.loads(path.read_text())["started_at"]
    if resuming:
        return None
    started = datetime.now(UTC).isoformat(timespec="microseconds")
    write_url(str(path), json.dumps({"started_at": started}))
    return started


def _finished_summary(out_dir: UPath, steps: int) -> dict[str, Any] | None:
    """The summary a finished run recorded for its last checkpoint, if it got to record it."""
    path = out_dir / TRAIN_FILE
    if not path.exists():
        return None
    summary = json.loads(path.read_text())["summary"]
    return summary if summary["steps"] == steps else None


def _write_metrics(path: UPath, metrics: list[dict[str, Any]]) -> None:
    write_url(str(path), "".join(json.dumps(m) + "\n" for m in metrics))


def _metrics_before(path: UPath, step: int) -> list[dict[str, Any]]:
    """The steps logged before ``step`` (a killed run may have logged some after its last checkpoint)."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [record for record in records if record["step"] < step]


def _make_validation(
    graphdef: nnx.GraphDef,
    config: TrainConfig,
    moe: MoEConfig | None,
    reports: Reports,
    batches: list[jax.Array],
    params_sharding: Any,
    rows_sharding: jax.sharding.NamedSharding,
    replicated: jax.sharding.NamedSharding,
) -> Callable[[TrainState, list[dict[str, Any]], int], dict[str, float]]:
    """What a report holds once ``done`` steps are done: the mean cross-entropy over the fixed validation
    ``batches`` (one jitted forward pass, the training loss's own definition) and the mean training loss of
    the steps since the previous report."""
    loss_fn = _make_loss(graphdef, config, moe)
    cross_entropy = jax.jit(
        lambda params, batch: loss_fn(params, batch)[1].cross_entropy,
        in_shardings=(params_sharding, rows_sharding),
        out_shardings=replicated,
    )

    def measure(state: TrainState, metrics: list[dict[str, Any]], done: int) -> dict[str, float]:
        losses = jax.device_get([cross_entropy(state["params"], batch) for batch in batches])
        since = metrics[(done - 1) // reports.every * reports.every : done]
        return {
            "val_loss": float(np.mean(losses)),
            "train_loss": float(np.mean([m["loss"] for m in since])),
        }

    return measure


def _final_loss(metrics: list[dict[str, Any]]) -> float:
    return float(np.mean([m["loss"] for m in metrics[-FINAL_LOSS_WINDOW:]]))


def _check_resumable(found: dict[str, Any], expected: dict[str, Any], where: UPath) -> None:
    """A checkpoint is only resumed by the run that wrote it (``steps`` may grow: extending a run), on any
    layout (``LAYOUT_FIELDS``, devices, processes): ``layouts`` records each segment's."""
    resumable = {"steps", *LAYOUT_FIELDS}
    for section in (expected.keys() | found.keys()) - {"layouts"}:
        mine, theirs = expected.get(section, {}), found.get(section, {})
        differ = sorted(
            k for k in mine.keys() | theirs.keys() if k not in resumable and mine.get(k) != theirs.get(k)
        )
        if differ:
            raise ValueError(
                f"{where} holds a run with another {section} config (fields {differ}); "
                "use a fresh --out directory"
            )


def train(
    model_config: LlamaConfig,
    config: TrainConfig,
    batch_fn: Batches,
    out_dir: str | os.PathLike[str],
    progress: bool = True,
    on_step: Sequence[Callable[[dict[str, Any]], None]] = (),
    packed: bool = False,
    warm_start: str | os.PathLike[str] | None = None,
    warm_start_optimizer: bool = False,
    warm_start_notes: dict[str, Any] | None = None,
    validation: Batches | None = None,
    reports: Reports | None = None,
) -> dict[str, Any]:
    """Train into ``out_dir`` (a path or URL), resuming from its last checkpoint if it has one.

    ``batch_fn(step)`` returns ints of shape (batch_size, seq_len + 1); inputs are ``batch[:, :-1]``,
    targets ``batch[:, 1:]``. With ``packed`` (supervised fine-tuning) it returns (batch_size, 3,
    seq_len + 1): tokens, segment ids and the assistant mask of packed chat examples (``packed_loss``).
    ``warm_start`` is a training directory whose latest checkpoint the run starts from: every parameter of
    the same name and shape (and with ``warm_start_optimizer`` every optimiser leaf), the rest initialised,
    the schedule its own (``warm_start.py``); its own checkpoints take over once it has some;
    ``warm_start_notes`` join its record (what the caller checked: another tokenizer, allowed). A
    ``BatchRows`` source is asked for this process's rows only; a plain function's batch is sliced. Bad
    updates (non-finite, or a loss spike) are skipped and counted; more than ``max_consecutive_skips`` in
    a row raise RuntimeError.
    ``on_step`` callbacks get each step's metrics record. With ``reports`` the run reports metrics every few
    steps (``reporting``): batch ``i`` of ``validation`` (a source like ``batch_fn``, indexed by batch, each
    call the same) for i < ``reports.batches`` is the fixed validation set; a report's metrics join its step's
    record, and a ``StopTraining`` raised by the callback ends the run there, its checkpoint, metrics and loss
    curve saved, and is raised on. Without ``reports`` nothing is measured: the run is as before. Returns the
    summary that process 0 also writes
    to ``train.json`` (with ``started_at``, the first start, which process 0 records in ``started.json``).
    """
    out_dir = UPath(out_dir)
    primary = is_primary()
    if reports is not None and validation is None:
        raise ValueError("reports need validation batches to measure the validation loss on")
    check_layout(config, model_config, jax.device_count())
    if model_config.fp8:
        check_fp8(jax.devices()[0].platform)
    mesh = data_mesh(config.mesh)
    model = Llama(model_config, nnx.Rngs(config.seed))
    graphdef = nnx.graphdef(model)
    meta = {"model": model_config.model_dump(), "train": config.model_dump()}
    tx = make_optimizer(config)
    state = _initial_state(model, tx, config)
    shardings = state_shardings(state, mesh, config.fsdp)
    if primary and is_local(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)

    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    rows_sharding = batch_sharding(mesh)
    train_step = jax.jit(
        _make_train_step(graphdef, tx, config, model_config.moe),
        in_shardings=(shardings, rows_sharding),
        out_shardings=(shardings, replicated),
    )
    batch_shape = (config.batch_size, *((3,) if packed else ()), model_config.seq_len + 1)
    rows = process_rows(rows_sharding, batch_shape)

    def batch_of(step: int, source: Batches = batch_fn) -> jax.Array:
        local = _local_rows(source, step, rows, batch_shape, model_config.vocab_size)
        return jax.make_array_from_process_local_data(rows_sharding, local, batch_shape)

    measure = None
    if reports is not None and validation is not None:
        fixed = [batch_of(i, validation) for i in range(reports.batches)]
        measure = _make_validation(
            graphdef, config, model_config.moe, reports, fixed, shardings["params"], rows_sharding, replicated
        )

    tokens_per_step = config.batch_size * model_config.seq_len
    flops_per_token = model_config.flops_per_token()
    peak_flops, peak_source = mesh_peak(mesh, model_config.dtype, config.peak_flops)
    metrics_path = out_dir / METRICS_FILE

    with Checkpoints(out_dir / CHECKPOINTS_DIR, config.keep_last, config.keep_every) as checkpoints:
        start = checkpoints.latest_step() or 0
        check_steps(str(out_dir), start, config.steps)  # train.json describes the checkpoint beside it
        saved = checkpoints.meta(start) if start else {}
        if start:
            if warm_start is not None:  # what it started from is recorded; the base is not read again
                meta["warm_start"] = saved.get("warm_start", {"dir": str(warm_start)})
            _check_resumable(saved, meta, out_dir)
            if start == config.steps and (recorded := _finished_summary(out_dir, start)) is not None:
                return {**recorded, "resumed_from_step": start}  # its record stands: no step to time
            state = checkpoints.restore(start, state, shardings)
            if primary:
                logger.info("resuming from the checkpoint of step %d in %s", start, out_dir)
        else:
            if warm_start is not None:
                state, meta["warm_start"] = warm_state(
                    state, warm_start, warm_start_optimizer, config.optimizer
                )
                meta["warm_start"] |= warm_start_notes or {}
                if primary:
                    logger.info("warm start from step %(step)d of %(dir)s", meta["warm_start"])
            state = jax.device_put(state, shardings)
        if primary:  # once the run is known to be this one: a refused rerun leaves the run's model file
            write_url(str(out_dir / MODEL_FILE), json.dumps(meta["model"], indent=2))
        meta["layouts"] = [*saved.get("layouts", []), _layout(mesh, config, start)]  # earlier segments first
        started_at = _first_start(out_dir, resuming=start > 0) if primary else None
        metrics = _metrics_before(metrics_path, start)
        if len(metrics) != start:
            raise ValueError(f"{metrics_path} has {len(metrics)} steps before checkpoint {start}")
        began = last = time.perf_counter()
        try:
            with tqdm(
                range(start, config.steps),
                desc="train",
                unit="step",
                disable=not (progress and primary),
                mininterval=REFRESH,
                initial=start,
                total=config.steps,
            ) as bar:
                batch: jax.Array | BaseException | None = batch_of(start) if start < config.steps else None
                for step in bar:
                    if isinstance(batch, BaseException):
                        raise batch
                    state, out = train_step(state, batch)
                    try:  # made while the device computes this step (12% of an H200's step); a bad batch
                        batch = batch_of(step + 1) if step + 1 < config.steps else None  # fails its own step
                    except BaseException as error:  # raised at its own step, after this one is saved
                        batch = error
                    out = jax.device_get(out)
                    now = time.perf_counter()
                    seconds, last = now - last, now
                    record = {"step": step, **{k: float(v) for k, v in out.items() if k != "skipped"}}
                    record["skipped"] = bool(out["skipped"])
                    record["step_seconds"] = seconds
                    record["tokens_per_s"] = tokens_per_step / seconds
                    record["mfu"] = record["tokens_per_s"] * flops_per_token / peak_flops
                    metrics.append(record)
                    reported = None
                    if reports is not None and measure is not None and reports.due(step + 1, config.steps):
                        reported = measure(state, metrics, step + 1)
                        record |= reported  # in the step's line, and in what the callbacks get
                    for callback in on_step:
                        callback(record)
                    if reports is not None and reported is not None:
                        try:
                            reports.on_report(step + 1, reported)
                        except StopTraining:  # the run ends here, kept as it is at this step
                            if primary:
                                _write_metrics(metrics_path, metrics)
                            checkpoints.save(step + 1, state, meta)
                            if primary:
                                curve = {
                                    "params": model_config.num_params(),
                                    "tokens_seen": tokens_per_step * (step + 1),
                                    "initial_loss": metrics[0]["loss"],
                                    "final_loss": _final_loss(metrics),
                                    "stopped_at": step + 1,
                                }
                                write_url(str(out_dir / LOSS_CURVE_FILE), loss_curve_png(metrics, curve))
                            raise
                    if int(state["consecutive_skips"]) >= config.max_consecutive_skips:
                        raise RuntimeError(
                            f"{config.max_consecutive_skips} bad updates in a row (non-finite or spiking "
                            f"loss {record['loss']}) at step {step}; lower learning_rate?"
                        )
                    if (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
                        if primary:  # first: a checkpoint that exists has its steps' metrics
                            _write_metrics(metrics_path, metrics)
                        checkpoints.save(step + 1, state, meta)
                    if primary and (step % config.log_every == 0 or step == config.steps - 1):
                        bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}")
                        logger.info(
                            "step %d loss %.4f grad_norm %.3f", step, record["loss"], record["grad_norm"]
                        )
        finally:  # an error or an interrupt keeps the steps it logged
            if primary:
                _write_metrics(metrics_path, metrics)
        wall_seconds = time.perf_counter() - began

    # Throughput excludes the first step of this process, which carries the compile.
    timed = metrics[start + 1 :] or metrics[-1:]
    tokens_per_s = tokens_per_step * len(timed) / sum(m["step_seconds"] for m in timed)
    summary = {
        "steps": config.steps,
        "resumed_from_step": start,
        "initial_loss": metrics[0]["loss"],
        "final_loss": _final_loss(metrics),
        "skipped_updates": sum(m["skipped"] for m in metrics),
        "tokens_seen": tokens_per_step * config.steps,
        "params": model_config.num_params(),
        "active_params": model_config.num_params(active=True),
        "non_embedding_params": model_config.num_params(include_embeddings=False),
        "flops_per_token": flops_per_token,
        "flops": flops_per_token * tokens_per_step * config.steps,
        "processes": jax.process_count(),
        "devices": mesh.size,
        "mesh": dict(mesh.shape),
        "layouts": meta["layouts"],
        "hardware": f"{mesh.devices.flat[0].platform}: {mesh.devices.flat[0].device_kind}",
        "wall_seconds": wall_seconds,
        "tokens_per_s": tokens_per_s,
        "peak_flops": peak_flops,
        "peak_flops_source": peak_source,
        "mfu": tokens_per_s * flops_per_token / peak_flops,
    }
    if "warm_start" in meta:
        summary["warm_start"] = meta["warm_start"]
    if started_at is not None:  # known to process 0, unless the run began before the record existed
        summary["started_at"] = started_at
    if primary:
        recorded = {"config": meta["train"], "summary": summary}
        write_url(str(out_dir / TRAIN_FILE), json.dumps(recorded, indent=2))
        write_url(str(out_dir / LOSS_CURVE_FILE), loss_curve_png(metrics, summary))
    return summary
