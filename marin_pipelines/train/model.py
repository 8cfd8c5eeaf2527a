"""A Llama-style decoder in Flax NNX, readable top to bottom.

Token embedding -> n_layers x [RMSNorm -> grouped-query causal attention with RoPE (optionally
QK-norm) -> residual, RMSNorm -> SwiGLU MLP (or, with ``moe``, a mixture of SwiGLU experts: ``moe.py``)
-> residual] -> final RMSNorm -> LM head (or the tied embedding). Parameters are float32; matmuls run in
``dtype`` (bfloat16 on TPU/GPU); logits are float32.

``Llama.cached`` is the same model reading and writing a key/value cache (``KVCache``): each row of a batch
is one sequence at its own positions, so a batch of prompts is prefilled and then decoded a token at a time
(marin_pipelines/inference/ drives it).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from marin_pipelines.train.fp8 import fp8_dot_general
from marin_pipelines.train.moe import MoE, MoEConfig, RouterStats

INIT_STD = 0.02


class LlamaConfig(BaseModel):
    """Model shape. Counts and FLOPs are computed from it, so plans need no model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vocab_size: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    d_ff: int = Field(gt=0)
    rope_theta: float = Field(default=10_000.0, gt=0)
    tie_embeddings: bool = False
    qk_norm: bool = Field(
        default=False, description="RMSNorm on each head's queries and keys (OLMo 2, Qwen 3)"
    )
    norm_eps: float = Field(default=1e-5, gt=0)
    dtype: Literal["float32", "bfloat16"] = Field(default="float32", description="compute dtype of matmuls")
    moe: MoEConfig | None = Field(default=None, description="mixture-of-experts MLPs (moe.py); None: dense")
    fp8: bool = Field(
        default=False,
        description="FP8 matmuls with current scaling in the blocks' dense projections (fp8.py): GPUs with "
        "FP8 tensor cores only",
    )

    @model_validator(mode="after")
    def _check_heads(self) -> LlamaConfig:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim = d_model / n_heads ({self.head_dim}) must be even for RoPE")
        if self.moe is not None and self.moe.every > self.n_layers:
            raise ValueError(
                f"moe.every ({self.moe.every}) must not exceed n_layers ({self.n_layers}): every k-th layer "
                "is a mixture of experts, so no layer would be one"
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and (layer + 1) % self.moe.every == 0

    def _layers_matmul_params(self, active: bool) -> int:
        """Matmul parameters of all layers; ``active``: only those one token passes through (MoE: top_k)."""
        d, kv = self.d_model, self.n_kv_heads * self.head_dim
        attention = d * d + 2 * d * kv + d * d  # wq, wk, wv, wo
        moe_layers = 0 if self.moe is None else self.n_layers // self.moe.every  # is_moe_layer's count
        total = self.n_layers * attention + (self.n_layers - moe_layers) * 3 * d * self.d_ff  # gate, up, down
        if moe_layers:  # counted, not looped: a ladder's planning asks this of tens of thousands of shapes
            assert self.moe is not None
            total += moe_layers * self.moe.layer_params(self.d_model, self.d_ff)[active]
        return total

    def num_params(self, include_embeddings: bool = True, active: bool = False) -> int:
        """Trainable parameters (the MoE balance bias is state, not trained). Embeddings are the token
        embedding plus the untied LM head. ``active``: those one token uses, which differ for MoE only."""
        norms = (2 * self.n_layers + 1) * self.d_model + self.n_layers * 2 * self.head_dim * self.qk_norm
        non_embedding = self._layers_matmul_params(active) + norms
        if not include_embeddings:
            return non_embedding
        embeddings = self.vocab_size * self.d_model * (1 if self.tie_embeddings else 2)
        return non_embedding + embeddings

    def flops_per_token(self) -> float:
        """Training FLOPs per token, Levanter's ``lm_flops_per_token`` x 3 (forward + backward).

        Forward: 2 x the active matmul parameters (every layer's projections, for MoE the router and the
        top_k and shared experts a token goes through, plus the LM head, tied or not; the embedding lookup
        and norm scales do no matmuls), plus per layer the attention over the full T x T map as Megatron
        counts it (causality not discounted): 2 T d for the QK^T logits, 2 T d for the weighted sum of
        values and 3 T n_heads for mask and softmax. So 6N + attention, N active.
        """
        matmul = self._layers_matmul_params(active=True) + self.vocab_size * self.d_model
        attention = self.n_layers * (4 * self.seq_len * self.d_model + 3 * self.seq_len * self.n_heads)
        return 3.0 * (2.0 * matmul + attention)


# Shapes only; the caller supplies vocab_size and seq_len. Non-embedding params in the comment.
MODEL_SIZES: dict[str, dict[str, int]] = {
    "nano": dict(d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=192),  # 0.20M
    "micro": dict(d_model=96, n_layers=4, n_heads=6, n_kv_heads=3, d_ff=256),  # 0.41M
    "tiny": dict(d_model=128, n_layers=6, n_heads=8, n_kv_heads=4, d_ff=352),  # 1.1M
    "mini": dict(d_model=192, n_layers=6, n_heads=6, n_kv_heads=3, d_ff=512),  # 2.4M
    "small": dict(d_model=256, n_layers=8, n_heads=8, n_kv_heads=4, d_ff=688),  # 5.8M
    "20m": dict(d_model=384, n_layers=12, n_heads=6, n_kv_heads=3, d_ff=1024),  # 19M
    "50m": dict(d_model=512, n_layers=16, n_heads=8, n_kv_heads=4, d_ff=1408),  # 47M
    "150m": dict(d_model=768, n_layers=24, n_heads=12, n_kv_heads=4, d_ff=2048),  # 151M
    "300m": dict(d_model=1024, n_layers=24, n_heads=16, n_kv_heads=8, d_ff=2816),  # 283M
    "600m": dict(d_model=1536, n_layers=24, n_heads=16, n_kv_heads=8, d_ff=4096),  # 623M
    "1b": dict(d_model=2048, n_layers=22, n_heads=16, n_kv_heads=8, d_ff=5632),  # 1.04B
}


def preset(name: str, vocab_size: int, seq_len: int) -> LlamaConfig:
    """The named size from MODEL_SIZES with the tokenizer's vocab and the training length."""
    if name not in MODEL_SIZES:
        raise ValueError(f"model size {name!r} is not one of {sorted(MODEL_SIZES)}")
    return LlamaConfig(vocab_size=vocab_size, seq_len=seq_len, **MODEL_SIZES[name])


def _dense(
    d_in: int, d_out: int, std: float, config: LlamaConfig, rngs: nnx.Rngs, head: bool = False
) -> nnx.Linear:
    """A bias-free projection; in FP8 with ``config.fp8``, unless it is the LM head (``head``)."""
    init = nnx.initializers.normal(std)
    dot_general = fp8_dot_general if config.fp8 and not head else jax.lax.dot_general
    return nnx.Linear(
        d_in, d_out, use_bias=False, kernel_init=init, dtype=config.dtype, dot_general=dot_general, rngs=rngs
    )


def _norm(dim: int, config: LlamaConfig, rngs: nnx.Rngs) -> nnx.RMSNorm:
    return nnx.RMSNorm(dim, epsilon=config.norm_eps, dtype=config.dtype, rngs=rngs)


def apply_rope(x: jax.Array, theta: float, positions: jax.Array | None = None) -> jax.Array:
    """Rotate channel pairs (i, i + D/2) of x[B, T, H, D] by angle position * theta^(-2i/D); positions are
    0..T-1, or ``positions[B, T]`` (each packed example counting from 0)."""
    seq_len, head_dim = x.shape[1], x.shape[-1]
    inv_freq = theta ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    if positions is None:
        angles = jnp.arange(seq_len, dtype=jnp.float32)[:, None] * inv_freq[None, :]  # [T, D/2]
        cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    else:
        angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, D/2]
        cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


