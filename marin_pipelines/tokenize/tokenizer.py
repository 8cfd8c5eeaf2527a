"""Byte-level BPE tokenizer trained on the corpus (HF ``tokenizers``), or any byte-level tokenizer.json.

Byte-level BPE encodes every string losslessly (no unknown tokens), and each token stands for a known
number of UTF-8 bytes, which turns a model's loss per token into bits per byte.

A run's special tokens (``SpecialTokens``): the runs made here start and end documents with EOS (GPT-2's
``<|endoftext|>``); a model imported from Hugging Face has its own (``<|begin_of_text|>``, ``</s>``, a chat
model's ``<|eot_id|>``), written in its run folder (``special_tokens.json``). Whatever reads a run's
tokenizer asks ``run_special_tokens`` which they are.

Text is data: a literal ``<|endoftext|>`` inside a document is encoded as ordinary bytes by the
tokenizers returned here (``encode_special_tokens``), so only the token cache places EOS ids.
That setting is not saved in tokenizer.json: load with ``load_tokenizer`` to get it back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from upath import UPath

from marin_pipelines.store import write_url

EOS = "<|endoftext|>"  # ends every document
BOS = EOS  # GPT-2 style: the token between documents also starts the stream
TOKENIZER_FILE = "tokenizer.json"
SPECIAL_TOKENS_FILE = "special_tokens.json"  # a run's SpecialTokens, where they are not the defaults


class SpecialTokens(BaseModel):
    """The special tokens of a run's tokenizer, as strings: what starts a text, what ends one, and the
    further tokens a chat model ends its turn with (generation stops at ``eos`` and at each of ``stop``).
    The defaults are those of every run made here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bos: str = Field(BOS, min_length=1, description="starts every text (a document, a prompt)")
    eos: str = Field(EOS, min_length=1, description="ends every document; a chat template's eos_token")
    stop: tuple[str, ...] = Field(
        (), description="further tokens that end a generation: a chat model's end of turn (<|eot_id|>)"
    )


RUN_MADE_HERE = SpecialTokens()  # the special tokens of every run made here


class SpecialTokenIds(NamedTuple):
    """``SpecialTokens`` as ids of one tokenizer; ``stop`` holds ``eos`` first, then the further ones."""

    bos: int
    eos: int
    stop: tuple[int, ...]


def run_special_tokens(run_dir: str | os.PathLike[str]) -> SpecialTokens:
    """The special tokens of the run folder (a path or URL) ``run_dir``: its ``special_tokens.json``, or the
    defaults where it has none (every run made here)."""
    file = UPath(run_dir) / SPECIAL_TOKENS_FILE
    if not file.is_file():
        return RUN_MADE_HERE
    try:
        return SpecialTokens.model_validate_json(file.read_text())
    except ValidationError as e:
        raise ValueError(f"{file} is not a record of special tokens: {e.errors()[0]['msg']}") from None


def save_special_tokens(run_dir: str | os.PathLike[str], specials: SpecialTokens) -> None:
    """Record ``specials`` in the run folder ``run_dir``, unless they are the defaults (no file needed)."""
    if specials != RUN_MADE_HERE:
        write_url(str(UPath(run_dir) / SPECIAL_TOKENS_FILE), specials.model_dump_json(indent=2))


def special_token_ids(tokenizer: Tokenizer, specials: SpecialTokens) -> SpecialTokenIds:
    """The ids of ``specials`` in ``tokenizer``; a ValueError names the ones it lacks."""
    names = [specials.bos, specials.eos, *specials.stop]
    missing = [name for name in dict.fromkeys(names) if tokenizer.token_to_id(name) is None]
    if missing:
        raise ValueError(
            f"the tokenizer has no {', '.join(map(repr, missing))} token; add it as a special token (the "
            f"run's special tokens: bos {specials.bos!r}, eos {specials.eos!r}, stop {list(specials.stop)})"
        )
    ids = [tokenizer.token_to_id(name) for name in names]
    return SpecialTokenIds(ids[0], ids[1], tuple(dict.fromkeys(ids[1:])))


class TokenizerConfig(BaseModel):
    """Size of the learned vocabulary (256 byte tokens and EOS included) and merge frequency floor."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(4096, ge=257, le=1 << 20, description="256 bytes + EOS + merges")
    min_frequency: int = Field(2, ge=1, description="a pair seen fewer times is never merged")


class NoText(ValueError):
    """Nothing to train a tokenizer on or to tokenize into a cache: no documents, or only empty ones."""


def train_tokenizer(texts: Iterable[str], config: TokenizerConfig) -> Tokenizer:
    """Train byte-level BPE on ``texts``; EOS gets id 0 and all 256 bytes are in the vocabulary.

    Raises ``NoText`` when ``texts`` holds no character to learn from (a BPE of bytes alone would be a
    tokenizer nobody asked for)."""
    seen = {"documents": 0, "chars": 0}

    def counted(texts: Iterable[str]) -> Iterable[str]:
        for text in texts:
            seen["documents"] += 1
            seen["chars"] += len(text)
            yield text

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(counted(texts), trainer=trainer)
    if not seen["chars"]:
        raise NoText(f"no text to train the tokenizer on ({seen['documents']} documents, all empty or none)")
    tokenizer.encode_special_tokens = True
    return tokenizer


def load_tokenizer(path: str | os.PathLike[str], specials: SpecialTokens = RUN_MADE_HERE) -> Tokenizer:
    """A tokenizer.json (or a directory holding one) that has the special tokens ``specials`` (by default:
    EOS, which ends every document)."""
    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {file}")
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as e:  # HF tokenizers raises a bare Exception for JSON it cannot read
        raise ValueError(f"{file} is not a tokenizer.json that HF tokenizers can read: {e}") from None
    try:
        special_token_ids(tokenizer, specials)
    except ValueError as e:
        raise ValueError(f"{file}: {e}") from None
    tokenizer.encode_special_tokens = True
    return tokenizer


def tokenizer_hash(tokenizer: Tokenizer | str) -> str:
    """A tokenizer's identity (a tokenizer or its JSON): a hash of its canonical JSON (``to_str``), whatever
    the file's formatting. A token cache records it (``cache.json``), so that whatever reads the cache's
    token ids can tell whether they mean what its own tokenizer's do."""
    if isinstance(tokenizer, str):
        try:
            tokenizer = Tokenizer.from_str(tokenizer)
        except Exception as e:  # HF tokenizers raises a bare Exception for JSON it cannot read
            raise ValueError(f"not a tokenizer.json that HF tokenizers can read: {e}") from None
    return xxhash.xxh64_hexdigest(tokenizer.to_str().encode())


def token_byte_lengths(tokenizer: Tokenizer) -> np.ndarray:
    """UTF-8 bytes each token id stands for (int32, indexed by id); special tokens count 0.

    Byte-level BPE writes each byte as one character of the byte-level alphabet, so a token's byte
    length is its length in characters. Non-special added tokens are plain text.
    """
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    added = tokenizer.get_added_tokens_decoder()
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    lengths = np.zeros(max(vocab.values()) + 1, dtype=np.int32)
    for token, token_id in vocab.items():
        if token_id in added:
            lengths[token_id] = 0 if added[token_id].special else len(added[token_id].content.encode("utf-8"))
        elif alphabet.issuperset(token):
            lengths[token_id] = len(token)
        else:
            raise ValueError(
                f"token {token!r} (id {token_id}) is not byte-level; bytes per token are unknown"
            )
    return lengths
