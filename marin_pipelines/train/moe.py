"""Mixture-of-experts feed-forward layers: a router picks ``top_k`` of ``experts`` SwiGLU experts per token.

The router scores each token's experts with a softmax over ``x @ W_router`` (float32). Which experts a token
goes to is chosen on those probabilities plus a per-expert **balance bias** that is not trained by the loss:
after every update it moves by ``bias_rate`` towards the mean load (up for experts that got fewer tokens
than the mean, down for those that got more), the auxiliary-loss-free balancing of DeepSeek-V3 (Wang et al.
2024), which balances the load without a loss term that fights the language-modelling loss. The classic
alternative, Switch's auxiliary loss ``experts x sum_i load_i x mean_prob_i`` (1 when balanced), is
``balance: aux_loss``. The router z-loss (ST-MoE: mean logsumexp(router logits)^2) keeps the logits small.
The gate weights are the chosen experts' probabilities (without the bias), renormalised over the top_k
when top_k > 1 (a single expert keeps its probability, so the router still gets a gradient).

Tokens reach their experts in one of two ways:
- ``capacity_factor`` c: each expert takes at most ``ceil(c x tokens x top_k / experts)`` tokens of a batch
  into a fixed buffer ``[experts, capacity, d_model]`` (GShard, Switch); first choices are placed before
  second choices, and assignments beyond the capacity are dropped (their token keeps only the residual and
  any shared expert). Fixed shapes shard over an ``expert`` mesh axis.
- ``dropless``: every assignment is computed, tokens sorted by expert and multiplied group by group with
  ``jax.lax.ragged_dot``. It is a grouped matmul where the backend has one (TPU); XLA lowers it densely on
  NVIDIA GPUs (Marin measured it on B200) and on CPU, where it costs about as much as running every expert
  on every token (``bench/gpu_mfu.py`` measures dropless against capacity on a lent GPU).
``shared_experts`` are experts every token goes through (DeepSeekMoE), one SwiGLU of their summed width.

Padding (the positions of packed fine-tuning rows that hold no example, ``valid`` False) is not routed: it
takes no expert slot, counts in no load, balancing loss, z-loss, entropy or bias update, and its output is
zero. The capacity stays sized by all the batch's positions, a static shape.

Where this differs from DeepSeek-V3: its gates are sigmoids (affinities normalised over the chosen
experts), here a softmax over all experts; it adds a small sequence-wise balancing loss beside the bias,
here there is none (``aux_loss`` is Switch's batch-wise loss, the alternative to the bias, not a
complement); and the router's losses are averaged over the MoE layers (``router_loss``), not summed.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from pydantic import BaseModel, ConfigDict, Field, model_validator


class MoEConfig(BaseModel):
    """``model.moe``: which layers are mixtures of experts, and how tokens are routed and balanced."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    experts: int = Field(ge=2, description="routed experts per MoE layer")
    top_k: int = Field(ge=1, description="experts each token is routed to")
    shared_experts: int = Field(default=0, ge=0, description="experts every token also goes through")
    d_ff: int | None = Field(default=None, gt=0, description="each expert's hidden width; None: model.d_ff")
    capacity_factor: float = Field(
        default=1.25, gt=0, description="an expert takes at most this x its even share of a batch's tokens"
    )
    dropless: bool = Field(default=False, description="no capacity: every assignment is computed")
    every: int = Field(default=1, ge=1, description="every k-th layer is MoE (layers k-1, 2k-1, ...)")
    balance: Literal["bias", "aux_loss"] = Field(
        default="bias",
        description="bias: auxiliary-loss-free balancing (DeepSeek-V3); aux_loss: Switch's balancing loss",
    )
    bias_rate: float = Field(default=1e-3, ge=0, description="bias: step of the balance bias per update")
    aux_loss_weight: float = Field(default=1e-2, ge=0, description="aux_loss: weight of the balancing loss")
    router_z_loss_weight: float = Field(default=1e-3, ge=0, description="weight of the router z-loss")

    @model_validator(mode="after")
    def _check(self) -> MoEConfig:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must not exceed experts ({self.experts})")
        if self.dropless and "capacity_factor" in self.model_fields_set:
            raise ValueError("give capacity_factor or dropless: true, not both (dropless has no capacity)")
        return self

    def expert_d_ff(self, model_d_ff: int) -> int:
        return self.d_ff or model_d_ff

    def layer_params(self, d_model: int, model_d_ff: int) -> tuple[int, int]:
        """(total, active) matmul parameters of one MoE layer: the router, routed and shared experts; a
        token passes through the router, ``top_k`` routed and every shared expert."""
        expert = 3 * d_model * self.expert_d_ff(model_d_ff)
        router = d_model * self.experts
        return router + (self.experts + self.shared_experts) * expert, router + (
            self.top_k + self.shared_experts
        ) * expert

    def capacity(self, tokens: int) -> int:
        """Slots per expert for a batch of ``tokens``: all of them when dropless (no expert is picked twice
        by one token)."""
        if self.dropless:
            return tokens
        return min(tokens, math.ceil(self.capacity_factor * tokens * self.top_k / self.experts))


