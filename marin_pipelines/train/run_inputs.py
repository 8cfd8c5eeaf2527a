"""What a run folder was made from: recorded at its first start (``inputs.json``) and checked at every
restart. A rerun on other data, another tokenizer or another base would otherwise change a finished run
without a word (the same parameters evaluated with another tokenizer) or continue it on other text. A rerun
that asks for fewer steps than the run has made is refused too (``check_steps``), and so is a warm start
from a base on another tokenizer (or with none to compare), unless it is meant (``warm_start_tokenizer``).

Each input is recorded as its identity (a hash of what it holds, not where it lives: a cache moved to a
bucket is the same cache) and the place it was read from, for the message that refuses another one.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import fsspec
from upath import UPath

from marin_pipelines.store import read_url, write_url
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, tokenizer_hash
from marin_pipelines.train.train_config import CHECKPOINTS_DIR, MODEL_FILE

INPUTS_FILE = "inputs.json"
log = logging.getLogger(__name__)


class OtherInputs(ValueError):
    """A restart names other inputs than those the run folder was made from."""


class FewerSteps(ValueError):
    """A restart asks for fewer steps than the run folder's checkpoint has made."""


class OtherTokenizer(ValueError):
    """A warm start from a base trained on another tokenizer (or with none to compare), not asked for."""


def file_sha256(url: str) -> str:
    """A file's sha256, read in blocks: a model's weights need not fit in memory (``import_hf``)."""
    fs, path = fsspec.core.url_to_fs(url)
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def files_sha256(urls: Sequence[str]) -> str:
    """One hash over several files' contents, in order."""
    digest = hashlib.sha256()
    for url in urls:
        digest.update(file_sha256(url).encode())
    return digest.hexdigest()


def given(identity: str, where: str | Sequence[str]) -> dict[str, Any]:
    """One input as recorded: its identity and the place (or places) it was read from."""
    return {"identity": identity, "from": where if isinstance(where, str) else list(where)}


def check_inputs(out: str, inputs: dict[str, dict[str, Any]], record: bool) -> None:
    """Refuse to go on in the run folder ``out`` if it was made from other ``inputs`` (by identity); where
    it records none yet (a first start), write them when ``record`` (process 0 of a run) is set.

    Called before anything is written into ``out``: a refused restart leaves the run as it was."""
    url = f"{out.rstrip('/')}/{INPUTS_FILE}"
    fs, path = fsspec.core.url_to_fs(url)
    try:
        recorded = json.loads(fs.cat_file(path))
    except FileNotFoundError:
        if record:
            write_url(url, json.dumps(inputs, indent=2))
        return
    except json.JSONDecodeError as e:  # written whole (store.write_url): only an edit by hand gets here
        raise OtherInputs(
            f"{url} is not the JSON this project writes ({e}): restore it or use a fresh --out"
        ) from None
    differ = [
        name
        for name in sorted(recorded.keys() | inputs.keys())
        if recorded.get(name, {}).get("identity") != inputs.get(name, {}).get("identity")
    ]
    if differ:
        lines = [
            f"{name}: made from {_said(recorded.get(name))}, now given {_said(inputs.get(name))}"
            for name in differ
        ]
        raise OtherInputs(
            f"{out} was made from other inputs ({'; '.join(lines)}): rerun it with the inputs it records "
            f"in {INPUTS_FILE}, or use a fresh --out"
        )


def _said(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "nothing"
    where = entry["from"] if isinstance(entry["from"], str) else ", ".join(entry["from"])
    return f"{where} (identity {entry['identity'][:16]})"


def base_identity(base: str | UPath) -> str:
    """A base run as a run starts from it (fine-tuning, a warm start): its model and the checkpoint steps it
    holds (a base trained further is another base; a save in flight, not yet a step, changes nothing). Its
    tokenizer is an input of its own."""
    base = UPath(base)
    checkpoints = base / CHECKPOINTS_DIR
    found = checkpoints.iterdir() if checkpoints.exists() else []
    steps = sorted(int(p.name) for p in found if p.name.isdigit())
    return hashlib.sha256((base / MODEL_FILE).read_bytes() + json.dumps(steps).encode()).hexdigest()


def check_steps(out: str, reached: int, steps: int) -> None:
    """Refuse to train the run folder ``out``, whose latest checkpoint is at step ``reached``, to ``steps``
    below it: nothing would train, and ``train.json`` would record the tokens and FLOPs of ``steps`` beside
    a checkpoint of ``reached`` (a scaling fit reads them)."""
    if steps < reached:
        raise FewerSteps(
            f"{out} is a run at step {reached}, past the {steps} steps asked (train.steps or --steps): a "
            f"run never goes back. Give {reached} steps or more to resume or extend it, or a fresh --out "
            f"for a new run of {steps} steps"
        )


def warm_start_tokenizer(base: str, tokenizer: str, where: str, allowed: bool) -> dict[str, Any]:
    """The warm start's base run's tokenizer against this run's (``tokenizer``, the JSON read from
    ``where``), by ``tokenizer_hash``: {} where they are one. Where they differ, or the base has no
    tokenizer to compare, its embeddings may load for token ids that stand for other text: refused, naming
    both files (or the missing one), unless ``allowed``; then their record, for the warm start's record
    (and a warning where the base's could not be compared)."""
    base_file = f"{base.rstrip('/')}/{TOKENIZER_FILE}"
    try:
        mine = tokenizer_hash(tokenizer)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    try:
        theirs = read_url(base_file)
    except FileNotFoundError:
        if not allowed:
            raise OtherTokenizer(
                f"--warm-start {base} has no {TOKENIZER_FILE} ({base_file} is missing): whether it was "
                f"trained on this run's tokenizer ({where}, hash {mine}) cannot be checked. Copy the "
                f"tokenizer it was trained on to {base_file}, or give --allow-other-tokenizer if loading it "
                "unchecked is meant (the run's warm_start record says so)"
            ) from None
        log.warning(
            "warm start from %s: %s is missing, the tokenizer is not checked (--allow-other-tokenizer)",
            base,
            base_file,
        )
        return {"other_tokenizer": {"base": f"unchecked: {base_file} is missing", "run": given(mine, where)}}
    try:
        others = tokenizer_hash(theirs)
    except ValueError as e:
        raise ValueError(f"{base_file}: {e}") from None
    if mine == others:
        return {}
    if not allowed:
        raise OtherTokenizer(
            f"--warm-start {base} was trained on another tokenizer ({base_file}, hash {others}) than this "
            f"run's ({where}, hash {mine}): its embeddings would load for token ids that stand for other "
            "text. Warm-start from a run on this run's tokenizer, or give --allow-other-tokenizer if this "
            "is meant (the run's warm_start record keeps both tokenizers)"
        )
    return {"other_tokenizer": {"base": given(others, base_file), "run": given(mine, where)}}
