"""Bits per byte of a model on a held-out token stream: comparable across tokenizers."""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
from flax import nnx

from marin_pipelines.train.model import Llama


@nnx.jit
def _token_nll(model: Llama, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(model(inputs), targets)


def evaluate_bpb(
    model: Llama, tokens: np.ndarray, token_bytes: np.ndarray, seq_len: int, batch_size: int
) -> dict[str, float | int]:
    """Loss and bits per byte over a flat 1-D token stream, every token after the first predicted once.

    Window w reads tokens[w*T : w*T + T] and predicts tokens[w*T + 1 : w*T + T + 1], so windows
    overlap by one token and each starts with a fresh context. The last window is padded and masked;
    batches have one shape, so there is one compile.

    ``token_bytes[id]`` is the UTF-8 length of token ``id``. Tokens of zero bytes (EOS, other
    specials) still add their nats, so bits_per_byte = total nats / ln 2 / total bytes charges them
    to the text's bytes. Returns loss (mean nats per predicted token), bits_per_byte, tokens, bytes.
    """
    tokens = np.asarray(tokens)
    token_bytes = np.asarray(token_bytes)
    if tokens.ndim != 1 or len(tokens) < 2:
        raise ValueError(f"tokens must be a 1-D stream of at least 2 tokens, got shape {tokens.shape}")
    if seq_len < 1 or batch_size < 1:
        raise ValueError(f"seq_len ({seq_len}) and batch_size ({batch_size}) must be positive")
    vocab_size = min(model.config.vocab_size, len(token_bytes))
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise ValueError(f"token ids must lie in [0, {vocab_size}) (model vocab and token_bytes length)")

    predicted = len(tokens) - 1
    n_batches = math.ceil(predicted / (seq_len * batch_size))
    padded = np.zeros(n_batches * batch_size * seq_len + 1, np.int32)
    padded[: len(tokens)] = tokens
    inputs = padded[:-1].reshape(n_batches, batch_size, seq_len)
    targets = padded[1:].reshape(n_batches, batch_size, seq_len)
    mask = (np.arange(len(padded) - 1) < predicted).reshape(n_batches, batch_size, seq_len)

    total_nats = 0.0
    for batch in range(n_batches):
        nll = np.asarray(_token_nll(model, inputs[batch], targets[batch]), np.float64)
        total_nats += float(nll[mask[batch]].sum())
    total_bytes = int(token_bytes[tokens[1:]].sum())
    if total_bytes == 0:
        raise ValueError("the predicted tokens span zero bytes; bits per byte is undefined")
    return {
        "loss": total_nats / predicted,
        "bits_per_byte": total_nats / math.log(2) / total_bytes,
        "tokens": predicted,
        "bytes": total_bytes,
    }