class RouterStats(NamedTuple):
    """One MoE layer's routing of a batch; scalars are float32, ``load`` is [experts]."""

    load: jax.Array  # share of the batch's assignments routed to each expert (before the capacity)
    dropped: jax.Array  # share of assignments dropped for want of capacity
    entropy: jax.Array  # mean entropy of the router's distribution, nats
    aux_loss: jax.Array  # Switch's balancing loss: 1 when balanced, `experts` when one expert takes all
    z_loss: jax.Array  # mean logsumexp(router logits)^2


class RouterBias(nnx.Variable):
    """The balance bias: part of the model's state (saved, sharded, resumed) but moved by ``rebalance``, not
    by the optimiser; it only picks experts, so its gradient is zero."""


def _expert_weights(experts: int, d_in: int, d_out: int, std: float, rngs: nnx.Rngs) -> nnx.Param:
    return nnx.Param(nnx.initializers.normal(std)(rngs.params(), (experts, d_in, d_out), jnp.float32))


class MoE(nnx.Module):
    """Routed SwiGLU experts (weights ``[experts, d_in, d_out]``) plus optional shared ones."""

    def __init__(
        self,
        moe: MoEConfig,
        d_model: int,
        d_ff: int,
        dtype: str,
        rngs: nnx.Rngs,
        *,
        std: float,
        out_std: float,
        shared: nnx.Module | None,
    ):
        """Experts of width ``moe.expert_d_ff(d_ff)`` over ``d_model``, their matmuls in ``dtype``; weights
        drawn as the dense MLP's (``std``; ``out_std`` for the projection back to the residual); ``shared``:
        the shared experts' SwiGLU, or None."""
        d, f = d_model, moe.expert_d_ff(d_ff)
        self.moe, self.dtype = moe, dtype
        init = nnx.initializers.normal(std)
        self.router = nnx.Linear(d, moe.experts, use_bias=False, kernel_init=init, rngs=rngs)
        self.router_bias = RouterBias(jnp.zeros(moe.experts, jnp.float32))
        self.w_gate = _expert_weights(moe.experts, d, f, std, rngs)
        self.w_up = _expert_weights(moe.experts, d, f, std, rngs)
        self.w_down = _expert_weights(moe.experts, f, d, out_std, rngs)
        self.shared = shared

    def __call__(self, x: jax.Array, valid: jax.Array | None = None) -> tuple[jax.Array, RouterStats]:
        """``x[B, T, d]``; ``valid[B, T]`` (optional) is False at padding, which is not routed."""
        moe, dtype = self.moe, self.dtype
        batch, seq_len, d = x.shape
        tokens = x.reshape(-1, d)
        n, k, experts = tokens.shape[0], moe.top_k, moe.experts
        real = jnp.ones(n, bool) if valid is None else valid.reshape(n)
        real_count = jnp.maximum(real.sum(), 1).astype(jnp.float32)

        logits = self.router(tokens.astype(jnp.float32))  # [n, experts]
        probs = jax.nn.softmax(logits, axis=-1)
        _, chosen = jax.lax.top_k(probs + jax.lax.stop_gradient(self.router_bias[...]), k)  # [n, k]
        gates = jnp.take_along_axis(probs, chosen, axis=-1)
        if k > 1:
            gates = gates / gates.sum(-1, keepdims=True)
        gates = jnp.where(real[:, None], gates, 0)

        # Assignments in priority order (every token's first choice before any second choice), sorted by
        # expert (stably, so priority holds within an expert), padding's in a spare group past the last
        # expert, which no expert computes; `rank` is each one's place in its group.
        expert_of = jnp.where(jnp.tile(real, k), chosen.T.reshape(-1), experts)  # [k n]
        token_of = jnp.tile(jnp.arange(n), k)
        order = jnp.argsort(expert_of, stable=True)
        sorted_expert = expert_of[order]
        groups = jnp.bincount(expert_of, length=experts + 1)
        counts = groups[:experts]
        rank = jnp.arange(k * n) - (jnp.cumsum(groups) - groups)[sorted_expert]
        inputs = tokens[token_of[order]].astype(dtype)
        weights = [w[...].astype(dtype) for w in (self.w_gate, self.w_up, self.w_down)]

        routed = sorted_expert < experts
        if moe.dropless:  # rows past the experts' groups (padding) come out zero
            outputs, kept = _ragged_swiglu(inputs, weights, counts), routed
        else:
            capacity = moe.capacity(n)
            kept = routed & (rank < capacity)
            slot = jnp.where(kept, sorted_expert * capacity + rank, experts * capacity)  # overflow: one spare
            buffer = jnp.zeros((experts * capacity + 1, d), dtype).at[slot].add(inputs)
            hidden = _batched_swiglu(buffer[:-1].reshape(experts, capacity, d), weights)
            outputs = jnp.concatenate([hidden.reshape(-1, d), jnp.zeros((1, d), dtype)])[slot]

        per_assignment = jnp.zeros((k * n, d), outputs.dtype).at[order].set(outputs)  # back to priority order
        y = (per_assignment.reshape(k, n, d) * gates.T[..., None].astype(outputs.dtype)).sum(0)
        if self.shared is not None:
            y = y + jnp.where(real[:, None], self.shared(tokens), 0)

        def mean(per_token: jax.Array) -> jax.Array:  # over the real tokens
            return jnp.where(real, per_token, 0).sum() / real_count

        load = counts / (k * real_count)
        stats = RouterStats(
            load=load,
            dropped=1.0 - kept.sum() / (k * real_count),
            entropy=mean(-(probs * jnp.log(jnp.maximum(probs, 1e-30))).sum(-1)),
            aux_loss=experts * (load * jnp.where(real[:, None], probs, 0).sum(0) / real_count).sum(),
            z_loss=mean(jax.nn.logsumexp(logits, axis=-1) ** 2),
        )
        return y.reshape(batch, seq_len, d).astype(x.dtype), stats


