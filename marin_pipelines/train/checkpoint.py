"""The training stage: a config and a batch source in, a checkpoint directory out.

The step is functional (``nnx.split`` once, ``nnx.merge`` inside one ``jax.jit``): parameters,
optimiser state, counters and the loss-spike window form one pytree, sharded over the device mesh
(data parallel + FSDP) and saved by orbax every ``checkpoint_every`` steps. A run is a pure function
of its config, its seed and its batches: rerun the same command after a crash and it resumes from the
last checkpoint and ends with bit-identical parameters.

A run may span several processes (hosts; see ``distributed``): each reads only its own rows of every
global batch, every process takes part in each checkpoint, and process 0 alone writes the other files.

A checkpoint directory (a local path or a ``gs://`` URL) holds ``checkpoints/`` (orbax steps),
``model.json``, ``train.json`` (config + summary), ``metrics.jsonl`` (one line per step) and
``loss_curve.png``. Object storage has no append and a killed process never closes its file, so the
metrics are kept in memory and ``metrics.jsonl`` is rewritten whole before every checkpoint and at the
end: a resumed run finds every step before its checkpoint.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm.auto import tqdm
from upath import UPath

from marin_pipelines.store import is_local
from marin_pipelines.train.distributed import is_primary
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.optimizer import learning_rate_schedule, make_optimizer
from marin_pipelines.train.resume import Checkpoints
from marin_pipelines.train.sharding import batch_sharding, data_mesh, process_rows, state_shardings
from marin_pipelines.train.throughput import measure_matmul_peak

logger = logging.getLogger(__name__)
REFRESH = 0.5 if sys.stderr.isatty() else 30.0  # seconds between progress lines; logs are not terminals

CHECKPOINTS_DIR = "checkpoints"
MODEL_FILE = "model.json"
TRAIN_FILE = "train.json"
METRICS_FILE = "metrics.jsonl"
LOSS_CURVE_FILE = "loss_curve.png"
FINAL_LOSS_WINDOW = 10


class TrainConfig(BaseModel):
    """Optimisation, bad-update skipping, checkpointing and parallelism of one run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=300, gt=0)
    batch_size: int = Field(default=16, gt=0)
    learning_rate: float = Field(default=3e-3, gt=0)
    lr_schedule: Literal["cosine", "wsd"] = "cosine"
    warmup_steps: int = Field(default=30, ge=0)
    decay_fraction: float = Field(default=0.2, gt=0, le=1, description="wsd: share of steps spent decaying")
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    weight_decay: float = Field(default=0.1, ge=0)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.95, ge=0, lt=1)
    grad_clip: float = Field(default=1.0, gt=0)
    z_loss_weight: float = Field(default=0.0, ge=0, description="weight of mean logsumexp(logits)^2 (PaLM)")
    spike_window: int = Field(default=64, ge=0, description="losses in the spike window; 0: no spike skips")
    spike_sigma: float = Field(default=6.0, gt=0, description="skip when loss > window mean + sigma x std")
    max_consecutive_skips: int = Field(default=10, gt=0, description="stop the run after this many in a row")
    seed: int = 0
    log_every: int = Field(default=10, gt=0)
    checkpoint_every: int = Field(default=100, gt=0, description="steps between (asynchronous) checkpoints")
    keep_last: int = Field(default=2, gt=0, description="most recent checkpoints kept")
    keep_every: int | None = Field(default=None, gt=0, description="also keep every checkpoint at k x this")
    fsdp: bool = Field(default=True, description="shard parameters and optimiser state over the devices")
    peak_flops: float | None = Field(
        default=None, gt=0, description="peak FLOP/s per device, the MFU denominator; None: measure matmuls"
    )

    @model_validator(mode="after")
    def _check_warmup(self) -> TrainConfig:
        if self.warmup_steps > self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must not exceed steps ({self.steps})")
        return self


TrainState = dict[str, Any]
TrainStep = Callable[[TrainState, jax.Array], tuple[TrainState, dict[str, jax.Array]]]


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


