"""lm-eval-harness over our JAX checkpoints: an ``LM`` adapter, and a runner for tasks on local data.

The adapter scores with the checkpoint's own tokenizer. Every text is preceded by the run's BOS
(``run_special_tokens``): for a run made here EOS, the token that precedes every document in training
(``tokenized_cache``), so the model sees a document start; generation stops at the run's EOS or stop
tokens. Calls are batched and jitted with fixed shapes: rows are right-padded to a power-of-two length bucket
(at most ``seq_len``) and batches to ``batch_size`` rows, so there is one compile per bucket.
The model is causal, so right padding never changes the positions that are scored.

With a chat template (``chat``), lm-eval can render each prompt as a conversation
(``apply_chat_template``), as a fine-tuned chat model was trained on them. Such a model's texts are then
encoded as fine-tuning encoded its conversations: the template's special-token strings (``<|endoftext|>``
ending each turn) are those tokens, not plain bytes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

# datasets reads these when imported: task data must be local, nothing is fetched from the hub.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.model import LM  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from marin_pipelines.evals.eval_results import EVAL_BATCH_SIZE  # noqa: E402
from marin_pipelines.tokenize.chat_data import ChatTemplate  # noqa: E402
from marin_pipelines.tokenize.tokenizer import RUN_MADE_HERE, SpecialTokens, special_token_ids  # noqa: E402
from marin_pipelines.train.model import Llama  # noqa: E402

MIN_BUCKET = 16
DEFAULT_MAX_GEN_TOKS = 32


@nnx.jit
def _score(
    model: Llama, inputs: jax.Array, targets: jax.Array, mask: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Per row: summed log-probability of the masked targets, and whether each was the argmax."""
    logits = model(inputs)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1)[..., 0]
    greedy = (jnp.argmax(logits, axis=-1) == targets) | ~mask
    return jnp.where(mask, logp, 0.0).sum(axis=-1), greedy.all(axis=-1)


@nnx.jit
def _next_tokens(model: Llama, tokens: jax.Array, lengths: jax.Array) -> jax.Array:
    """The greedy next token of each row, read at its last real position."""
    logits = model(tokens)
    return jnp.argmax(logits[jnp.arange(tokens.shape[0]), lengths - 1], axis=-1)


def bucket(length: int, limit: int) -> int:
    """The padded length for ``length`` tokens: the next power of two from MIN_BUCKET, capped at ``limit``."""
    return min(limit, max(MIN_BUCKET, 1 << (max(length, 1) - 1).bit_length()))


