"""The generation engine: a fixed batch of slots over one KV cache, refilled between decode steps.

A request (a prompt's token ids and its ``SamplingParams``) waits in a queue until a slot is free. Each
``step`` first prefills the waiting requests that fit into the free slots (together, padded to a power of two
of rows and of positions, so that a few shapes compile) and takes their first tokens, then decodes one token
for every busy slot, attending the cache's first positions only (a power of two above every slot's position:
a step reads the keys so far, not the whole context). A request ends on one of its stop tokens (the run's
end-of-text and end-of-turn tokens, and its own), on one of its stop strings (the text is cut before it), at
``max_new_tokens`` or at the end of the context; its slot takes the next waiting request at the next step
(continuous batching). Rows never see
each other: a request gets the tokens it would get alone (an MoE routes every token at inference, with no
capacity that batch-mates could fill).

A prompt longer than the context leaves room for ``max_new_tokens``: its oldest tokens are cut and the
completion says how many (``truncated``). ``generate`` runs a list of requests to the end; a server calls
``submit`` from its threads and ``step`` from one loop of its own.
"""

from __future__ import annotations

import json
import queue
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tokenizers import Tokenizer
from upath import UPath

from marin_pipelines.inference.sampling import TOP_LOGPROBS, Chosen, RowSettings, SamplingParams, choose
from marin_pipelines.train.model import KVCache, Llama, LlamaConfig
from marin_pipelines.train.sharding import DATA, EXPERT, MODEL, data_mesh, state_shardings
from marin_pipelines.train.train_config import TRAIN_FILE, TrainConfig
from marin_pipelines.train.trained_run import TrainedRun

MIN_BUCKET = 16  # the fewest positions a prefill is padded to


class QueueFull(RuntimeError):
    """More requests wait than the engine was built to hold: try again later."""


@dataclass
class TokenLogprob:
    """A generated token's log-probability under the model and, when asked, the likeliest alternatives."""

    token: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class Completion:
    """What a request produced. ``tokens`` are the generated ids (a stop token left out; those of a stop
    string kept, the text cut before it); ``finish_reason`` is ``stop`` or ``length``."""

    prompt_tokens: int
    truncated: int  # prompt tokens cut from the left to fit the context
    seed: int
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    first_token_seconds: float | None = None
    seconds: float = 0.0


@dataclass
class Pending:
    """A submitted request. ``on_text`` gets the text as it is settled (pieces that no stop string can still
    take back); ``done`` is set with ``completion`` final."""

    prompt: list[int]
    params: SamplingParams
    on_text: Callable[[str], None] | None = None
    completion: Completion | None = None
    done: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False
    submitted: float = field(default_factory=time.perf_counter)
    sent: int = 0  # characters of the text already given to on_text


def bucket(length: int, limit: int) -> int:
    """The padded length for ``length``: the next power of two from MIN_BUCKET, capped at ``limit``."""
    return min(limit, max(MIN_BUCKET, 1 << (max(length, 1) - 1).bit_length()))


def inference_config(config: LlamaConfig) -> LlamaConfig:
    """The model as generation runs it: an MoE routes every assignment (dropless), so that no request's
    tokens depend on what else is in the batch. The parameters are the same."""
    if config.moe is None or config.moe.dropless:
        return config
    return config.model_copy(update={"moe": config.moe.model_copy(update={"dropless": True})})


def compute_params(params: nnx.State, config: LlamaConfig) -> nnx.State:
    """The parameters as a pass in ``config.dtype`` reads them: every matrix cast to it once, here, rather
    than by every step (a bf16 step would read each float32 weight and write its bf16 copy before using it);
    the norms' scales and the MoE router, which compute in float32, as they are. The model computes the
    same numbers from either."""
    if config.dtype == "float32":
        return params
    dtype = jnp.dtype(config.dtype)

    def cast(path: tuple, leaf: jax.Array) -> jax.Array:
        router = any(getattr(key, "key", None) == "router" for key in path)
        return leaf.astype(dtype) if leaf.ndim >= 2 and not router else leaf

    return jax.tree_util.tree_map_with_path(cast, params)


