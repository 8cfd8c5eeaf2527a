"""Supervised fine-tuning: a base run's parameters, warm-started with a fresh optimiser and schedule, trained
on chat data where only the assistant's tokens count. The same trainer as pretraining, so a kill resumes
exactly and the launcher, metrics and MFU work as they do there.

The run directory gets what it needs to be used on its own: the base's ``tokenizer.json`` (and its special
tokens, where the base has its own: ``special_tokens.json``), the chat template it was tuned with
(``chat_template.jinja``: ``export-hf`` puts it into ``tokenizer_config.json``)
and ``sft_data.json`` (conversations read, lines skipped by reason, examples cut, tokens).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import yaml
from pydantic import ValidationError
from tokenizers import Tokenizer
from upath import UPath

from marin_pipelines.config_errors import describe
from marin_pipelines.store import read_url, write_url
from marin_pipelines.tokenize.chat_data import (
    DEFAULT_TEMPLATE,
    ChatStats,
    ChatTemplate,
    PackedBatches,
    pack,
    read_conversations,
)
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, run_special_tokens, save_special_tokens
from marin_pipelines.train.distributed import is_primary
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.run_inputs import base_identity, check_inputs, files_sha256, given, text_sha256
from marin_pipelines.train.train_config import CHAT_TEMPLATE_FILE, MODEL_FILE, TrainConfig
from marin_pipelines.train.trainer import train

log = logging.getLogger(__name__)
SFT_DATA_FILE = "sft_data.json"
HELDOUT_FILE = "heldout_chat_loss.json"  # `marin-pipelines sft --heldout`: base vs tuned
# More conversations than this share longer than the base's sequence (cut, or left out): a warning, in the
# run's sft_data.json and the step's metadata
CUT_WARNING_SHARE = 0.25
SFT_DEFAULTS = {"steps": 100, "learning_rate": 1e-3, "warmup_steps": 10}  # a short run from a trained model


def load_sft_config(path: str | None, steps: int | None = None) -> TrainConfig:
    """The ``train:`` section of a YAML file (a path or URL) over ``SFT_DEFAULTS``; errors name the file and
    each bad field."""
    fields = dict(SFT_DEFAULTS)
    if path:
        data = yaml.safe_load(read_url(path)) or {}
        if not isinstance(data, dict) or not isinstance(data.get("train", {}), dict):
            raise ValueError(f"{path}: expected a mapping with a `train:` section of TrainConfig fields")
        fields.update(data.get("train", {}))
    if steps is not None:
        fields["steps"] = steps
    try:
        return TrainConfig.model_validate(fields)
    except ValidationError as e:
        raise ValueError(f"{path or 'the SFT defaults'}: {describe(e, title='train')}") from None


def sft(
    base_dir: str | os.PathLike[str],
    data: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    config: TrainConfig,
    template: str = DEFAULT_TEMPLATE,
    progress: bool = True,
    on_step: Sequence[Callable[[dict[str, Any]], None]] = (),
) -> dict[str, Any]:
    """Fine-tune the latest checkpoint of ``base_dir`` on the conversations of ``data`` into ``out_dir``
    (paths or URLs); returns the training summary with the data's counts under ``"data"``."""
    base, out = UPath(base_dir), UPath(out_dir)
    model = LlamaConfig.model_validate_json((base / MODEL_FILE).read_text())
    tokenizer_file = base / TOKENIZER_FILE
    if not tokenizer_file.is_file():
        raise FileNotFoundError(f"the base run {base} has no {TOKENIZER_FILE}: SFT uses the base's tokenizer")
    tokenizer = tokenizer_file.read_text()
    specials = run_special_tokens(base)
    chat = ChatTemplate(Tokenizer.from_str(tokenizer), template, specials)
    stats = ChatStats()
    examples = (chat.encode(messages) for messages in read_conversations(data, stats))
    sequences = list(pack(examples, model.seq_len, stats))
    files = [str(d) for d in data]
    if not stats.conversations:
        raise ValueError(
            f"no conversation could be read from {files}: lines skipped {dict(stats.skipped)}, "
            f"first at {stats.places}"
        )
    if not stats.assistant_tokens:
        raise ValueError(
            f"no assistant token within the base's seq_len {model.seq_len} in {files}: "
            f"{stats.conversations} conversations, {stats.cut_off} cut off before the assistant's turn, "
            f"lines skipped {dict(stats.skipped)}"
        )
    cut = stats.cut_off + stats.truncated
    if cut > CUT_WARNING_SHARE * stats.conversations:
        stats.warnings.append(
            f"{cut} of {stats.conversations} conversations are longer than the base's seq_len "
            f"{model.seq_len} ({stats.cut_off} left out, {stats.truncated} cut): the run trains on "
            f"{stats.assistant_tokens} assistant tokens"
        )
    for warning in stats.warnings:
        log.warning(warning)
    batches = PackedBatches(sequences, config.batch_size, config.seed)
    inputs = {
        "base": given(base_identity(base), str(base)),
        "tokenizer": given(text_sha256(tokenizer), str(tokenizer_file)),
        "data": given(files_sha256(files), files),
    }
    check_inputs(str(out), inputs, record=is_primary())
    if is_primary():  # one writer of a run's files, as in `train`; after the check, as there
        write_url(str(out / TOKENIZER_FILE), tokenizer)
        save_special_tokens(out, specials)
        write_url(str(out / CHAT_TEMPLATE_FILE), template)
        write_url(str(out / SFT_DATA_FILE), json.dumps(stats.as_dict(), indent=2))
    summary = train(model, config, batches, out, progress, on_step, packed=True, warm_start=base)
    return {**summary, "data": stats.as_dict()}