def segment_positions(segments: jax.Array) -> jax.Array:
    """Each token's position within its segment (a run of equal ids along the row): 0 where a run starts."""
    index = jnp.broadcast_to(jnp.arange(segments.shape[1]), segments.shape)
    starts = jnp.concatenate([jnp.ones_like(segments[:, :1], bool), segments[:, 1:] != segments[:, :-1]], 1)
    return index - jax.lax.cummax(jnp.where(starts, index, 0), axis=1)


def attention_implementation(q: jax.Array, backend: str | None = None) -> str | None:
    """cuDNN's fused attention on a GPU (``backend``, default JAX's) in half precision, where it applies
    (head_dim a multiple of 8, at most 128); elsewhere JAX's choice.

    On an H200, XLA's own attention took 160 ms of the 150M model's 258 ms forward and backward; cuDNN's
    brought the pair to 98 ms (``bench/gpu_step_profile.py``, README's GPU section).
    """
    half = q.dtype in (jnp.bfloat16, jnp.float16)
    fits = q.shape[-1] % 8 == 0 and q.shape[-1] <= 128
    return "cudnn" if (backend or jax.default_backend()) == "gpu" and half and fits else None


def _out_std(config: LlamaConfig) -> float:
    """Init scale of the projections back into the residual: GPT-2's, shrinking with depth."""
    return INIT_STD / math.sqrt(2 * config.n_layers)


