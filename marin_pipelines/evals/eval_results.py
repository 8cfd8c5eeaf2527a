"""Bits per byte of a model on held-out token streams: comparable across tokenizers."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import jax
import numpy as np
import optax
from flax import nnx
from tokenizers import Tokenizer

from marin_pipelines.tokenize.text_sources import read_chunk, text_chunks
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.tokenize.tokenizer import (
    RUN_MADE_HERE,
    TOKENIZER_FILE,
    SpecialTokens,
    special_token_ids,
    tokenizer_hash,
)
from marin_pipelines.train.model import Llama

EVAL_BATCH_SIZE = 16  # sequences per forward pass of an evaluation, unless it is told otherwise


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


def text_tokens(
    paths: list[str], tokenizer: Tokenizer, specials: SpecialTokens = RUN_MADE_HERE
) -> np.ndarray:
    """Documents of .txt / .jsonl / .parquet files as one stream, each preceded by the run's BOS and followed
    by its EOS (``specials``), so that the first document is predicted too. For a run made here BOS is EOS,
    written once between documents: the stream is laid out as a token cache lays it out."""
    ids = special_token_ids(tokenizer, specials)
    stream = [ids.bos]
    for chunk in text_chunks(paths):
        for _, text in read_chunk(chunk):
            if stream[-1] != ids.bos:  # after a document's EOS that is not also its BOS
                stream.append(ids.bos)
            stream += [*tokenizer.encode(text, add_special_tokens=False).ids, ids.eos]
    return np.asarray(stream, np.int32)


def bpb_tokens(
    path: str,
    tokenizer: Tokenizer,
    specials: SpecialTokens = RUN_MADE_HERE,
    tokenizer_file: str = "the evaluating tokenizer",
) -> np.ndarray:
    """A bits-per-byte set: a token cache's validation split, or text files (``text_tokens``). A cache made
    with another tokenizer is refused, naming both tokenizers' files (``tokenizer_file``: where
    ``tokenizer`` was read) and hashes: its ids would be read as other tokens, their bytes counted by the
    wrong table, and the bits per byte would mean nothing. Text is laid out with the run's ``specials``."""
    try:
        cache = TokenCache(path)
    except FileNotFoundError:
        return text_tokens([path], tokenizer, specials)
    theirs, mine = cache.info.get("tokenizer_hash"), tokenizer_hash(tokenizer)
    if theirs != mine:
        raise ValueError(
            f"the bits-per-byte set {path} is a token cache made with another tokenizer ({path.rstrip('/')}/"
            f"{TOKENIZER_FILE}, hash {theirs}) than the one evaluating ({tokenizer_file}, hash {mine}, "
            f"{tokenizer.get_vocab_size()} tokens): evaluate the text it was "
            "made from, or a cache made with the checkpoint's tokenizer"
        )
    return np.asarray(cache.validation)


def evaluate_bpb_sets(
    model: Llama,
    sets: dict[str, np.ndarray],
    token_bytes: np.ndarray,
    seq_len: int,
    batch_size: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, float | int]]:
    """``evaluate_bpb`` on each named set, plus ``overall``: all their nats over all their tokens / bytes.
    ``progress`` gets a line per set as it finishes."""
    if not sets:
        raise ValueError("no bits-per-byte sets to evaluate")
    if "overall" in sets:
        raise ValueError("'overall' is the name of the sets' total; give the set another name")
    results = {}
    for name, tokens in sets.items():
        started = time.perf_counter()
        results[name] = result = evaluate_bpb(model, tokens, token_bytes, seq_len, batch_size)
        if progress:
            progress(
                f"bits per byte of {name}: {result['bits_per_byte']:.4f} ({result['tokens']} tokens, "
                f"{time.perf_counter() - started:.1f} s)"
            )
    results["overall"] = combine_bpb(list(results.values()))
    return results


def combine_bpb(results: list[dict[str, float | int]]) -> dict[str, float | int]:
    """Several sets' results as one: their nats over their tokens (loss) and over their bytes."""
    nats = sum(r["loss"] * r["tokens"] for r in results)
    tokens = sum(int(r["tokens"]) for r in results)
    total_bytes = sum(int(r["bytes"]) for r in results)
    return {
        "loss": nats / tokens,
        "bits_per_byte": nats / math.log(2) / total_bytes,
        "tokens": tokens,
        "bytes": total_bytes,
    }
