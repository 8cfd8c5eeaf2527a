"""The training stage: a config and a batch source in, a checkpoint directory out.

The step is functional (``nnx.split`` once, ``nnx.merge`` inside one ``jax.jit``): parameters and
optimizer state are plain pytrees, so a run is a pure function of its seed and its batches and two
runs with the same inputs give bit-identical parameters.

A checkpoint directory holds ``params.npz`` (flat parameter paths -> arrays), ``model.json``,
``train.json`` (config + summary), ``metrics.jsonl`` (one line per step) and ``loss_curve.png``.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm.auto import tqdm

from marin_pipelines.train.model import Llama, LlamaConfig

logger = logging.getLogger(__name__)
REFRESH = 0.5 if sys.stderr.isatty() else 30.0  # seconds between progress lines; logs are not terminals

PARAMS_FILE = "params.npz"
MODEL_FILE = "model.json"
TRAIN_FILE = "train.json"
METRICS_FILE = "metrics.jsonl"
LOSS_CURVE_FILE = "loss_curve.png"
FINAL_LOSS_WINDOW = 10


class TrainConfig(BaseModel):
    """Optimisation settings: AdamW, linear warmup then cosine decay, global-norm clipping."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=300, gt=0)
    batch_size: int = Field(default=16, gt=0)
    learning_rate: float = Field(default=3e-3, gt=0)
    warmup_steps: int = Field(default=30, ge=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    weight_decay: float = Field(default=0.1, ge=0)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.95, ge=0, lt=1)
    grad_clip: float = Field(default=1.0, gt=0)
    seed: int = 0
    log_every: int = Field(default=10, gt=0)
    peak_flops: float = Field(default=140e9, gt=0, description="device peak FLOP/s, the MFU denominator")

    @model_validator(mode="after")
    def _check_warmup(self) -> TrainConfig:
        if self.warmup_steps > self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must not exceed steps ({self.steps})")
        return self


def learning_rate_schedule(config: TrainConfig) -> optax.Schedule:
    """Linear warmup (step 0 already moves), then cosine to min_lr_ratio x peak at the last step."""

    def schedule(step: jax.Array) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        warmup = (step + 1) / max(config.warmup_steps, 1)
        progress = jnp.clip(
            (step - config.warmup_steps) / max(config.steps - config.warmup_steps - 1, 1), 0, 1
        )
        cosine = config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + jnp.cos(jnp.pi * progress))
        return config.learning_rate * jnp.where(step < config.warmup_steps, warmup, cosine)

    return schedule