class KVCache(NamedTuple):
    """Each layer's keys (after RoPE) and values, ``[rows, max_len, n_kv_heads, head_dim]`` in the compute
    dtype: row r holds one sequence's positions 0..max_len-1. What lies past a row's length is stale and
    never attended to (a query at position p sees keys 0..p)."""

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]

    @classmethod
    def empty(cls, config: LlamaConfig, rows: int, max_len: int) -> KVCache:
        shape = (rows, max_len, config.n_kv_heads, config.head_dim)

        def layers() -> tuple[jax.Array, ...]:  # arrays of their own: a step donates each
            return tuple(jnp.zeros(shape, config.dtype) for _ in range(config.n_layers))

        return cls(layers(), layers())


class Attention(nnx.Module):
    """Grouped-query causal self-attention: n_kv_heads key/value heads shared by n_heads queries."""

    def __init__(self, config: LlamaConfig, rngs: nnx.Rngs):
        d, hd = config.d_model, config.head_dim
        self.config = config
        self.wq = _dense(d, config.n_heads * hd, INIT_STD, config, rngs)
        self.wk = _dense(d, config.n_kv_heads * hd, INIT_STD, config, rngs)
        self.wv = _dense(d, config.n_kv_heads * hd, INIT_STD, config, rngs)
        self.wo = _dense(config.n_heads * hd, d, _out_std(config), config, rngs)
        # QK-norm bounds the attention logits, which keeps large learning rates stable.
        self.q_norm = _norm(hd, config, rngs) if config.qk_norm else None
        self.k_norm = _norm(hd, config, rngs) if config.qk_norm else None

    def _qkv(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Queries, keys and values of x[B, T, d] as [B, T, heads, head_dim], QK-normed, before RoPE."""
        c = self.config
        batch, seq_len, _ = x.shape
        q = self.wq(x).reshape(batch, seq_len, c.n_heads, c.head_dim)
        k = self.wk(x).reshape(batch, seq_len, c.n_kv_heads, c.head_dim)
        v = self.wv(x).reshape(batch, seq_len, c.n_kv_heads, c.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def __call__(self, x: jax.Array, segments: jax.Array | None = None) -> jax.Array:
        c = self.config
        batch, seq_len, _ = x.shape
        q, k, v = self._qkv(x)
        if segments is None:
            q, k = apply_rope(q, c.rope_theta), apply_rope(k, c.rope_theta)
            out = jax.nn.dot_product_attention(  # [B, T, n_heads, head_dim]
                q, k, v, is_causal=True, implementation=attention_implementation(q)
            )
        else:  # packed examples: each from position 0, attending only within itself
            positions = segment_positions(segments)
            q, k = apply_rope(q, c.rope_theta, positions), apply_rope(k, c.rope_theta, positions)
            same = (segments[:, :, None] == segments[:, None, :])[:, None]  # [B, 1, T, T]
            out = jax.nn.dot_product_attention(q, k, v, mask=same, is_causal=True)
        return self.wo(out.reshape(batch, seq_len, c.n_heads * c.head_dim))

    def cached(
        self,
        x: jax.Array,
        positions: jax.Array,
        k_cache: jax.Array,
        v_cache: jax.Array,
        window: int | None = None,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """x[B, T, d] at ``positions[B, T]`` of each row's sequence: their keys and values are written into
        the caches at those positions (past the cache's end: dropped), and each query attends to its row's
        cached keys up to its own position, read from the first ``window`` positions only (default all;
        every position must be below it): a decode step reads the keys so far, not the whole cache.
        Returns the output and both caches."""
        c = self.config
        batch, seq_len, _ = x.shape
        q, k, v = self._qkv(x)
        q, k = apply_rope(q, c.rope_theta, positions), apply_rope(k, c.rope_theta, positions)
        rows = jnp.arange(batch)[:, None]
        k_cache = k_cache.at[rows, positions].set(k.astype(k_cache.dtype), mode="drop")
        v_cache = v_cache.at[rows, positions].set(v.astype(v_cache.dtype), mode="drop")
        keys, values = k_cache[:, :window], v_cache[:, :window]
        seen = jnp.arange(keys.shape[1])[None, None, :] <= positions[:, :, None]  # [B, T, window]
        out = jax.nn.dot_product_attention(
            q, keys.astype(q.dtype), values.astype(q.dtype), mask=seen[:, None]
        )
        return self.wo(out.reshape(batch, seq_len, c.n_heads * c.head_dim)), k_cache, v_cache


class SwiGLU(nnx.Module):
    """MLP with a SiLU-gated linear unit: w_down(silu(w_gate x) * w_up x), hidden width ``d_ff``."""

    def __init__(self, config: LlamaConfig, rngs: nnx.Rngs, d_ff: int | None = None):
        d_ff = d_ff or config.d_ff
        self.w_gate = _dense(config.d_model, d_ff, INIT_STD, config, rngs)
        self.w_up = _dense(config.d_model, d_ff, INIT_STD, config, rngs)
        self.w_down = _dense(d_ff, config.d_model, _out_std(config), config, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.w_down(jax.nn.silu(self.w_gate(x)) * self.w_up(x))


class Block(nnx.Module):
    """Pre-norm transformer block; layer ``layer``'s MLP is a mixture of experts where the config says."""

    def __init__(self, config: LlamaConfig, layer: int, rngs: nnx.Rngs):
        self.attn_norm = _norm(config.d_model, config, rngs)
        self.attn = Attention(config, rngs)
        self.mlp_norm = _norm(config.d_model, config, rngs)
        self.mlp: SwiGLU | MoE
        if config.is_moe_layer(layer):
            assert config.moe is not None
            moe = config.moe
            width = moe.shared_experts * moe.expert_d_ff(config.d_ff)
            shared = SwiGLU(config, rngs, d_ff=width) if width else None
            self.mlp = MoE(
                moe,
                config.d_model,
                config.d_ff,
                config.dtype,
                rngs,
                std=INIT_STD,
                out_std=_out_std(config),
                shared=shared,
            )
        else:
            self.mlp = SwiGLU(config, rngs)

    def __call__(
        self, x: jax.Array, segments: jax.Array | None = None
    ) -> tuple[jax.Array, RouterStats | None]:
        x = x + self.attn(self.attn_norm(x), segments)
        return self._mlp(x, None if segments is None else segments > 0)  # padding (segment 0) not routed

    def _mlp(self, x: jax.Array, valid: jax.Array | None) -> tuple[jax.Array, RouterStats | None]:
        if isinstance(self.mlp, MoE):
            y, stats = self.mlp(self.mlp_norm(x), valid)
            return x + y, stats
        return x + self.mlp(self.mlp_norm(x)), None

    def cached(
        self,
        x: jax.Array,
        positions: jax.Array,
        valid: jax.Array,
        k_cache: jax.Array,
        v_cache: jax.Array,
        window: int | None = None,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The block over cached attention (``Attention.cached``); positions not ``valid`` are not routed."""
        out, k_cache, v_cache = self.attn.cached(self.attn_norm(x), positions, k_cache, v_cache, window)
        return self._mlp(x + out, valid)[0], k_cache, v_cache


class Llama(nnx.Module):
    """Decoder-only language model: tokens int32[B, T] -> next-token logits float32[B, T, V]."""

    def __init__(self, config: LlamaConfig, rngs: nnx.Rngs):
        self.config = config
        init = nnx.initializers.normal(INIT_STD)
        self.embed = nnx.Embed(
            config.vocab_size, config.d_model, embedding_init=init, dtype=config.dtype, rngs=rngs
        )
        self.blocks = nnx.List([Block(config, layer, rngs) for layer in range(config.n_layers)])
        self.final_norm = _norm(config.d_model, config, rngs)
        self.lm_head = (
            None
            if config.tie_embeddings
            else _dense(config.d_model, config.vocab_size, INIT_STD, config, rngs, head=True)
        )

    def __call__(self, tokens: jax.Array, segments: jax.Array | None = None) -> jax.Array:
        """``segments[B, T]`` (int, optional): ids of the examples packed into each row; a token attends
        only to earlier tokens of its own example, whose positions count from 0."""
        return self.forward(tokens, segments)[0]

    def forward(
        self, tokens: jax.Array, segments: jax.Array | None = None
    ) -> tuple[jax.Array, dict[int, RouterStats]]:
        """The logits and, for training, each MoE layer's routing statistics by block index."""
        x = self.embed(tokens)
        routing = {}
        for layer, block in enumerate(self.blocks):
            x, stats = block(x, segments)
            if stats is not None:
                routing[layer] = stats
        return self._logits(x), routing

    def cached(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        valid: jax.Array,
        cache: KVCache,
        window: int | None = None,
    ) -> tuple[jax.Array, KVCache]:
        """Logits of ``tokens[B, T]`` at ``positions[B, T]`` of each row's sequence, given what ``cache``
        holds of the positions before; the cache with their keys and values written. ``valid[B, T]`` is
        False at padding (what pads a short prompt to the batch's length, rows that hold no sequence).
        ``window`` (static, above every position): attend over the cache's first positions only."""
        x = self.embed(tokens)
        ks, vs = [], []
        for block, k_cache, v_cache in zip(self.blocks, cache.k, cache.v, strict=True):
            x, k_cache, v_cache = block.cached(x, positions, valid, k_cache, v_cache, window)
            ks.append(k_cache)
            vs.append(v_cache)
        return self._logits(x), KVCache(tuple(ks), tuple(vs))

    def _logits(self, x: jax.Array) -> jax.Array:
        x = self.final_norm(x)
        logits = self.embed.attend(x) if self.lm_head is None else self.lm_head(x)
        return logits.astype(jnp.float32)
