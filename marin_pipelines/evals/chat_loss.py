"""Loss on held-out chat data: mean nats per assistant token, the number SFT lowers.

Conversations are rendered by the chat template, packed whole into rows of the model's sequence length
(segment ids keep them apart, as in training) and scored in batches of one shape, so there is one compile.
Only the assistant's tokens count, each predicted from earlier tokens of its own conversation.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from marin_pipelines.tokenize.chat_data import (
    ChatStats,
    ChatTemplate,
    PackedSequence,
    pack,
    read_conversations,
)
from marin_pipelines.train.model import Llama


@nnx.jit
def _packed_nll(model: Llama, tokens: jax.Array, segments: jax.Array) -> jax.Array:
    logits = model(tokens[:, :-1], segments[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])


def chat_loss(
    model: Llama, template: ChatTemplate, urls: Sequence[str | os.PathLike[str]], batch_size: int
) -> dict[str, Any]:
    """``{"loss": nats per assistant token, "assistant_tokens": how many were scored, ...}`` with the counts
    of what was read (conversations, skipped lines by reason, conversations cut to the sequence length,
    tokens in all). With no assistant token to score, ``loss`` is None and ``no_loss`` says why."""
    stats = ChatStats()
    examples = (template.encode(messages) for messages in read_conversations(urls, stats))
    rows = list(pack(examples, model.config.seq_len, stats))
    total, count = 0.0, 0.0
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        batch += [_empty(model.config.seq_len)] * (batch_size - len(batch))  # one shape, one compile
        tokens = np.stack([row.tokens for row in batch])
        segments = np.stack([row.segments for row in batch])
        weights = np.stack([row.target_weights for row in batch])
        nll = np.asarray(_packed_nll(model, tokens, segments), np.float64)
        total += float((nll * weights).sum())
        count += float(weights.sum())
    result = {**stats.as_dict(), "loss": total / count if count else None, "assistant_tokens": int(count)}
    if not count:
        result["no_loss"] = (
            f"no conversation read (lines skipped: {dict(stats.skipped)})"
            if not stats.conversations
            else f"no assistant token of {stats.conversations} conversations within seq_len "
            f"{model.config.seq_len} ({stats.cut_off} cut off before the assistant's turn)"
        )
    return result


def _empty(seq_len: int) -> PackedSequence:
    zeros = np.zeros(seq_len + 1, np.int32)
    return PackedSequence(zeros, zeros.astype(bool), zeros)
