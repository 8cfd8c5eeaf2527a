"""A run folder as a model to use: its latest parameters, its tokenizer, its special tokens and, for a chat
model, the template it was fine-tuned with. Evaluation, generation and serving all load a run through here.

Works for every run folder: trained here, fine-tuned (``sft`` writes its template beside the checkpoints) or
imported from Hugging Face (``import-hf`` also writes its special tokens). Paths may be URLs.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer
from upath import UPath

from marin_pipelines.store import is_local
from marin_pipelines.tokenize.chat_data import DEFAULT_TEMPLATE, ChatTemplate, Messages
from marin_pipelines.tokenize.tokenizer import (
    RUN_MADE_HERE,
    TOKENIZER_FILE,
    SpecialTokenIds,
    SpecialTokens,
    load_tokenizer,
    run_special_tokens,
    special_token_ids,
)
from marin_pipelines.train.checkpoint import load_checkpoint
from marin_pipelines.train.model import Llama
from marin_pipelines.train.train_config import CHAT_TEMPLATE_FILE


def find_tokenizer(checkpoint_dir: str | os.PathLike[str]) -> UPath:
    """The ``tokenizer.json`` beside a checkpoint (a path or URL): in its directory or the one above."""
    checkpoint_dir = UPath(checkpoint_dir)
    for folder in (checkpoint_dir, checkpoint_dir.parent):
        if (folder / TOKENIZER_FILE).is_file():
            return folder / TOKENIZER_FILE
    raise FileNotFoundError(f"no {TOKENIZER_FILE} in {checkpoint_dir} or its parent; pass --tokenizer FILE")


def read_tokenizer(path: str | os.PathLike[str], specials: SpecialTokens = RUN_MADE_HERE) -> Tokenizer:
    """``load_tokenizer`` of a local file, or of a copy of the file at a URL."""
    if is_local(path):
        return load_tokenizer(path, specials)
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / TOKENIZER_FILE
        copy.write_bytes(UPath(path).read_bytes())
        try:
            return load_tokenizer(copy, specials)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None


def checkpoint_template(checkpoint: str | os.PathLike[str]) -> str | None:
    """The chat template a fine-tuned (or imported chat) run was made with, written beside its checkpoints."""
    path = UPath(checkpoint) / CHAT_TEMPLATE_FILE
    return path.read_text() if path.is_file() else None


@dataclass(frozen=True)
class TrainedRun:
    """A run folder's model with what it takes to talk to it. Plain text is encoded as training saw it: the
    run's BOS first, special-token strings inside the text read as text; a conversation through the chat
    template as fine-tuning encoded it (the template's special tokens as special)."""

    dir: str
    model: Llama
    tokenizer: Tokenizer
    specials: SpecialTokens
    ids: SpecialTokenIds
    chat_template: str | None  # the run's own; None: not a chat model (``chat`` then uses the default)

    def encode(self, text: str) -> list[int]:
        return [self.ids.bos, *self.tokenizer.encode(text, add_special_tokens=False).ids]

    def chat(self) -> ChatTemplate:
        return ChatTemplate(self.tokenizer, self.chat_template or DEFAULT_TEMPLATE, self.specials)

    def encode_chat(self, messages: Messages) -> list[int]:
        """The conversation rendered with the assistant's turn opened, as the model was fine-tuned."""
        return self.chat().encode_prompt(messages)


def load_run(
    run_dir: str | os.PathLike[str], tokenizer_file: str | os.PathLike[str] | None = None
) -> TrainedRun:
    """The run folder ``run_dir``'s latest checkpoint with its tokenizer (``tokenizer_file``, or the one
    beside it), special tokens and chat template."""
    specials = run_special_tokens(run_dir)
    tokenizer = read_tokenizer(tokenizer_file or find_tokenizer(run_dir), specials)
    model, _ = load_checkpoint(run_dir)
    if tokenizer.get_vocab_size() > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.get_vocab_size()} tokens, the model only {model.config.vocab_size}"
        )
    ids = special_token_ids(tokenizer, specials)
    return TrainedRun(str(run_dir), model, tokenizer, specials, ids, checkpoint_template(run_dir))