def _decay_mask(params: nnx.State) -> nnx.State:
    """Weight decay on matmul kernels only: not on norm scales, not on the token embedding."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: any(getattr(key, "key", None) == "kernel" for key in path), params
    )


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(config.grad_clip),
        optax.adamw(
            learning_rate_schedule(config),
            b1=config.beta1,
            b2=config.beta2,
            weight_decay=config.weight_decay,
            mask=_decay_mask,
        ),
    )


TrainStep = Callable[..., tuple[nnx.State, optax.OptState, dict[str, jax.Array]]]


def _make_train_step(
    graphdef: nnx.GraphDef, tx: optax.GradientTransformation, schedule: optax.Schedule
) -> TrainStep:
    def loss_fn(params: nnx.State, batch: jax.Array) -> jax.Array:
        logits = nnx.merge(graphdef, params)(batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    @jax.jit
    def train_step(params: nnx.State, opt_state: optax.OptState, batch: jax.Array, step: jax.Array):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": schedule(step)}

    return train_step


def _check_batch(batch: np.ndarray, step: int, shape: tuple[int, int], vocab_size: int) -> np.ndarray:
    batch = np.asarray(batch)
    if batch.shape != shape or not np.issubdtype(batch.dtype, np.integer):
        raise ValueError(
            f"batch_fn({step}) gave {batch.dtype}{list(batch.shape)}; expected int32{list(shape)}"
        )
    if batch.min() < 0 or batch.max() >= vocab_size:
        raise ValueError(f"batch_fn({step}) gave token ids outside [0, {vocab_size})")
    return batch.astype(np.int32)


def train(
    model_config: LlamaConfig,
    config: TrainConfig,
    batch_fn: Callable[[int], np.ndarray],
    out_dir: Path,
    progress: bool = True,
) -> dict[str, Any]:
    """Train from ``nnx.Rngs(config.seed)`` on ``batch_fn(step)`` and write the checkpoint into ``out_dir``.

    ``batch_fn(step)`` returns ints of shape (batch_size, seq_len + 1); inputs are ``batch[:, :-1]``,
    targets ``batch[:, 1:]``. Raises RuntimeError at the first non-finite loss. Returns the summary
    also written to ``train.json``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    graphdef, params = nnx.split(Llama(model_config, nnx.Rngs(config.seed)))
    tx = make_optimizer(config)
    train_step = _make_train_step(graphdef, tx, learning_rate_schedule(config))
    opt_state = tx.init(params)

    batch_shape = (config.batch_size, model_config.seq_len + 1)
    tokens_per_step = config.batch_size * model_config.seq_len
    flops_per_token = model_config.flops_per_token()
    metrics: list[dict[str, float]] = []
    start = last = time.perf_counter()
    with (
        (out_dir / METRICS_FILE).open("w") as metrics_file,
        tqdm(
            range(config.steps), desc="train", unit="step", disable=not progress, mininterval=REFRESH
        ) as bar,
    ):
        for step in bar:
            batch = _check_batch(batch_fn(step), step, batch_shape, model_config.vocab_size)
            params, opt_state, out = train_step(params, opt_state, batch, step)
            record = {"step": step, **{name: float(value) for name, value in jax.device_get(out).items()}}
            now = time.perf_counter()
            seconds, last = now - last, now
            if not math.isfinite(record["loss"]):
                raise RuntimeError(f"non-finite loss {record['loss']} at step {step}; lower learning_rate?")
            record["step_seconds"] = seconds
            record["tokens_per_s"] = tokens_per_step / seconds
            record["mfu"] = record["tokens_per_s"] * flops_per_token / config.peak_flops
            metrics_file.write(json.dumps(record) + "\n")
            metrics.append(record)
            if step % config.log_every == 0 or step == config.steps - 1:
                bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}")
                logger.info("step %d loss %.4f grad_norm %.3f", step, record["loss"], record["grad_norm"])
    wall_seconds = time.perf_counter() - start

    # Throughput excludes step 0, which carries the compile.
    steady_seconds = sum(m["step_seconds"] for m in metrics[1:]) or metrics[0]["step_seconds"]
    steady_tokens = tokens_per_step * max(config.steps - 1, 1)
    tokens_per_s = steady_tokens / steady_seconds
    summary = {
        "steps": config.steps,
        "initial_loss": metrics[0]["loss"],
        "final_loss": float(np.mean([m["loss"] for m in metrics[-FINAL_LOSS_WINDOW:]])),
        "tokens_seen": tokens_per_step * config.steps,
        "params": model_config.num_params(),
        "non_embedding_params": model_config.num_params(include_embeddings=False),
        "flops_per_token": flops_per_token,
        "flops": flops_per_token * tokens_per_step * config.steps,
        "wall_seconds": wall_seconds,
        "first_step_seconds": metrics[0]["step_seconds"],
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * flops_per_token / config.peak_flops,
    }
    save_checkpoint(nnx.merge(graphdef, params), out_dir)
    (out_dir / TRAIN_FILE).write_text(
        json.dumps({"config": config.model_dump(), "summary": summary}, indent=2)
    )
    plot_loss_curve(metrics, summary, out_dir / LOSS_CURVE_FILE)
    return summary


def _path_key(path: tuple) -> str:
    return "/".join(str(part) for part in path)


def save_checkpoint(model: Llama, out_dir: Path) -> None:
    """Write ``params.npz`` (flat parameter paths such as ``blocks/0/attn/wq/kernel``) and ``model.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    arrays = {_path_key(p): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model))}
    with (out_dir / PARAMS_FILE).open("wb") as f:
        np.savez(f, **arrays)
    (out_dir / MODEL_FILE).write_text(json.dumps(model.config.model_dump(), indent=2))


def load_checkpoint(path: Path) -> tuple[Llama, LlamaConfig]:
    """The model exactly as trained, from a checkpoint directory written by ``train``."""
    path = Path(path)
    config = LlamaConfig.model_validate_json((path / MODEL_FILE).read_text())
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Llama(config, nnx.Rngs(0))))
    flat = nnx.to_flat_state(state)
    with np.load(path / PARAMS_FILE) as arrays:
        expected, found = {_path_key(p) for p, _ in flat}, set(arrays.files)
        if expected != found:
            raise ValueError(
                f"{path / PARAMS_FILE} does not match {MODEL_FILE}: "
                f"missing {sorted(expected - found)}, unexpected {sorted(found - expected)}"
            )
        for p, variable in flat:
            array = arrays[_path_key(p)]
            if array.shape != variable.get_value().shape:
                raise ValueError(
                    f"{_path_key(p)} has shape {array.shape}, expected {variable.get_value().shape}"
                )
            variable.set_value(jnp.asarray(array))
    return nnx.merge(graphdef, nnx.from_flat_state(flat)), config


def plot_loss_curve(metrics: list[dict[str, float]], summary: dict[str, Any], path: Path) -> None:
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    ax.plot([m["step"] for m in metrics], [m["loss"] for m in metrics], linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(
        f"{summary['params'] / 1e6:.2f}M params, {summary['tokens_seen']:,} tokens: "
        f"loss {summary['initial_loss']:.2f} -> {summary['final_loss']:.2f}"
    )
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
