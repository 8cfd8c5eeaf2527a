"""AdamW or AdamH, with warmup then cosine or WSD decay and global-norm clipping.

``adamw`` keeps Levanter's defaults: decay on matmul kernels only (not norm scales, not the token
embedding), the gradient norm clipped before Adam, and the schedule a pure function of the number of
updates applied.

``adamh`` (Adam on the hyperball, the optimizer of Marin's Delphi scaling suite) holds every weight matrix
on the sphere of its initial Frobenius norm, so there is no weight decay to search: under AdamW the decay
sets the equilibrium weight norm and with it the angular step; here the learning rate is that angular step
directly. Norm scales get plain Adam without decay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

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


def sphere_mask(params: nnx.State) -> nnx.State:
    """AdamH's spheres: every matrix (matmul kernels, the LM head and the token embedding), not norm scales.

    The embedding is on its sphere too, as one matrix (not per row): with one learning rate that is a
    relative step for every parameter, plain Adam would move the 0.02-scale embedding by ``learning_rate``
    per entry (a step far larger than the matrices'), and a separate embedding learning rate would be
    one more knob to search. Rows of tokens never seen shrink slowly as the rest turn, as under weight decay.
    """
    return jax.tree.map(lambda leaf: jnp.ndim(leaf) >= 2, params)


class HyperballState(NamedTuple):
    count: jax.Array  # updates applied: the schedule's step
    radius: Any  # each leaf's Frobenius norm at init (used where the mask is True); saved, so resume is exact


def hyperball(
    learning_rate: optax.ScalarOrSchedule, mask: Callable[[Any], Any] = sphere_mask
) -> optax.GradientTransformation:
    """Step along the incoming update ``u`` (Adam's), keeping each masked matrix on its sphere.

    A masked matrix W of initial norm R moves a relative step ``lr`` along ``-u``, then back onto its sphere:
    ``W' = R * normalize(W - lr * R * u / ||u||)``. So W turns by at most ``asin(lr)`` (about lr) radians
    a step, whatever the scale of ``u``. R is stored at init rather than read off W, so float error cannot
    build up: every step lands at norm R to float32 precision. Other leaves take ``-lr * u``. ``update``
    needs ``params`` (optax updates are deltas: the projection returns ``W' - W``).
    """

    def init(params: optax.Params) -> HyperballState:
        radius = jax.tree.map(lambda p: jnp.linalg.norm(p).astype(jnp.float32), params)
        return HyperballState(jnp.zeros((), jnp.int32), radius)

    def update(
        updates: optax.Updates, state: HyperballState, params: optax.Params | None = None
    ) -> tuple[optax.Updates, HyperballState]:
        if params is None:
            raise ValueError("hyperball projects the parameters: pass params to update")
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate

        def step(u: jax.Array, radius: jax.Array, w: jax.Array, on_sphere: bool) -> jax.Array:
            if not on_sphere:
                return (-lr * u).astype(w.dtype)
            tiny = jnp.finfo(jnp.float32).tiny  # a zero update leaves W be; a zero matrix stays zero
            moved = w - lr * radius * u / jnp.maximum(jnp.linalg.norm(u), tiny)
            return (radius * moved / jnp.maximum(jnp.linalg.norm(moved), tiny) - w).astype(w.dtype)

        deltas = jax.tree.map(step, updates, state.radius, params, mask(params))
        return deltas, HyperballState(optax.safe_increment(state.count), state.radius)

    return optax.GradientTransformation(init, update)


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """``config.optimizer``: AdamW, or Adam's update through ``hyperball`` (``weight_decay`` unused)."""
    schedule = learning_rate_schedule(config)
    clip = optax.clip_by_global_norm(config.grad_clip)
    if config.optimizer == "adamh":
        return optax.chain(clip, optax.scale_by_adam(b1=config.beta1, b2=config.beta2), hyperball(schedule))
    return optax.chain(
        clip,
        optax.adamw(
            schedule, b1=config.beta1, b2=config.beta2, weight_decay=config.weight_decay, mask=decay_mask
        ),
    )
