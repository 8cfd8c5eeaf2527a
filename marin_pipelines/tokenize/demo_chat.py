"""The demo's chat data: questions and answers about the functions and methods whose documentation the demo
crawl renders (``crawl/demo_crawl.py``), sized for the demo's tiny models. Built at run time from this
Python's own docstrings, so nothing is downloaded and a rebuild gives the same bytes.

Each documented function or method gives a conversation: a question in one of a few phrasings, and an
answer made of its signature and the first sentences of its docstring; the training set is a sample of a
few hundred. Conversations about a module go to the held-out set when the module's name hashes there, so
held-out questions are about functions the fine-tuned model never saw answered, in the same style.

    python -m marin_pipelines.tokenize.demo_chat OUT_DIR     # train.jsonl and heldout.jsonl
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import xxhash
from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.stdlib_material import CURATED_MODULES, stdlib_material_isolated

SYSTEM = "You answer questions about the Python standard library briefly."
QUESTIONS = (
    "What does {name} do?",
    "Explain {name}.",
    "How would I use {name}?",
    "What is {name} for?",
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_HEADING = re.compile(r"^(?P<name>[\w.]+)(?P<signature>\(.*\))$", re.S)
TRAIN_FILE, HELDOUT_FILE = "train.jsonl", "heldout.jsonl"


class DemoChatConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    modules: tuple[str, ...] = Field(
        CURATED_MODULES,
        description="standard-library modules whose documented names the conversations ask about",
    )
    answer_words: int = Field(40, gt=0, description="answers stop after the sentence that passes this")
    heldout_fraction: float = Field(
        0.1, gt=0, lt=1, description="share of modules whose questions are held out"
    )
    train_conversations: int = Field(400, gt=0, description="at most this many, sampled in order")
    seed: int = Field(
        0,
        description="seeds the held-out modules, the questions' wording and the training conversations kept",
    )


def demo_conversations(config: DemoChatConfig) -> dict[str, list[dict[str, Any]]]:
    """``{"train": [...], "heldout": [...]}``: records of ``{"messages": [...]}``."""
    material = stdlib_material_isolated(config.modules)
    rng = random.Random(config.seed)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "heldout": []}
    for _, slug, blocks in material["library"]:
        module = max((m for m in config.modules if slug == m or slug.startswith(f"{m}.")), key=len)
        split = "heldout" if _held_out(module, config) else "train"
        for name, signature, paragraph in _documented(blocks):
            answer = f"`{name}{signature}`: {_first_sentences(paragraph, config.answer_words)}"
            question = rng.choice(QUESTIONS).format(name=f"`{name}`")
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
            out[split].append({"messages": messages})
    if len(out["train"]) > config.train_conversations:  # a few hundred: the demo's models are tiny
        keep = sorted(rng.sample(range(len(out["train"])), config.train_conversations))
        out["train"] = [out["train"][i] for i in keep]
    return out


def build_demo_chat(out_dir: Path, config: DemoChatConfig | None = None) -> dict[str, int]:
    """Write ``train.jsonl`` and ``heldout.jsonl`` into ``out_dir``; returns their conversations' counts."""
    sets = demo_conversations(config or DemoChatConfig())
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, records in sets.items():
        file = out_dir / (TRAIN_FILE if split == "train" else HELDOUT_FILE)
        file.write_text("".join(json.dumps(record, sort_keys=True) + "\n" for record in records))
    return {split: len(records) for split, records in sets.items()}


def _documented(blocks: list[list[str]]) -> list[tuple[str, str, str]]:
    """(name, signature, first paragraph) of each function or method heading followed by prose."""
    found = []
    for (kind, text), (next_kind, next_text) in zip(blocks, blocks[1:], strict=False):
        heading = _HEADING.match(text) if kind in ("h2", "h3") else None
        if heading and next_kind == "p" and len(next_text.split()) >= 4:
            found.append((heading["name"], heading["signature"], " ".join(next_text.split())))
    return found


def _first_sentences(paragraph: str, words: int) -> str:
    kept: list[str] = []
    for sentence in _SENTENCE.split(paragraph):
        kept.append(sentence)
        if sum(len(s.split()) for s in kept) >= words:
            break
    return " ".join(kept)


def _held_out(module: str, config: DemoChatConfig) -> bool:
    return xxhash.xxh64_intdigest(f"{config.seed}:{module}".encode()) % 1000 < config.heldout_fraction * 1000


if __name__ == "__main__":
    print(json.dumps(build_demo_chat(Path(sys.argv[1]))))
