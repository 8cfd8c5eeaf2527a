"""AdamW, AdamH or Muon, with warmup then cosine or WSD decay and global-norm clipping.

``adamw`` keeps Levanter's defaults: decay on matmul kernels only (not norm scales, not the token
embedding), the gradient norm clipped before Adam, and the schedule a pure function of the number of
updates applied.

``adamh`` (Adam on the hyperball, the optimizer of Marin's Delphi scaling suite) holds every weight matrix
on the sphere of its initial Frobenius norm, so there is no weight decay to search: under AdamW the decay
sets the equilibrium weight norm and with it the angular step; here the learning rate is that angular step
directly. Norm scales and every other leaf off the spheres get plain Adam without decay at their own
``adam_learning_rate`` (Levanter's ``adam_lr``, 6e-4 by default) on the same warmup and decay: the angular
rate (0.03-0.1) would move a norm scale of 1 by that much per entry a step. A warm-started run measures
the radii on the parameters it loaded (``warm_optimizer_state``), never on its discarded initialisation.

``muon`` (Jordan 2024) orthogonalizes the Nesterov momentum (``MUON_MOMENTUM``) of each hidden weight
matrix by five Newton-Schulz steps: every parameter of two or more axes inside ``blocks`` except an MoE
router's (``muon_labels``; a 3-D expert weight [experts, d_in, d_out] is a batch of matrices). The token
embedding, the LM head, norm scales and every 1-D leaf get ``adamw`` as above (the Muon papers: Muon is for
hidden matrices). One learning rate serves both, by Moonlight's rule (Liu et al. 2025): each Muon update
is scaled to RMS ``MUON_RMS`` = 0.2, i.e. by 0.2 x sqrt(max(d_in, d_out)) (an orthogonal d_in x d_out
matrix has RMS 1/sqrt(max)), AdamW's typical update RMS, so ``learning_rate`` and ``weight_decay`` keep
their AdamW meaning: ``W -= lr * (0.2 sqrt(max(d_in, d_out)) O + weight_decay * W)``, every Muon matrix
decayed as AdamW decays kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

if TYPE_CHECKING:
    from marin_pipelines.train.train_config import TrainConfig

MUON_MOMENTUM = 0.95  # Jordan's and Moonlight's; beta1 and beta2 stay Adam's (the non-Muon leaves)
MUON_RMS = 0.2  # Moonlight: AdamW's typical update RMS, so AdamW's learning rate and weight decay carry over


def learning_rate_schedule(config: TrainConfig, peak: float | None = None) -> optax.Schedule:
    """Linear warmup (step 0 already moves), then decay to ``min_lr_ratio`` x peak at the last step; the peak
    is ``config.learning_rate`` unless given (AdamH's Adam leaves take ``adam_learning_rate``).

    ``cosine`` decays from the end of warmup; ``wsd`` (warmup-stable-decay) holds the peak and decays
    linearly over the last ``decay_fraction`` of the steps, so a run can be extended from the stable
    phase.
    """
    floor = config.min_lr_ratio
    peak = config.learning_rate if peak is None else peak

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
        return peak * jnp.where(step < config.warmup_steps, warmup, decay)

    return schedule


def decay_mask(params: nnx.State) -> nnx.State:
    """Weight decay on matmul kernels and MoE expert weights (3-D) only: not on norm scales, not on the token
    embedding, not on the MoE balance bias."""
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: any(getattr(key, "key", None) == "kernel" for key in path) or jnp.ndim(leaf) == 3,
        params,
    )


def frobenius(x: jax.Array) -> jax.Array:
    """The Frobenius norm of a matrix; of each matrix of a stack (an MoE weight [experts, d_in, d_out]),
    shaped to broadcast against it."""
    if x.ndim >= 3:
        return jnp.sqrt(jnp.sum(jnp.square(x), axis=(-2, -1), keepdims=True))
    return jnp.linalg.norm(x)


def sphere_mask(params: nnx.State) -> nnx.State:
    """AdamH's spheres: every matrix (matmul kernels, the LM head and the token embedding; each expert of an
    MoE weight its own sphere, ``frobenius``), not norm scales.

    The embedding is on its sphere too, as one matrix (not per row): with one learning rate that is a
    relative step for every parameter, plain Adam would move the 0.02-scale embedding by ``learning_rate``
    per entry (a step far larger than the matrices'), and a separate embedding learning rate would be
    one more knob to search. Rows of tokens never seen shrink slowly as the rest turn, as under weight decay.
    """
    return jax.tree.map(lambda leaf: jnp.ndim(leaf) >= 2, params)


def _names(path: tuple) -> list[str]:
    return [str(getattr(key, "key", getattr(key, "idx", getattr(key, "name", "")))) for key in path]


def muon_labels(params: Any) -> Any:
    """``"muon"`` for a hidden weight matrix (ndim >= 2, in ``blocks``, not an MoE router's), else ``"adam"``.

    The embedding and the LM head are matrices too but stay on Adam: a lookup table and the readout are
    not hidden linear maps, and Muon's spectral steps are derived for those (Jordan 2024; Moonlight).
    """

    def label(path: tuple, leaf: jax.Array) -> str:
        names = _names(path)
        hidden = "blocks" in names and not any("router" in name for name in names)
        return "muon" if hidden and jnp.ndim(leaf) >= 2 else "adam"

    return jax.tree_util.tree_map_with_path(label, params)


def _matrix_axes(updates: Any) -> Any:
    """Each Muon leaf's last two axes are (reduction, output), as ``x @ W``; leading axes (an MoE weight's
    experts) are a batch, each matrix orthogonalized and scaled on its own."""
    return jax.tree.map(
        lambda u: optax.contrib.MuonDimensionNumbers(reduction_axis=u.ndim - 2, output_axis=u.ndim - 1),
        updates,
    )


def _consistent_rms(update: jax.Array, _: Any) -> jax.Array:
    """Moonlight's scale: an orthogonalized d_in x d_out update to RMS ``MUON_RMS``."""
    return update * (MUON_RMS * math.sqrt(max(update.shape[-2:])))


def muon(config: TrainConfig, schedule: optax.Schedule) -> optax.GradientTransformation:
    """Muon on ``muon_labels``' matrices, AdamW (``decay_mask``) on the rest, one schedule for both.

    Not ``optax.contrib.muon`` (whose ``consistent_rms=0.2`` is this same scaling): its Adam part shares
    Muon's Nesterov flag and decays all of its leaves or none, where ``adamw`` here decays kernels only."""
    return optax.partition(
        {
            "muon": optax.chain(
                optax.contrib.scale_by_muon(beta=MUON_MOMENTUM, weight_dimension_numbers=_matrix_axes),
                optax.stateless_with_tree_map(_consistent_rms),
                optax.add_decayed_weights(config.weight_decay),
                optax.scale_by_learning_rate(schedule),
            ),
            "adam": optax.adamw(
                schedule, b1=config.beta1, b2=config.beta2, weight_decay=config.weight_decay, mask=decay_mask
            ),
        },
        muon_labels,
    )


class HyperballState(NamedTuple):
    count: jax.Array  # updates applied: the schedule's step
    radius: Any  # each leaf's Frobenius norm at init (used where the mask is True); saved, so resume is exact


def radii(params: optax.Params) -> Any:
    """Each leaf's Frobenius norm (each expert's, for a stack), in float32: the spheres AdamH keeps."""
    return jax.tree.map(lambda p: frobenius(p).astype(jnp.float32), params)


def hyperball(
    learning_rate: optax.ScalarOrSchedule,
    adam_learning_rate: optax.ScalarOrSchedule,
    mask: Callable[[Any], Any] = sphere_mask,
) -> optax.GradientTransformation:
    """Step along the incoming update ``u`` (Adam's), keeping each masked matrix on its sphere.

    A masked matrix W of initial norm R moves a relative step ``lr`` along ``-u``, then back onto its sphere:
    ``W' = R * normalize(W - lr * R * u / ||u||)``. So W turns by at most ``asin(lr)`` (about lr) radians
    a step, whatever the scale of ``u``. R is stored at init rather than read off W, so float error cannot
    build up: every step lands at norm R to float32 precision. Other leaves take ``-adam_learning_rate * u``
    (plain Adam). ``update`` needs ``params`` (optax updates are deltas: the projection returns ``W' - W``).
    """

    def init(params: optax.Params) -> HyperballState:
        return HyperballState(jnp.zeros((), jnp.int32), radii(params))

    def update(
        updates: optax.Updates, state: HyperballState, params: optax.Params | None = None
    ) -> tuple[optax.Updates, HyperballState]:
        if params is None:
            raise ValueError("hyperball projects the parameters: pass params to update")
        lr, adam_lr = (
            rate(state.count) if callable(rate) else rate for rate in (learning_rate, adam_learning_rate)
        )

        def step(u: jax.Array, radius: jax.Array, w: jax.Array, on_sphere: bool) -> jax.Array:
            if not on_sphere:
                return (-adam_lr * u).astype(w.dtype)
            tiny = jnp.finfo(jnp.float32).tiny  # a zero update leaves W be; a zero matrix stays zero
            moved = w - lr * radius * u / jnp.maximum(frobenius(u), tiny)
            return (radius * moved / jnp.maximum(frobenius(moved), tiny) - w).astype(w.dtype)

        deltas = jax.tree.map(step, updates, state.radius, params, mask(params))
        return deltas, HyperballState(optax.safe_increment(state.count), state.radius)

    return optax.GradientTransformation(init, update)


def warm_optimizer_state(opt_state: Any, params: Any) -> Any:
    """The optimiser state of a warm-started run whose ``params`` are loaded: the learning-rate schedule back
    at step 0 (the run re-warms) and AdamH's radii measured on ``params``, so that its first step keeps the
    loaded norms (radii made at init would pull every matrix to its random initialisation's norm, and a
    base's own radii would shrink a router that grew experts); every other leaf (moments, Adam's
    bias-correction count) as it was."""

    def restart(node: Any) -> Any:
        if isinstance(node, HyperballState):
            return HyperballState(jnp.zeros_like(node.count), radii(params))
        if isinstance(node, optax.ScaleByScheduleState):
            return node._replace(count=jnp.zeros_like(node.count))
        return node

    schedules = (optax.ScaleByScheduleState, HyperballState)
    return jax.tree.map(restart, opt_state, is_leaf=lambda node: isinstance(node, schedules))


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """``config.optimizer``: AdamW, Adam's update through ``hyperball`` (``weight_decay`` unused), or Muon
    with AdamW; the gradient's global norm clipped first."""
    schedule = learning_rate_schedule(config)
    clip = optax.clip_by_global_norm(config.grad_clip)
    if config.optimizer == "adamh":
        adam_schedule = learning_rate_schedule(config, config.adam_learning_rate)
        return optax.chain(
            clip, optax.scale_by_adam(b1=config.beta1, b2=config.beta2), hyperball(schedule, adam_schedule)
        )
    if config.optimizer == "muon":
        return optax.chain(clip, muon(config, schedule))
    return optax.chain(
        clip,
        optax.adamw(
            schedule, b1=config.beta1, b2=config.beta2, weight_decay=config.weight_decay, mask=decay_mask
        ),
    )
