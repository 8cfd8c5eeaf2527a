"""AdamW with warmup then cosine or WSD decay, global-norm clipping and a weight-decay mask.

Levanter's defaults: decay on matmul kernels only (not norm scales, not the token embedding), the
gradient norm clipped before Adam, and the schedule a pure function of the number of updates applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import optax
from flax import nnx

if TYPE_CHECKING:
    from marin_pipelines.train.train_config import TrainConfig


def learning_rate_schedule(config: TrainConfig) -> optax.Schedule:
    """Linear warmup (step 0 already moves), then decay to ``min_lr_ratio`` x peak at the last step.

    ``cosine`` decays from the end of warmup; ``wsd`` (warmup-stable-decay) holds the peak and decays
    linearly over the last ``decay_fraction`` of the steps, so a run can be extended from the stable
    phase.
    """
    floor = config.min_lr_ratio

    def schedule(step: jax.Array) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        warmup = (step + 1) / max(config.warmup_steps, 1)
        if config.lr_schedule == "cosine":
            start = config.warmup_steps
        else:
            start = max(config.steps - round(config.decay_fraction * config.steps), config.warmup_steps)
        progress = jnp.clip((step - start) / max(config.steps - start - 1, 1), 0, 1)
        if config.lr_schedule == "cosine":
            decay = floor + (1 - floor) * 0.5 * (1 + jnp.cos(jnp.pi * progress))
        else:
            decay = jnp.where(step < start, 1.0, 1 - (1 - floor) * progress)
        return config.learning_rate * jnp.where(step < config.warmup_steps, warmup, decay)

    return schedule


def decay_mask(params: nnx.State) -> nnx.State:
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
            mask=decay_mask,
        ),
    )
