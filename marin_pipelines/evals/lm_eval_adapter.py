"""lm-eval-harness over our JAX checkpoints: an ``LM`` adapter, and a runner for tasks on local data.

The adapter scores with the checkpoint's own tokenizer. Every text is preceded by the run's BOS
(``run_special_tokens``): for a run made here EOS, the token that precedes every document in training
(``tokenized_cache``), so the model sees a document start. Log-likelihoods are batched and jitted with fixed
shapes: rows are right-padded to a power-of-two length bucket (at most ``seq_len``) and batches to
``batch_size`` rows, so there is one compile per bucket. The model is causal, so right padding never changes
the positions that are scored. Generation (``generate_until``) runs on the generation engine
(``inference/engine.py``: a KV cache, ``batch_size`` requests decoded at once, a finished one's slot
refilled), greedy or sampled as each request's kwargs say, and stops at the run's EOS or stop tokens.

With a chat template (``chat``), lm-eval can render each prompt as a conversation
(``apply_chat_template``), as a fine-tuned chat model was trained on them. Such a model's texts are then
encoded as fine-tuning encoded its conversations: the template's special-token strings (``<|endoftext|>``
ending each turn) are those tokens, not plain bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
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
from lm_eval.models.utils import normalize_gen_kwargs  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from marin_pipelines.evals.eval_results import EVAL_BATCH_SIZE  # noqa: E402
from marin_pipelines.inference.engine import Engine, bucket  # noqa: E402
from marin_pipelines.inference.sampling import SamplingParams  # noqa: E402
from marin_pipelines.tokenize.chat_data import ChatTemplate  # noqa: E402
from marin_pipelines.tokenize.tokenizer import RUN_MADE_HERE, SpecialTokens, special_token_ids  # noqa: E402
from marin_pipelines.train.model import Llama  # noqa: E402

DEFAULT_MAX_GEN_TOKS = 32
DEFAULT_SEED = 1234  # lm-eval's own default seed: a sampled evaluation without a seed is reproducible too
GENERATION_KWARGS = frozenset(
    {"until", "max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens", "do_sample"}
    | {"temperature", "top_p", "top_k", "seed"}
)


@nnx.jit
def _score(
    model: Llama, inputs: jax.Array, targets: jax.Array, mask: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Per row: summed log-probability of the masked targets, and whether each was the argmax."""
    logits = model(inputs)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1)[..., 0]
    greedy = (jnp.argmax(logits, axis=-1) == targets) | ~mask
    return jnp.where(mask, logp, 0.0).sum(axis=-1), greedy.all(axis=-1)


def copy_seed(seed: int, copy: int) -> int:
    """The seed of the ``copy``-th copy of a request seeded ``seed``: the seed itself for the first, else a
    hash of both, so that no copy shares its stream with another copy or with another seed's first."""
    if copy == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{copy}".encode()).digest()
    return int.from_bytes(digest[:4], "little") >> 1


def _batches(items: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


class JaxLM(LM):
    """A ``Llama`` checkpoint and its tokenizer as an lm-eval model: scoring batched and jitted, generating
    (greedy or sampled) on the generation engine; with ``chat`` (a template over the same tokenizer) a chat
    model that lm-eval may prompt through its template."""

    def __init__(
        self,
        model: Llama,
        tokenizer: Tokenizer,
        batch_size: int = EVAL_BATCH_SIZE,
        chat: ChatTemplate | None = None,
        specials: SpecialTokens = RUN_MADE_HERE,
        seed: int = DEFAULT_SEED,
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
        # a chat model's texts are rendered conversations, encoded as fine-tuning encoded them: no BOS before
        # (a template that wants one writes it); plain text begins with the run's BOS, as training saw it
        self.prefix = [] if chat is not None else [ids.bos]
        self.seed = seed  # of sampled generations whose kwargs name none
        self._engine: Engine | None = None

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
        start = self.prefix if stripped else [self.bos_id]  # the first token is predicted from something
        context_ids = [*start, *self.encode(stripped)]
        whole = [*start, *self.encode(stripped + continuation)]
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
        """Each request's continuation through the generation engine (a KV cache, requests batched
        continuously): greedy or sampled as its generation kwargs say (``generation_settings``), ended by the
        run's stop tokens, cut before the first ``until`` string, at most ``max_gen_toks`` tokens.

        lm-eval asks for a task's ``repeats`` samples as that many copies of one request: each copy draws
        from a stream of its own (``copy_seed``), the first from the request's seed, so that it is what the
        same prompt and seed give alone (``marin-pipelines generate --seed``)."""
        copies: Counter[tuple[str, str]] = Counter()
        prompts, settings = [], []
        for request in requests:
            context, kwargs = request.args[0], request.args[1]
            key = (context, json.dumps(kwargs, sort_keys=True, default=str))
            settings.append(self.generation_settings(kwargs, copies[key]))
            copies[key] += 1
            prompts.append(self.prompt_ids(context))
        return [completion.text for completion in self.engine.generate(prompts, settings)]

    def prompt_ids(self, context: str) -> list[int]:
        """The tokens a generation continues: the run's BOS (not before a chat template's rendering), then
        the context."""
        return [*self.prefix, *self.encode(context)] or [self.bos_id]

    @property
    def engine(self) -> Engine:
        """The model's generation engine, made at the first generation: ``batch_size`` slots."""
        if self._engine is None:
            self._engine = Engine(self.model, self.tokenizer, self.stop_ids, slots=self.batch_size)
        return self._engine

    def generation_settings(self, kwargs: dict[str, Any], copy: int = 0) -> SamplingParams:
        """lm-eval's generation kwargs as the engine's settings, read as lm-eval's own models read them
        (``normalize_gen_kwargs``): ``until``, ``max_gen_toks`` (or ``max_new_tokens``, ``max_tokens``),
        ``do_sample``, ``temperature`` (1 when sampling without one, as Hugging Face's), ``top_p``, ``top_k``
        and ``seed`` (the adapter's ``seed`` when none, so that a sampled evaluation gives the same scores
        again); ``copy``: which copy of a repeated request. Other kwargs are refused."""
        if unknown := sorted(set(kwargs) - GENERATION_KWARGS):
            raise ValueError(
                f"generation kwargs {unknown} are not supported; these are: {sorted(GENERATION_KWARGS)}"
            )
        normal = normalize_gen_kwargs(kwargs, DEFAULT_MAX_GEN_TOKS)
        max_gen = normal["max_gen_toks"]
        if not 1 <= max_gen < self.max_length:
            raise ValueError(f"max_gen_toks must lie in [1, {self.max_length}), got {max_gen}")
        sampled = bool(normal["do_sample"])
        temperature = float(kwargs.get("temperature", 1.0)) if sampled else 0.0
        try:
            return SamplingParams(
                max_new_tokens=max_gen,
                temperature=temperature,
                top_k=int(kwargs.get("top_k") or 0) if sampled else 0,
                top_p=float(kwargs.get("top_p") or 1.0) if sampled else 1.0,
                seed=copy_seed(self.seed if kwargs.get("seed") is None else int(kwargs["seed"]), copy),
                stop=tuple(normal["until"]),
            )
        except ValidationError as e:
            raise ValueError(f"generation kwargs {kwargs}: {e}") from None
