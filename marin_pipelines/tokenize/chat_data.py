"""Chat data for supervised fine-tuning: JSON lines of ``{"messages": [{"role", "content"}, ...]}`` (the
format of the chat datasets on the hub), rendered by a chat template (Jinja, as in Hugging Face's
``tokenizer_config.json``) into tokens with a mask of the assistant's tokens, and packed into training
sequences with segment ids.

- Only the assistant's tokens count in the loss (its content and the end of its turn, so the model learns
  to stop). They are found by rendering each conversation prefix: the characters an assistant message adds
  after the template's generation prompt are the assistant's; tokens are matched to them by their offsets.
- Packing puts whole examples one after another into sequences of ``seq_len + 1`` tokens; each example has
  its own segment id (0 is padding), so attention and the next-token targets never cross examples. An
  example longer than a sequence is cut to one and counted.
- A line that is not a conversation (bad JSON, no messages, an unknown role, content that is not text, no
  assistant turn) is skipped and counted by reason, with the first few places named.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

import fsspec
import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from marin_pipelines.tokenize.sequence_loader import shuffled
from marin_pipelines.tokenize.tokenizer import RUN_MADE_HERE, SpecialTokens

ROLES = ("system", "user", "assistant")
# Zephyr's layout, with the tokenizer's own end-of-text token closing every turn
DEFAULT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
Messages = list[dict[str, str]]
PLACES_KEPT = 5  # skipped lines named in the stats, per reason


@dataclass
class ChatStats:
    """What reading and packing saw: conversations kept, lines skipped by reason (the first places of
    each), examples cut to the sequence length or left out because the cut left no assistant token, and the
    assistant tokens that count in the loss."""

    conversations: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    places: dict[str, list[str]] = field(default_factory=dict)
    truncated: int = 0
    cut_off: int = 0  # longer than a sequence with no assistant token in its first one: left out
    tokens: int = 0
    assistant_tokens: int = 0
    warnings: list[str] = field(default_factory=list)  # what a run on these examples should be told

    def skip(self, reason: str, place: str) -> None:
        self.skipped[reason] += 1
        kept = self.places.setdefault(reason, [])
        if len(kept) < PLACES_KEPT:
            kept.append(place)

    def as_dict(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "skipped": dict(sorted(self.skipped.items())),
            "skipped_at": self.places,
            "truncated": self.truncated,
            "cut_off": self.cut_off,
            "tokens": self.tokens,
            "assistant_tokens": self.assistant_tokens,
            "warnings": self.warnings,
        }


def read_conversations(urls: Sequence[str | os.PathLike[str]], stats: ChatStats) -> Iterator[Messages]:
    """The conversations in JSON-lines files (paths or URLs), in order; other lines counted in ``stats``."""
    for url in map(str, urls):
        fs, path = fsspec.core.url_to_fs(url)
        with fs.open(path, "rt", encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                messages, reason = _conversation(line)
                if reason:
                    stats.skip(reason, f"{url}:{number}")
                    continue
                stats.conversations += 1
                yield messages


def _conversation(line: str) -> tuple[Messages, str | None]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return [], "not_json"
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        return [], "no_messages"
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            return [], "unknown_role"
        if not isinstance(message.get("content"), str):
            return [], "content_not_text"
    if not any(message["role"] == "assistant" for message in messages):
        return [], "no_assistant_turn"
    return [{"role": m["role"], "content": m["content"]} for m in messages], None


class ChatTemplate:
    """A Hugging Face chat template (Jinja, sandboxed as ``transformers`` renders it) over one tokenizer,
    whose ``bos_token`` and ``eos_token`` are the run's (``specials``: ``run_special_tokens``)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: str = DEFAULT_TEMPLATE,
        specials: SpecialTokens = RUN_MADE_HERE,
    ):
        # the template's special tokens (EOS) are the tokenizer's special ids here, unlike in plain text
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.encode_special_tokens = False
        self.source = template
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        # the functions transformers gives templates (an imported model's template may call them)
        environment.globals.update(raise_exception=_refused, strftime_now=_now)
        self.template = environment.from_string(template)
        self.specials = specials
        self.special = {"bos_token": specials.bos, "eos_token": specials.eos}

    def render(self, messages: Messages, add_generation_prompt: bool = False) -> str:
        return self.template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self.special
        )

    def encode_prompt(self, messages: Messages) -> list[int]:
        """The conversation rendered with the assistant's turn opened: what the model answers."""
        text = self.render(messages, add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode(self, messages: Messages) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of the rendered conversation and, for each, whether it is the assistant's."""
        text = self.render(messages)
        spans = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = self.render(messages[:i], add_generation_prompt=True)
            through = self.render(messages[: i + 1])
            if not (text.startswith(before) and text.startswith(through)):
                raise ValueError(
                    "the chat template does not render a conversation's prefix as a prefix of the whole "
                    "conversation, so the assistant's tokens cannot be found"
                )
            spans.append((len(before), len(through)))
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        ids = np.array(encoding.ids, np.int32)
        assistant = np.array(
            [any(s <= a and b <= e for s, e in spans) and b > a for a, b in encoding.offsets], bool
        )
        return ids, assistant


def _refused(message: str) -> NoReturn:
    raise ValueError(f"the chat template refuses the conversation: {message}")


def _now(format: str) -> str:
    return datetime.now().strftime(format)


@dataclass(frozen=True)
class PackedSequence:
    """``seq_len + 1`` tokens of whole examples (segment ids 1, 2, ..., padding 0) and the assistant mask."""

    tokens: np.ndarray
    assistant: np.ndarray
    segments: np.ndarray

    @property
    def target_weights(self) -> np.ndarray:
        """Which of the ``seq_len`` next-token targets count: an assistant token, predicted from a token of
        the same example."""
        same = (self.segments[1:] == self.segments[:-1]) & (self.segments[1:] > 0)
        return (self.assistant[1:] & same).astype(np.float32)


def pack(
    examples: Iterable[tuple[np.ndarray, np.ndarray]], seq_len: int, stats: ChatStats
) -> Iterator[PackedSequence]:
    """Examples in order into sequences of ``seq_len + 1`` tokens; one that does not fit in what is left
    starts the next sequence; one longer than a sequence is cut to one, or left out when the cut leaves no
    assistant token (each counted in ``stats``)."""
    length = seq_len + 1
    tokens, assistant, segments = [], [], []

    def flush() -> PackedSequence:
        pad = length - len(tokens)
        return PackedSequence(
            np.array(tokens + [0] * pad, np.int32),
            np.array(assistant + [False] * pad, bool),
            np.array(segments + [0] * pad, np.int32),
        )

    for ids, mask in examples:
        if len(ids) > length:
            ids, mask = ids[:length], mask[:length]
            if not mask[1:].any():  # the cut left none of the assistant's tokens: nothing to learn from
                stats.cut_off += 1
                continue
            stats.truncated += 1
        if len(tokens) + len(ids) > length:
            yield flush()
            tokens, assistant, segments = [], [], []
        segment = (segments[-1] if segments else 0) + 1
        tokens += ids.tolist()
        assistant += mask.tolist()
        segments += [segment] * len(ids)
        stats.tokens += len(ids)
        stats.assistant_tokens += int(mask[1:].sum())  # the first token is never a target
    if tokens:
        yield flush()


class PackedBatches:
    """Training batches of packed sequences, ``(batch_size, 3, seq_len + 1)``: tokens, segment ids and
    assistant mask, in a keyed shuffled order per epoch. ``rows(step, start, stop)`` computes any part of
    any step alone (restarts replay nothing; each host reads its own rows)."""

    def __init__(self, sequences: Sequence[PackedSequence], batch_size: int, seed: int):
        if not sequences:
            raise ValueError("no chat examples to train on")
        self.rows_array = np.stack(
            [np.stack([s.tokens, s.segments, s.assistant.astype(np.int32)]) for s in sequences]
        )
        self.batch_size, self.seed = batch_size, seed

    def rows(self, step: int, start: int, stop: int) -> np.ndarray:
        picked = shuffled(step * self.batch_size + start, stop - start, len(self.rows_array), self.seed)
        return self.rows_array[picked]

    def __call__(self, step: int) -> np.ndarray:
        return self.rows(step, 0, self.batch_size)