def _make_train_step(
    graphdef: nnx.GraphDef, tx: optax.GradientTransformation, config: TrainConfig
) -> TrainStep:
    schedule = learning_rate_schedule(config)

    def loss_fn(params: nnx.State, batch: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        logits = nnx.merge(graphdef, params)(batch[:, :-1])
        cross_entropy = optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()
        z_loss = (jax.nn.logsumexp(logits, axis=-1) ** 2).mean()
        return cross_entropy + config.z_loss_weight * z_loss, (cross_entropy, z_loss)

    def train_step(state: TrainState, batch: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
        (loss, (cross_entropy, z_loss)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state["params"], batch
        )
        grad_norm = optax.tree.norm(grads)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
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
        }
        return new_state, metrics

    return train_step


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


def _check_batch(batch: np.ndarray, call: str, shape: tuple[int, int], vocab_size: int) -> np.ndarray:
    batch = np.asarray(batch)
    if batch.shape != shape or not np.issubdtype(batch.dtype, np.integer):
        raise ValueError(f"{call} gave {batch.dtype}{list(batch.shape)}; expected int32{list(shape)}")
    if batch.min() < 0 or batch.max() >= vocab_size:
        raise ValueError(f"{call} gave token ids outside [0, {vocab_size})")
    return batch.astype(np.int32)


def _local_rows(
    batches: Batches, step: int, rows: slice, shape: tuple[int, int], vocab_size: int
) -> np.ndarray:
    """This process's ``rows`` of the batch of ``step``; a plain function's whole batch is sliced."""
    if isinstance(batches, BatchRows):
        local = (rows.stop - rows.start, shape[1])
        return _check_batch(
            batches.rows(step, rows.start, rows.stop),
            f"rows({step}, {rows.start}, {rows.stop})",
            local,
            vocab_size,
        )
    return _check_batch(batches(step), f"batch_fn({step})", shape, vocab_size)[rows]


def _write_whole(path: UPath, data: bytes) -> None:
    """Replace the file at ``path`` in one step: a reader (or a resumed run) finds the old file or the new
    one, never a part. An object upload is that already; a local file is written beside and renamed."""
    if not is_local(path):
        path.write_bytes(data)
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def _write_metrics(path: UPath, metrics: list[dict[str, Any]]) -> None:
    _write_whole(path, "".join(json.dumps(m) + "\n" for m in metrics).encode())


def _metrics_before(path: UPath, step: int) -> list[dict[str, Any]]:
    """The steps logged before ``step`` (a killed run may have logged some after its last checkpoint)."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [record for record in records if record["step"] < step]


def _check_resumable(found: dict[str, Any], expected: dict[str, Any], where: UPath) -> None:
    """A checkpoint is only resumed by the run that wrote it (``steps`` may grow: extending a run)."""
    for section in ("model", "train"):
        differ = sorted(
            k
            for k in expected[section].keys() | found[section].keys()
            if k != "steps" and expected[section].get(k) != found[section].get(k)
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
) -> dict[str, Any]:
    """Train into ``out_dir`` (a path or URL), resuming from its last checkpoint if it has one.

    ``batch_fn(step)`` returns ints of shape (batch_size, seq_len + 1); inputs are ``batch[:, :-1]``,
    targets ``batch[:, 1:]``. A ``BatchRows`` source is asked for this process's rows only; a plain
    function's batch is sliced. Bad updates (non-finite, or a loss spike) are skipped and counted; more
    than ``max_consecutive_skips`` in a row raise RuntimeError. ``on_step`` callbacks get each step's
    metrics record. Returns the summary that process 0 also writes to ``train.json``.
    """
    out_dir = UPath(out_dir)
    primary = is_primary()
    mesh = data_mesh()
    if config.batch_size % mesh.size:
        raise ValueError(
            f"batch_size ({config.batch_size}) must be a multiple of the device count ({mesh.size})"
        )
    model = Llama(model_config, nnx.Rngs(config.seed))
    graphdef = nnx.graphdef(model)
    tx = make_optimizer(config)
    state = _initial_state(model, tx, config)
    shardings = state_shardings(state, mesh, config.fsdp)
    meta = {"model": model_config.model_dump(), "train": config.model_dump()}
    if primary:
        if is_local(out_dir):
            out_dir.mkdir(parents=True, exist_ok=True)
        _write_whole(out_dir / MODEL_FILE, json.dumps(meta["model"], indent=2).encode())

    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    rows_sharding = batch_sharding(mesh)
    train_step = jax.jit(
        _make_train_step(graphdef, tx, config),
        in_shardings=(shardings, rows_sharding),
        out_shardings=(shardings, replicated),
    )
    batch_shape = (config.batch_size, model_config.seq_len + 1)
    rows = process_rows(rows_sharding, batch_shape)
    tokens_per_step = config.batch_size * model_config.seq_len
    flops_per_token = model_config.flops_per_token()
    peak_flops = config.peak_flops * mesh.size if config.peak_flops else measure_matmul_peak()
    metrics_path = out_dir / METRICS_FILE

    with Checkpoints(out_dir / CHECKPOINTS_DIR, config.keep_last, config.keep_every) as checkpoints:
        start = checkpoints.latest_step() or 0
        if start:
            _check_resumable(checkpoints.meta(start), meta, out_dir)
            state = checkpoints.restore(start, state, shardings)
            if primary:
                logger.info("resuming from the checkpoint of step %d in %s", start, out_dir)
        else:
            state = jax.device_put(state, shardings)
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
                for step in bar:
                    local = _local_rows(batch_fn, step, rows, batch_shape, model_config.vocab_size)
                    batch = jax.make_array_from_process_local_data(rows_sharding, local, batch_shape)
                    state, out = train_step(state, batch)
                    out = jax.device_get(out)
                    now = time.perf_counter()
                    seconds, last = now - last, now
                    record = {"step": step, **{k: float(v) for k, v in out.items() if k != "skipped"}}
                    record["skipped"] = bool(out["skipped"])
                    record["step_seconds"] = seconds
                    record["tokens_per_s"] = tokens_per_step / seconds
                    record["mfu"] = record["tokens_per_s"] * flops_per_token / peak_flops
                    metrics.append(record)
                    for callback in on_step:
                        callback(record)
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
        "final_loss": float(np.mean([m["loss"] for m in metrics[-FINAL_LOSS_WINDOW:]])),
        "skipped_updates": sum(m["skipped"] for m in metrics),
        "tokens_seen": tokens_per_step * config.steps,
        "params": model_config.num_params(),
        "non_embedding_params": model_config.num_params(include_embeddings=False),
        "flops_per_token": flops_per_token,
        "flops": flops_per_token * tokens_per_step * config.steps,
        "processes": jax.process_count(),
        "devices": mesh.size,
        "hardware": f"{mesh.devices.flat[0].platform}: {mesh.devices.flat[0].device_kind}",
        "wall_seconds": wall_seconds,
        "tokens_per_s": tokens_per_s,
        "peak_flops": peak_flops,
        "mfu": tokens_per_s * flops_per_token / peak_flops,
    }
    if primary:
        recorded = {"config": meta["train"], "summary": summary}
        _write_whole(out_dir / TRAIN_FILE, json.dumps(recorded, indent=2).encode())
        _write_whole(out_dir / LOSS_CURVE_FILE, loss_curve_png(metrics, summary))
    return summary


def abstract_model(config: LlamaConfig) -> tuple[nnx.GraphDef, nnx.State]:
    """The model's structure and parameter shapes, without allocating or initialising anything."""
    return nnx.split(nnx.eval_shape(lambda: Llama(config, nnx.Rngs(0))))


def load_params(
    path: str | os.PathLike[str], step: int | None = None
) -> tuple[nnx.GraphDef, nnx.State, LlamaConfig, int]:
    """Parameters of a training directory's (path or URL) checkpoint ``step`` (default: the latest), on
    one device."""
    path = UPath(path)
    if not (path / MODEL_FILE).is_file() or not (path / CHECKPOINTS_DIR).is_dir():
        raise FileNotFoundError(f"not a training directory (no {MODEL_FILE} and {CHECKPOINTS_DIR}/): {path}")
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


def loss_curve_png(metrics: list[dict[str, Any]], summary: dict[str, Any]) -> bytes:
    """The training loss by step, skipped updates marked, as PNG bytes."""
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    ax.plot([m["step"] for m in metrics], [m["loss"] for m in metrics], linewidth=1)
    skipped = [m for m in metrics if m["skipped"]]
    if skipped:
        ax.scatter([m["step"] for m in skipped], [m["loss"] for m in skipped], c="red", s=8, label="skipped")
        ax.legend()
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(
        f"{summary['params'] / 1e6:.2f}M params, {summary['tokens_seen']:,} tokens: "
        f"loss {summary['initial_loss']:.2f} -> {summary['final_loss']:.2f}"
    )
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return png.getvalue()