class Engine:
    """Continuous batching over ``slots`` rows of one KV cache of ``max_len`` positions (default the
    model's ``seq_len``), on ``mesh`` when given (parameters split by the trainer's rules, cache rows over
    the data axes and KV heads over ``model``)."""

    def __init__(
        self,
        model: Llama,
        tokenizer: Tokenizer,
        stop_tokens: Sequence[int] = (),
        slots: int = 8,
        max_len: int | None = None,
        max_waiting: int = 256,
        mesh: Mesh | None = None,
    ):
        config = inference_config(model.config)
        self.config, self.tokenizer = config, tokenizer
        self.max_len = max_len or config.seq_len
        self.stop_tokens = frozenset(stop_tokens)
        rows = 1 if mesh is None else mesh.shape[DATA] * mesh.shape[EXPERT]
        self.slots = -(-slots // rows) * rows
        self.graphdef = nnx.graphdef(Llama(config, nnx.Rngs(0)) if config is not model.config else model)
        params = compute_params(nnx.state(model), config)
        cache = KVCache.empty(config, self.slots, self.max_len)
        if mesh is not None:
            params = jax.device_put(params, state_shardings(params, mesh, fsdp=False))
            heads = MODEL if config.n_kv_heads % mesh.shape[MODEL] == 0 else None
            rows_spec = NamedSharding(mesh, PartitionSpec((DATA, EXPERT), None, heads, None))
            cache = jax.device_put(cache, jax.tree.map(lambda _: rows_spec, cache))
        else:  # committed, as every cache a step returns is: else the first prefill compiles twice
            cache = jax.device_put(cache, jax.devices()[0])
        self.params, self.cache = params, cache
        self._prefill = jax.jit(self._prefill_fn, donate_argnums=(1,))
        self._decode = jax.jit(self._decode_fn, donate_argnums=(1,), static_argnames=("window",))
        self._score = jax.jit(self._score_fn)
        self.waiting: queue.Queue[Pending] = queue.Queue(maxsize=max_waiting)
        self.busy: list[Pending | None] = [None] * self.slots
        self.position = np.zeros(self.slots, np.int32)  # where each slot writes its next token
        self.last = np.zeros(self.slots, np.int32)  # each slot's latest token, the next step's input
        self.wake = threading.Event()  # set by submit: a loop waiting for work goes on

    @classmethod
    def for_run(cls, run: TrainedRun, **options: Any) -> Engine:
        """An engine for a loaded run: stopping at its end-of-text and end-of-turn tokens, on the mesh it
        trained on where this process has the devices for it (``run_mesh``)."""
        return cls(run.model, run.tokenizer, stop_tokens=run.ids.stop, mesh=run_mesh(run.dir), **options)

    # --- the compiled steps ----------------------------------------------------------------------
    def _prefill_fn(
        self,
        params: nnx.State,
        cache: KVCache,
        tokens: jax.Array,
        lengths: jax.Array,
        slots: jax.Array,
        rows: RowSettings,
    ) -> tuple[KVCache, Chosen]:
        """Prompts ``tokens[b, T]`` (right-padded to ``lengths``) into the first T positions of cache rows
        ``slots`` (a slot past the last: a padding row, dropped); each prompt's first generated token."""
        model = nnx.merge(self.graphdef, params)
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        fresh = KVCache.empty(self.config, *tokens.shape)
        logits, fresh = model.cached(tokens, positions, positions < lengths[:, None], fresh)
        last = logits[jnp.arange(tokens.shape[0]), lengths - 1]

        def into(whole: jax.Array, part: jax.Array) -> jax.Array:
            return whole.at[slots, : part.shape[1]].set(part, mode="drop")

        return jax.tree.map(into, cache, fresh), choose(last, rows)

    def _decode_fn(
        self,
        params: nnx.State,
        cache: KVCache,
        tokens: jax.Array,
        positions: jax.Array,
        active: jax.Array,
        rows: RowSettings,
        window: int,
    ) -> tuple[KVCache, Chosen]:
        """One token for every slot: ``tokens[B]`` at ``positions[B]`` (all below ``window``, a bucket:
        attention reads that much of the cache); the next token of each."""
        model = nnx.merge(self.graphdef, params)
        logits, cache = model.cached(tokens[:, None], positions[:, None], active[:, None], cache, window)
        return cache, choose(logits[:, 0], rows)

    def _score_fn(self, params: nnx.State, tokens: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Log-probability of each token of ``tokens[b, T]`` given the ones before, and the likeliest
        alternatives there (position 0: nothing)."""
        logits = nnx.merge(self.graphdef, params)(tokens[:, :-1])
        logprobs = jax.nn.log_softmax(logits)
        chosen = jnp.take_along_axis(logprobs, tokens[:, 1:, None], axis=-1)[..., 0]
        top_logprobs, top_tokens = jax.lax.top_k(logprobs, TOP_LOGPROBS)
        return chosen, top_tokens, top_logprobs

    # --- requests ----------------------------------------------------------------------------------
    def submit(
        self, prompt: Sequence[int], params: SamplingParams, on_text: Callable[[str], None] | None = None
    ) -> Pending:
        """Queue a request (thread-safe). Raises ValueError for a request that can never run, QueueFull
        when ``max_waiting`` requests already wait."""
        if not prompt:
            raise ValueError("prompt: at least one token is needed (begin it with the run's BOS token)")
        if params.max_new_tokens >= self.max_len:
            raise ValueError(
                f"max_new_tokens: {params.max_new_tokens} leaves no room for a prompt in the "
                f"context of {self.max_len} tokens"
            )
        if bad := [t for t in prompt if not 0 <= t < self.config.vocab_size]:
            raise ValueError(
                f"prompt: token ids {bad[:5]} are outside the vocabulary [0, {self.config.vocab_size})"
            )
        pending = Pending(list(prompt), params, on_text)
        try:
            self.waiting.put_nowait(pending)
        except queue.Full:
            raise QueueFull(f"{self.waiting.maxsize} requests are waiting") from None
        self.wake.set()
        return pending

    def cancel(self, pending: Pending) -> None:
        """Stop a request at the next step (a client that went away); it ends as ``cancelled``."""
        pending.cancelled = True

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[Completion]:
        """Every prompt to its end, in order; ``params`` one for all or one each."""
        each = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(each) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts and {len(each)} sampling settings")
        pending = []
        for prompt, settings in zip(prompts, each, strict=True):
            while True:
                try:
                    pending.append(self.submit(prompt, settings))
                    break
                except QueueFull:
                    self.step()
        while not all(p.done.is_set() for p in pending):
            self.step()
        return [p.completion for p in pending]  # type: ignore[misc]

    def idle(self) -> bool:
        return self.waiting.empty() and all(p is None for p in self.busy)

    def score(self, prompt: Sequence[int]) -> tuple[list[TokenLogprob], int]:
        """Each token's log-probability given those before it (the first: 0) with the ``TOP_LOGPROBS``
        likeliest alternatives there (the first: none), for ``echo``; a prompt longer than the context is
        cut from the left, and how many tokens were cut is returned beside."""
        cut = max(0, len(prompt) - self.config.seq_len)
        kept = list(prompt[cut:])
        length = bucket(len(kept), self.config.seq_len) + 1
        tokens = np.zeros((1, length), np.int32)
        tokens[0, : len(kept)] = kept
        chosen, top_tokens, top_logprobs = (np.asarray(a)[0] for a in self._score(self.params, tokens))
        scored = [TokenLogprob(kept[0], 0.0)] if kept else []
        for i, token in enumerate(kept[1:]):
            top = zip(top_tokens[i].tolist(), top_logprobs[i].tolist(), strict=True)
            scored.append(TokenLogprob(token, float(chosen[i]), list(top)))
        return scored, cut

    # --- the loop ----------------------------------------------------------------------------------
    def step(self) -> None:
        """Admit what fits into the free slots, then decode one token for every busy slot."""
        self._admit()
        active = np.array([p is not None for p in self.busy])
        if not active.any():
            return
        rows = self._rows([p for p in self.busy])
        self.cache, chosen = self._decode(
            self.params,
            self.cache,
            jnp.asarray(self.last),
            jnp.asarray(self.position),
            jnp.asarray(active),
            rows,
            window=bucket(int(self.position[active].max()) + 1, self.max_len),
        )
        chosen = jax.device_get(chosen)
        for slot in np.flatnonzero(active):
            self.position[slot] += 1
            self._take(slot, chosen, slot)

    def _admit(self) -> None:
        free = [slot for slot, p in enumerate(self.busy) if p is None]
        admitted: list[tuple[int, Pending]] = []
        while free and not self.waiting.empty():
            pending = self.waiting.get_nowait()
            limit = self.max_len - pending.params.max_new_tokens
            truncated = max(0, len(pending.prompt) - limit)
            pending.prompt = pending.prompt[truncated:]
            seed = pending.params.seed if pending.params.seed is not None else secrets.randbits(31)
            pending.completion = Completion(len(pending.prompt), truncated, seed)
            if pending.params.max_new_tokens == 0 or pending.cancelled:
                self._finish(pending, "cancelled" if pending.cancelled else "length")
                continue
            admitted.append((free.pop(0), pending))
        if not admitted:
            return
        count = 1 << (len(admitted) - 1).bit_length()
        width = bucket(max(len(p.prompt) for _, p in admitted), self.max_len)
        tokens = np.zeros((count, width), np.int32)
        lengths = np.ones(count, np.int32)
        slots = np.full(count, self.slots, np.int32)  # padding rows land past the last slot: dropped
        for row, (slot, pending) in enumerate(admitted):
            tokens[row, : len(pending.prompt)] = pending.prompt
            lengths[row], slots[row] = len(pending.prompt), slot
        requests = [p for _, p in admitted] + [None] * (count - len(admitted))
        self.cache, chosen = self._prefill(
            self.params,
            self.cache,
            jnp.asarray(tokens),
            jnp.asarray(lengths),
            jnp.asarray(slots),
            self._rows(requests),
        )
        chosen = jax.device_get(chosen)
        for row, (slot, pending) in enumerate(admitted):
            self.busy[slot] = pending
            self.position[slot] = len(pending.prompt)
            self._take(slot, chosen, row)

    def _rows(self, requests: Sequence[Pending | None]) -> RowSettings:
        def each(value: Callable[[Pending], float | int], dtype: type) -> jax.Array:
            return jnp.asarray(np.array([0 if p is None else value(p) for p in requests], dtype))

        return RowSettings(
            temperature=each(lambda p: p.params.temperature, np.float32),
            top_k=each(lambda p: p.params.top_k, np.int32),
            top_p=each(lambda p: p.params.top_p, np.float32),
            seed=each(lambda p: p.completion.seed, np.uint32),  # type: ignore[union-attr]
            count=each(lambda p: len(p.completion.tokens), np.int32),  # type: ignore[union-attr]
        )

    def _take(self, slot: int, chosen: Chosen, row: int) -> None:
        """Slot ``slot``'s request takes its next token (row ``row`` of ``chosen``) and ends if it should."""
        pending = self.busy[slot]
        assert pending is not None and pending.completion is not None
        done = pending.completion
        token = int(chosen.token[row])
        if done.first_token_seconds is None:
            done.first_token_seconds = time.perf_counter() - pending.submitted
        if pending.cancelled:
            return self._finish(pending, "cancelled", slot)
        if token in self.stop_tokens or token in pending.params.stop_tokens:
            return self._finish(pending, "stop", slot)
        done.tokens.append(token)
        self.last[slot] = token
        top = zip(chosen.top_tokens[row].tolist(), chosen.top_logprobs[row].tolist(), strict=True)
        done.logprobs.append(
            TokenLogprob(token, float(chosen.logprob[row]), list(top)[: pending.params.logprobs])
        )
        done.text = self.tokenizer.decode(done.tokens)
        if (cut := _first_stop(done.text, pending.params.stop)) is not None:
            done.text = done.text[:cut]
            return self._finish(pending, "stop", slot)
        if len(done.tokens) >= pending.params.max_new_tokens or self.position[slot] >= self.max_len:
            return self._finish(pending, "length", slot)
        self._send(pending, settled=_settled(done.text, pending.params.stop))

    def _finish(self, pending: Pending, reason: str, slot: int | None = None) -> None:
        done = pending.completion
        assert done is not None
        done.finish_reason = reason
        done.seconds = time.perf_counter() - pending.submitted
        self._send(pending, settled=len(done.text))
        if slot is not None:
            self.busy[slot] = None
        pending.done.set()

    @staticmethod
    def _send(pending: Pending, settled: int) -> None:
        if pending.on_text is not None and settled > pending.sent:
            text = pending.completion.text  # type: ignore[union-attr]
            pending.on_text(text[pending.sent : settled])
            pending.sent = settled


def run_mesh(run_dir: str) -> Mesh | None:
    """The mesh a run trained on, where it splits the model (model or expert axes) and this process has the
    devices it names; None (one device) otherwise."""
    record = UPath(run_dir) / TRAIN_FILE
    config = json.loads(record.read_text()).get("config") if record.is_file() else None
    if config is None:  # an imported run trained nowhere
        return None
    mesh = TrainConfig.model_validate(config).mesh
    split = mesh.model * mesh.expert
    if split == 1 or jax.device_count() % split:
        return None
    return data_mesh(mesh)


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Where the first stop string in ``text`` begins, if any does."""
    found = [i for i in (text.find(stop) for stop in stops if stop) if i >= 0]
    return min(found) if found else None


def _settled(text: str, stops: Sequence[str]) -> int:
    """How much of ``text`` can be sent now: not a trailing incomplete UTF-8 character (decoded as U+FFFD),
    nor the last characters that a stop string completed by the next tokens could still take back."""
    end = len(text.rstrip("\ufffd"))
    hold = max((len(stop) - 1 for stop in stops), default=0)
    return max(0, end - hold)
