"""Token cache: documents as flat token-id files, and seeded fixed-length batches read from them.

``train.bin`` and ``validation.bin`` hold each document's tokens followed by EOS, as raw uint16 (or
uint32 for vocabularies over 65,536 ids), so training memory-maps them and any batch is a few reads.
A document's split is a hash of its id: the same document stays on the same side when the corpus
grows or is re-processed, so validation text is never trained on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field
from tokenizers import Tokenizer

from marin_pipelines.documents import Document
from marin_pipelines.tokenize.tokenizer import EOS

SPLITS = ("train", "validation")
INFO_FILE = "cache.json"


class CacheConfig(BaseModel):
    """Validation share and hash seed of the split, and how many documents are encoded per batch."""

    model_config = ConfigDict(extra="forbid")

    validation_fraction: float = Field(0.05, gt=0, le=0.5, description="expected share of validation docs")
    seed: int = Field(0, ge=0, lt=1 << 64, description="seed of the id hash that assigns splits")
    encode_batch_size: int = Field(1024, ge=1, description="documents per tokenizer.encode_batch call")


def split_key(doc_id: str, seed: int) -> float:
    """A stable uniform number in [0, 1) for a document id; below validation_fraction -> validation."""
    return (xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=seed) >> 11) / 2**53  # 53 bits: exact


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class _SplitWriter:
    """Appends documents' tokens (plus EOS) to one split's file and counts them."""

    def __init__(self, file: BinaryIO, dtype: np.dtype, eos_id: int):
        self.file, self.dtype, self.eos_id = file, dtype, eos_id
        self.documents = self.tokens = self.text_bytes = 0

    def write(self, ids: list[int], text: str) -> None:
        array = np.array([*ids, self.eos_id], dtype=self.dtype)
        self.file.write(array.tobytes())
        self.documents += 1
        self.tokens += len(array)
        self.text_bytes += len(text.encode("utf-8"))

    def summary(self) -> dict[str, int]:
        return {"documents": self.documents, "tokens": self.tokens, "text_bytes": self.text_bytes}


def build_cache(
    docs: Iterable[Document], tokenizer: Tokenizer, out_dir: Path, config: CacheConfig
) -> dict[str, Any]:
    """Tokenize documents into ``out_dir`` (train.bin, validation.bin, then cache.json); returns cache.json.

    A document goes to validation when ``split_key(id) < validation_fraction``. So that validation is
    never empty when there are 2 or more documents, the train document with the smallest key is held
    back and written last: to validation if no document got there by its key, else to train.
    """
    eos_id = tokenizer.token_to_id(EOS)
    if eos_id is None:
        raise ValueError(f"tokenizer has no {EOS!r} token, which ends every document")
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = token_dtype(vocab_size)
    held: tuple[float, list[int], str] | None = None  # (key, ids, text) of the lowest-key train doc
    docs = iter(docs)
    with (
        (out_dir / "train.bin").open("wb") as train_file,
        (out_dir / "validation.bin").open("wb") as val_file,
    ):
        train, validation = _SplitWriter(train_file, dtype, eos_id), _SplitWriter(val_file, dtype, eos_id)
        while batch := list(islice(docs, config.encode_batch_size)):
            texts = [doc["text"] for doc in batch]
            encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
            for doc, text, encoding in zip(batch, texts, encodings, strict=True):
                key = split_key(doc["id"], config.seed)
                if key < config.validation_fraction:
                    validation.write(encoding.ids, text)
                elif held is None or key < held[0]:
                    if held is not None:
                        train.write(*held[1:])
                    held = (key, encoding.ids, text)
                else:
                    train.write(encoding.ids, text)
        if held is None and validation.documents == 0:
            raise ValueError("no documents to tokenize")
        if held is not None:
            to_validation = validation.documents == 0 and train.documents > 0
            (validation if to_validation else train).write(*held[1:])
    info = {
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "eos_id": eos_id,
        "splits": {"train": train.summary(), "validation": validation.summary()},
        "config": config.model_dump(),
    }
    (out_dir / INFO_FILE).write_text(json.dumps(info, indent=2))
    return info


class TokenCache:
    """A built cache, memory-mapped read-only: ``.train``, ``.validation`` (token ids), ``.info``."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        info_file = self.path / INFO_FILE
        if not info_file.is_file():
            raise FileNotFoundError(f"not a token cache (no {INFO_FILE}): {self.path}")
        self.info: dict[str, Any] = json.loads(info_file.read_text())
        self.train = self._open("train")
        self.validation = self._open("validation")

    def _open(self, split: str) -> np.ndarray:
        dtype = np.dtype(self.info["dtype"])
        if self.info["splits"][split]["tokens"] == 0:  # mmap cannot map an empty file
            return np.zeros(0, dtype=dtype)
        return np.memmap(self.path / f"{split}.bin", dtype=dtype, mode="r")


@lru_cache(maxsize=4)
def _epoch_permutation(num_sequences: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(num_sequences)


class SequenceLoader:
    """Batches of ``seq_len + 1`` token windows (inputs and shifted targets), shuffled per epoch.

    Window ``i`` starts at token ``i * seq_len``. Sample ``k`` of the endless stream is window
    ``perm_e[k % num_sequences]`` with ``e = k // num_sequences`` and ``perm_e`` a permutation seeded
    by ``(seed, e)``, so each epoch visits every window once and ``batch(step)`` is computed directly:
    resuming a run at any step needs no replay of the earlier ones.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int):
        if seq_len < 1 or batch_size < 1:
            raise ValueError(
                f"seq_len and batch_size must be >= 1, got seq_len={seq_len} batch_size={batch_size}"
            )
        if len(tokens) < seq_len + 1:
            raise ValueError(
                f"too few tokens for one sequence: have {len(tokens)}, need seq_len + 1 = {seq_len + 1}"
            )
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.num_sequences = (len(tokens) - 1) // seq_len
        self._offsets = np.arange(seq_len + 1)

    def batch(self, step: int) -> np.ndarray:
        """The ``(batch_size, seq_len + 1)`` int32 batch of training step ``step``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        samples = np.arange(step * self.batch_size, (step + 1) * self.batch_size)
        epochs, positions = np.divmod(samples, self.num_sequences)
        windows = np.empty(self.batch_size, dtype=np.int64)
        for epoch in np.unique(epochs):
            in_epoch = epochs == epoch
            windows[in_epoch] = _epoch_permutation(self.num_sequences, self.seed, int(epoch))[
                positions[in_epoch]
            ]
        starts = windows * self.seq_len
        return np.asarray(self.tokens[starts[:, None] + self._offsets], dtype=np.int32)