def _batched_swiglu(x: jax.Array, weights: list[jax.Array]) -> jax.Array:
    """Each expert's SwiGLU on its own buffer rows: x[experts, capacity, d]."""
    gate, up, down = weights
    hidden = jax.nn.silu(jnp.einsum("ecd,edf->ecf", x, gate)) * jnp.einsum("ecd,edf->ecf", x, up)
    return jnp.einsum("ecf,efd->ecd", hidden, down)


def _ragged_swiglu(x: jax.Array, weights: list[jax.Array], counts: jax.Array) -> jax.Array:
    """Each expert's SwiGLU on its group of consecutive rows of x (sorted by expert; ``counts`` per group)."""
    gate, up, down = weights
    group_sizes = counts.astype(jnp.int32)
    hidden = jax.nn.silu(jax.lax.ragged_dot(x, gate, group_sizes)) * jax.lax.ragged_dot(x, up, group_sizes)
    return jax.lax.ragged_dot(hidden, down, group_sizes)


def expert_axis(name: str, ndim: int) -> int | None:
    """The experts axis of an MoE leaf by its name (a parameter, or an optimiser leaf ending in one):
    the expert weights' first, the router kernel's last, the balance bias's only; None for any other leaf."""
    last = name.split(".")[-1]
    if last in ("w_gate", "w_up", "w_down") and ndim == 3:
        return 0
    if name.endswith("router.kernel") and ndim == 2:
        return 1
    if last == "router_bias" and ndim == 1:
        return 0
    return None


def router_loss(stats: dict[int, RouterStats], moe: MoEConfig) -> jax.Array:
    """What routing adds to the training loss, averaged over the MoE layers: the router z-loss, and the
    balancing loss when ``balance`` is ``aux_loss``."""
    z_loss = jnp.mean(jnp.stack([s.z_loss for s in stats.values()]))
    loss = moe.router_z_loss_weight * z_loss
    if moe.balance == "aux_loss":
        loss = loss + moe.aux_loss_weight * jnp.mean(jnp.stack([s.aux_loss for s in stats.values()]))
    return loss


def router_metrics(stats: dict[int, RouterStats]) -> dict[str, jax.Array]:
    """Per-step metrics, averaged over the MoE layers: the busiest expert's load over the mean load (1 is
    perfectly balanced), the share of assignments dropped, the router's entropy, balancing and z losses."""
    layers = list(stats.values())

    def mean(values: list[jax.Array]) -> jax.Array:
        return jnp.mean(jnp.stack(values))

    return {
        "moe_load_max_over_mean": mean([s.load.max() / s.load.mean() for s in layers]),
        "moe_dropped": mean([s.dropped for s in layers]),
        "moe_router_entropy": mean([s.entropy for s in layers]),
        "moe_aux_loss": mean([s.aux_loss for s in layers]),
        "moe_router_z_loss": mean([s.z_loss for s in layers]),
    }


def rebalance(params: nnx.State, stats: dict[int, RouterStats], moe: MoEConfig) -> nnx.State:
    """The parameters with each MoE layer's balance bias moved by ``bias_rate`` towards the mean load
    (``balance: bias``; otherwise unchanged). ``stats`` are keyed by block index."""
    if moe.balance != "bias" or not stats:
        return params

    def step(path: tuple, leaf: jax.Array) -> jax.Array:
        keys = [getattr(key, "key", getattr(key, "idx", None)) for key in path]
        if len(keys) >= 4 and keys[0] == "blocks" and keys[2:4] == ["mlp", "router_bias"]:
            load = stats[int(keys[1])].load
            return leaf + moe.bias_rate * jnp.sign(load.mean() - load)
        return leaf

    return jax.tree_util.tree_map_with_path(step, params)
