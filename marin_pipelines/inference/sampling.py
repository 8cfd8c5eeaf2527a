"""How the next token is chosen: greedy, or sampled at a temperature from the top-k and top-p (nucleus) set.

Each row of a decode batch has its own settings and its own random stream: the key of a request's n-th
generated token is ``fold_in(key(seed), n)``, so a request gets the same tokens whatever else shares its
batch, and the same seed gives the same text again.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

TOP_LOGPROBS = 5  # the most alternatives a token's log-probabilities list (OpenAI's completions allow 5)


class SamplingParams(BaseModel):
    """One request's generation settings; ``temperature`` 0 is greedy (top_k and top_p then unused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_new_tokens: int = Field(default=64, ge=0, description="tokens generated at most")
    temperature: float = Field(default=0.0, ge=0, description="0: greedy; else logits / temperature")
    top_k: int = Field(default=0, ge=0, description="sample among the k likeliest tokens; 0: all")
    top_p: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="sample among the likeliest tokens whose "
        "probabilities sum to p (the first always in); 1: all",
    )
    seed: int | None = Field(default=None, description="the random stream's seed; None: a fresh one")
    stop: tuple[str, ...] = Field(default=(), description="text that ends the generation (not returned)")
    stop_tokens: tuple[int, ...] = Field(default=(), description="token ids that end it, besides the run's")
    logprobs: int = Field(default=0, ge=0, le=TOP_LOGPROBS, description="alternatives listed per token")


class RowSettings(NamedTuple):
    """A decode batch's sampling settings, one entry a row."""

    temperature: jax.Array  # float32 [B]
    top_k: jax.Array  # int32 [B]
    top_p: jax.Array  # float32 [B]
    seed: jax.Array  # uint32 [B]
    count: jax.Array  # int32 [B]: tokens the row's request has generated so far


class Chosen(NamedTuple):
    """Each row's next token, its log-probability under the model, and the likeliest alternatives."""

    token: jax.Array  # int32 [B]
    logprob: jax.Array  # float32 [B]
    top_tokens: jax.Array  # int32 [B, TOP_LOGPROBS]
    top_logprobs: jax.Array  # float32 [B, TOP_LOGPROBS]


def choose(logits: jax.Array, rows: RowSettings) -> Chosen:
    """The next token of each row of ``logits[B, V]``; log-probabilities are the model's own (before the
    temperature and the top-k / top-p cut), as OpenAI's API reports them."""
    logprobs = jax.nn.log_softmax(logits, axis=-1)
    greedy = jnp.argmax(logits, axis=-1)
    token = jax.lax.cond(
        jnp.any(rows.temperature > 0),
        lambda: jnp.where(rows.temperature > 0, _sample(logits, rows), greedy),
        lambda: greedy,
    ).astype(jnp.int32)
    top_logprobs, top_tokens = jax.lax.top_k(logprobs, TOP_LOGPROBS)
    chosen = jnp.take_along_axis(logprobs, token[:, None], axis=-1)[:, 0]
    return Chosen(token, chosen, top_tokens.astype(jnp.int32), top_logprobs)


def _sample(logits: jax.Array, rows: RowSettings) -> jax.Array:
    """Sampled tokens: the logits over the temperature, sorted; ranks past top_k cut, then the tail past
    top_p of what remains (renormalised); one categorical draw a row from its own key."""
    scaled = logits / jnp.maximum(rows.temperature, 1e-6)[:, None]
    ordered, order = jax.lax.top_k(scaled, logits.shape[-1])  # descending
    rank = jnp.arange(logits.shape[-1])[None, :]
    keep = (rows.top_k[:, None] <= 0) | (rank < rows.top_k[:, None])
    probs = jax.nn.softmax(jnp.where(keep, ordered, -jnp.inf), axis=-1)
    keep &= (jnp.cumsum(probs, axis=-1) - probs) < rows.top_p[:, None]  # mass before this one
    keys = jax.vmap(lambda seed, n: jax.random.fold_in(jax.random.key(seed), n))(rows.seed, rows.count)
    picked = jax.vmap(jax.random.categorical)(keys, jnp.where(keep, ordered, -jnp.inf))
    return jnp.take_along_axis(order, picked[:, None], axis=-1)[:, 0]