def _batches(items: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


class JaxLM(LM):
    """A ``Llama`` checkpoint and its tokenizer as an lm-eval model: greedy, batched, jitted; with ``chat``
    (a template over the same tokenizer) a chat model that lm-eval may prompt through its template."""

    def __init__(
        self,
        model: Llama,
        tokenizer: Tokenizer,
        batch_size: int = EVAL_BATCH_SIZE,
        chat: ChatTemplate | None = None,
        specials: SpecialTokens = RUN_MADE_HERE,
    ):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if chat is not None and chat.tokenizer.to_str() != tokenizer.to_str():
            raise ValueError("the chat template is over another tokenizer than the model's")
        if chat is not None and chat.specials != specials:
            raise ValueError("the chat template renders other special tokens than the model's")
        self.model = model
        self.tokenizer = tokenizer
        self.chat = chat
        # the chat template's copy reads special-token strings as special tokens, as SFT did
        self.encoder = chat.tokenizer if chat is not None else tokenizer
        self.batch_size = batch_size
        self.max_length = model.config.seq_len  # input tokens per forward pass
        ids = special_token_ids(tokenizer, specials)
        self.bos_id, self.eos_id, self.stop_ids = ids.bos, ids.eos, frozenset(ids.stop)

    def encode(self, text: str) -> list[int]:
        return self.encoder.encode(text, add_special_tokens=False).ids

    # --- chat template (lm-eval's ``apply_chat_template=True``) ------------------------------------
    def _template(self) -> ChatTemplate:
        if self.chat is None:
            raise ValueError("this JaxLM has no chat template: construct it with chat=ChatTemplate(...)")
        return self.chat

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """lm-eval's prompt as a conversation, rendered as the model was fine-tuned on them."""
        return self._template().render(chat_history, add_generation_prompt=add_generation_prompt)

    @property
    def tokenizer_name(self) -> str:
        """Keys lm-eval's cache of rendered requests, so it names the template's text."""
        digest = hashlib.sha256(self._template().source.encode()).hexdigest()[:16]
        return f"marin-chat-{digest}"

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The template's source, which lm-eval records: None when not applied, "" without a template."""
        if not chat_template:
            return None
        return self.chat.source if self.chat is not None else ""

    # --- scoring ---------------------------------------------------------------------------------
    def score(self, sequences: Sequence[Sequence[int]], scored: Sequence[int]) -> list[tuple[float, bool]]:
        """Log-probability of the last ``scored[i]`` tokens of ``sequences[i]`` given the tokens before
        them, and whether greedy decoding would produce them. A sequence holds at most ``max_length + 1``
        tokens (inputs plus the last target)."""
        results: list[tuple[float, bool]] = [(0.0, True)] * len(sequences)
        by_bucket: dict[int, list[int]] = {}
        for i, (seq, k) in enumerate(zip(sequences, scored, strict=True)):
            if not 1 <= k < len(seq) <= self.max_length + 1:
                raise ValueError(
                    f"cannot score {k} of {len(seq)} tokens with a {self.max_length}-token window"
                )
            by_bucket.setdefault(bucket(len(seq) - 1, self.max_length), []).append(i)
        for length, members in sorted(by_bucket.items()):
            for rows in _batches(members, self.batch_size):
                inputs = np.zeros((self.batch_size, length), np.int32)
                targets = np.zeros((self.batch_size, length), np.int32)
                mask = np.zeros((self.batch_size, length), bool)
                for r, i in enumerate(rows):
                    seq = np.asarray(sequences[i], np.int32)
                    n = len(seq) - 1
                    inputs[r, :n], targets[r, :n] = seq[:-1], seq[1:]
                    mask[r, n - scored[i] : n] = True
                logp, greedy = _score(self.model, inputs, targets, mask)
                for r, i in enumerate(rows):
                    results[i] = (float(logp[r]), bool(greedy[r]))
        return results

    def _context_and_continuation(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Tokens of both; spaces ending the context move to the continuation, as lm-eval's HF model does,
        and the continuation's tokens are read off the whole text so merges across the join count."""
        stripped = context.rstrip(" ")
        continuation = context[len(stripped) :] + continuation
        context_ids = [self.bos_id, *self.encode(stripped)]
        whole = [self.bos_id, *self.encode(stripped + continuation)]
        split = len(context_ids) if whole[: len(context_ids)] == context_ids else len(context_ids) - 1
        return whole[:split], whole[split:]

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        sequences, scored = [], []
        for request in requests:
            context, continuation = self._context_and_continuation(*request.args)
            if not continuation:
                raise ValueError(f"empty continuation for context {request.args[0][-40:]!r}")
            kept = min(len(continuation), self.max_length)
            sequences.append((context + continuation)[-(self.max_length + 1) :])
            scored.append(kept)
        return self.score(sequences, scored)

    def rolling_windows(self, text: str) -> list[tuple[list[int], list[int]]]:
        """Disjoint windows of at most ``max_length`` predictions, the first after BOS: every token of
        ``text`` is predicted exactly once, with as much context as the window allows."""
        windows = get_rolling_token_windows(self.encode(text), self.bos_id, self.max_length, context_len=1)
        return [make_disjoint_window(window) for window in windows]

    def loglikelihood_rolling(self, requests: list[Instance]) -> list[float]:
        owners, sequences, scored = [], [], []
        for index, request in enumerate(requests):
            for context, continuation in self.rolling_windows(request.args[0]):
                owners.append(index)
                sequences.append([*context, *continuation][-(self.max_length + 1) :])
                scored.append(len(continuation))
        totals = [0.0] * len(requests)
        for owner, (logp, _) in zip(owners, self.score(sequences, scored), strict=True):
            totals[owner] += logp
        return totals

    # --- generation ------------------------------------------------------------------------------
    def generate_until(self, requests: list[Instance]) -> list[str]:
        """Greedy continuations, cut at the first stop sequence (``until``) or ``max_gen_toks`` tokens."""
        outputs: list[str] = [""] * len(requests)
        groups: dict[tuple[tuple[str, ...], int], list[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(self._generation_kwargs(request.args[1]), []).append(i)
        for (until, max_gen), members in groups.items():
            for rows in _batches(members, self.batch_size):
                texts = self._generate([requests[i].args[0] for i in rows], until, max_gen)
                for i, text in zip(rows, texts, strict=True):
                    outputs[i] = text
        return outputs

    def _generation_kwargs(self, kwargs: dict[str, Any]) -> tuple[tuple[str, ...], int]:
        if kwargs.get("do_sample") or kwargs.get("temperature", 0.0) > 0:
            raise ValueError(f"only greedy generation is supported, got {kwargs}")
        until = kwargs.get("until") or ()
        until = (until,) if isinstance(until, str) else tuple(until)
        max_gen = int(kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
        if not 1 <= max_gen < self.max_length:
            raise ValueError(f"max_gen_toks must lie in [1, {self.max_length}), got {max_gen}")
        return until, max_gen

    def _generate(self, contexts: list[str], until: tuple[str, ...], max_gen: int) -> list[str]:
        prompts = [[self.bos_id, *self.encode(c)][-(self.max_length - max_gen) :] for c in contexts]
        length = bucket(max(map(len, prompts)) + max_gen, self.max_length)
        tokens = np.zeros((self.batch_size, length), np.int32)
        lengths = np.ones(self.batch_size, np.int32)
        for r, prompt in enumerate(prompts):
            tokens[r, : len(prompt)] = prompt
            lengths[r] = len(prompt)
        starts = lengths.copy()
        done = np.arange(self.batch_size) >= len(prompts)
        texts = [""] * len(prompts)
        for _ in range(max_gen):
            new = np.asarray(_next_tokens(self.model, tokens, lengths))
            for r in np.flatnonzero(~done):
                if new[r] in self.stop_ids:
                    done[r] = True
                    continue
                tokens[r, lengths[r]] = new[r]
                lengths[r] += 1
                texts[r] = self.tokenizer.decode(tokens[r, starts[r] : lengths[r]].tolist())
                done[r] = any(stop in texts[r] for stop in until)
            if done.all():
                break
        return [_cut(text, until) for text in texts]


def _cut(text: str, until: tuple[str, ...]) -> str:
    for stop in until:
        text = text.split(stop, 1)[0]
    return text
