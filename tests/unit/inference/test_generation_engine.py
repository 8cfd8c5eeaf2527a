"""The generation engine against the model's full forward pass: cached decoding gives the same logits at every
position, greedy continuous batching the same tokens as decoding each prompt alone, sampling within its set
and reproducible, stops cut exactly, long prompts cut from the left and said so."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from marin_pipelines.inference.engine import Engine, QueueFull
from marin_pipelines.inference.sampling import TOP_LOGPROBS, RowSettings, SamplingParams, choose
from marin_pipelines.tokenize.tokenizer import EOS, TokenizerConfig, train_tokenizer
from marin_pipelines.train.model import KVCache, Llama, LlamaConfig
from marin_pipelines.train.moe import MoEConfig

TEXT = ["the quick brown fox jumps over the lazy dog; " * 3, "pack my box with five dozen liquor jugs. " * 3]
TOKENIZER = train_tokenizer(TEXT, TokenizerConfig(vocab_size=300, min_frequency=1))
VOCAB = TOKENIZER.get_vocab_size()
MODEL = LlamaConfig(vocab_size=VOCAB, seq_len=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
PROMPTS = [
    TOKENIZER.encode(text).ids for text in ("the quick", "pack my box with five", "a", "lazy dog; the")
]


def model(config: LlamaConfig = MODEL) -> Llama:
    return Llama(config, nnx.Rngs(0))


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(model(), TOKENIZER, slots=2)  # fewer slots than prompts: slots are refilled


def greedy_alone(llama: Llama, prompt: list[int], steps: int) -> list[int]:
    """The reference: each next token the argmax of a full forward pass over everything so far."""
    tokens = list(prompt)
    for _ in range(steps):
        tokens.append(int(jnp.argmax(llama(jnp.asarray([tokens]))[0, -1])))
    return tokens[len(prompt) :]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"qk_norm": True, "n_kv_heads": 1},  # grouped-query attention, 4 heads over 1
        {"moe": MoEConfig(experts=4, top_k=2, dropless=True)},
        {"moe": MoEConfig(experts=4, top_k=1, capacity_factor=4.0)},  # a capacity nothing reaches
    ],
    ids=["dense", "qk_norm_gqa", "moe_dropless", "moe_capacity"],
)
def test_cached_decoding_gives_the_full_forward_logits_at_every_position(changes):
    config = MODEL.model_copy(update=changes)
    llama = model(config)
    tokens = jax.random.randint(jax.random.key(1), (2, 20), 0, VOCAB)
    full = llama(tokens)
    cache = KVCache.empty(config, rows=2, max_len=config.seq_len)
    prefill = jnp.broadcast_to(jnp.arange(7), (2, 7))  # 7 positions at once, then one at a time
    logits, cache = llama.cached(tokens[:, :7], prefill, jnp.ones((2, 7), bool), cache)
    steps = [logits]
    for t in range(7, 20):
        logits, cache = llama.cached(tokens[:, t : t + 1], jnp.full((2, 1), t), jnp.ones((2, 1), bool), cache)
        steps.append(logits)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, rtol=1e-5, atol=1e-5)


def test_attending_a_window_of_the_cache_gives_the_full_forward_logits():
    """A decode step reads the cache's first ``window`` positions only (all a query may see), not all of
    them: the logits are those of the whole cache."""
    llama = model()
    tokens = jax.random.randint(jax.random.key(2), (2, 20), 0, VOCAB)
    full = llama(tokens)
    cache = KVCache.empty(MODEL, rows=2, max_len=MODEL.seq_len)
    steps = []
    for t in range(20):
        window = 16 if t < 16 else 32
        logits, cache = llama.cached(
            tokens[:, t : t + 1], jnp.full((2, 1), t), jnp.ones((2, 1), bool), cache, window=window
        )
        steps.append(logits)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "changes",
    [{}, {"qk_norm": True}, {"moe": MoEConfig(experts=4, top_k=2, dropless=True)}],
    ids=["dense", "qk_norm", "moe"],
)
def test_a_bfloat16_engine_holds_its_matrices_in_bfloat16_and_computes_the_same(changes):
    """Matrices cast once when the engine is made, not by every step; norms and the router stay float32."""
    config = MODEL.model_copy(update={"dtype": "bfloat16", **changes})
    llama = model(config)
    engine = Engine(llama, TOKENIZER)
    held = {
        jax.tree_util.keystr(path): leaf.dtype
        for path, leaf in jax.tree_util.tree_leaves_with_path(engine.params)
    }
    assert held["['blocks'][0]['attn']['wq']['kernel'].value"] == jnp.bfloat16
    assert held["['embed']['embedding'].value"] == jnp.bfloat16
    assert held["['blocks'][0]['attn_norm']['scale'].value"] == jnp.float32
    if "moe" in changes:
        assert held["['blocks'][0]['mlp']['w_up'].value"] == jnp.bfloat16
        assert held["['blocks'][0]['mlp']['router']['kernel'].value"] == jnp.float32
    tokens = jax.random.randint(jax.random.key(3), (2, 9), 0, VOCAB)
    positions = jnp.broadcast_to(jnp.arange(9), (2, 9))
    cache = KVCache.empty(config, rows=2, max_len=16)
    expected, _ = llama.cached(tokens, positions, jnp.ones((2, 9), bool), cache)
    held_model = nnx.merge(engine.graphdef, engine.params)
    logits, _ = held_model.cached(tokens, positions, jnp.ones((2, 9), bool), cache)
    np.testing.assert_array_equal(logits, expected)


def test_continuous_batching_gives_each_request_its_greedy_tokens_alone(engine):
    completions = engine.generate(PROMPTS, SamplingParams(max_new_tokens=9))
    llama = model()
    for prompt, done in zip(PROMPTS, completions, strict=True):
        assert done.tokens == greedy_alone(llama, prompt, 9) and done.finish_reason == "length"
        assert done.text == TOKENIZER.decode(done.tokens) and done.prompt_tokens == len(prompt)
        assert len(done.logprobs) == 9 and all(p.logprob <= 0 and p.top == [] for p in done.logprobs)


def test_a_seed_gives_the_same_sample_alone_or_batched_and_another_seed_another(engine):
    settings = SamplingParams(max_new_tokens=12, temperature=1.5, seed=7)
    alone = [engine.generate([p], settings)[0].tokens for p in PROMPTS]
    together = [c.tokens for c in engine.generate(PROMPTS, settings)]
    other = [c.tokens for c in engine.generate(PROMPTS, settings.model_copy(update={"seed": 8}))]
    assert alone == together and other != together


def test_top_k_and_top_p_never_pick_outside_their_set():
    """Probabilities 0.4, 0.3, 0.2, 0.1 and the rest nothing: top_k 3 draws from the first three, top_p 0.5
    from the first two (0.4 alone is short of 0.5), over 400 rows of their own seeds."""
    probs = np.array([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
    logits = jnp.asarray(np.tile(np.log(probs + 1e-12), (400, 1)), jnp.float32)

    def drawn(top_k: int, top_p: float) -> set[int]:
        rows = RowSettings(
            temperature=jnp.ones(400),
            top_k=jnp.full(400, top_k, jnp.int32),
            top_p=jnp.full(400, top_p),
            seed=jnp.arange(400, dtype=jnp.uint32),
            count=jnp.zeros(400, jnp.int32),
        )
        return set(np.asarray(choose(logits, rows).token).tolist())

    assert drawn(3, 1.0) == {0, 1, 2} and drawn(0, 0.5) == {0, 1} and drawn(1, 1.0) == {0}
    assert drawn(0, 1.0) == {0, 1, 2, 3}


def test_a_stop_string_cuts_the_text_before_it_and_streams_nothing_of_it(engine):
    free = engine.generate([PROMPTS[0]], SamplingParams(max_new_tokens=20))[0].text
    stop = free[5:8]  # three characters the unstopped text holds, first at or after 5
    pieces: list[str] = []
    pending = engine.submit(
        PROMPTS[0], SamplingParams(max_new_tokens=20, stop=(stop,)), on_text=pieces.append
    )
    while not pending.done.is_set():
        engine.step()
    done = pending.completion
    assert done.text == free[: free.index(stop)] and done.finish_reason == "stop"
    assert "".join(pieces) == done.text


def test_a_stop_token_ends_the_request_without_the_token(engine):
    first = engine.generate([PROMPTS[1]], SamplingParams(max_new_tokens=5))[0].tokens
    at = next(i for i in range(1, 5) if first[i] not in first[:i])  # a token's first time
    stopped = engine.generate([PROMPTS[1]], SamplingParams(max_new_tokens=5, stop_tokens=(first[at],)))[0]
    assert stopped.tokens == first[:at] and stopped.finish_reason == "stop"
    run_stop = Engine(model(), TOKENIZER, stop_tokens=[first[0]])
    run_stop = run_stop.generate([PROMPTS[1]], SamplingParams(max_new_tokens=5))[0]
    assert run_stop.tokens == [] and run_stop.text == "" and run_stop.finish_reason == "stop"


def test_a_prompt_longer_than_the_context_is_cut_from_the_left_and_said_so(engine):
    long = (PROMPTS[1] * 20)[:70]
    done = engine.generate([long], SamplingParams(max_new_tokens=4))[0]
    assert done.truncated == 70 - (64 - 4) and done.prompt_tokens == 60
    assert done.tokens == greedy_alone(model(), long[10:], 4)


def test_requests_that_cannot_run_are_refused_naming_the_field(engine):
    with pytest.raises(ValueError, match="max_new_tokens: 64 leaves no room"):
        engine.submit(PROMPTS[0], SamplingParams(max_new_tokens=64))
    short = SamplingParams(max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt: at least one token"):
        engine.submit([], short)
    with pytest.raises(ValueError, match=rf"outside the vocabulary \[0, {VOCAB}\)"):
        engine.submit([VOCAB], short)
    small = Engine(model(), TOKENIZER, max_waiting=1)
    small.submit(PROMPTS[0], short)
    with pytest.raises(QueueFull):
        small.submit(PROMPTS[0], short)


def test_score_is_the_full_forward_log_probability_of_each_token_with_the_likeliest_alternatives(engine):
    tokens = PROMPTS[1]
    scored, cut = engine.score(tokens)
    full = jax.nn.log_softmax(model()(jnp.asarray([tokens])))[0]
    expected = [0.0] + [float(full[i, t]) for i, t in enumerate(tokens[1:])]
    np.testing.assert_allclose([s.logprob for s in scored], expected, rtol=1e-5, atol=1e-6)
    assert cut == 0 and [s.token for s in scored] == tokens and scored[0].top == []
    for i, s in enumerate(scored[1:]):
        ranked = np.argsort(-np.asarray(full[i]))[: len(s.top)]
        assert [t for t, _ in s.top] == ranked.tolist() and len(s.top) == TOP_LOGPROBS
        np.testing.assert_allclose([p for _, p in s.top], full[i, ranked], rtol=1e-5, atol=1e-6)
        # the same numbers as the token's own: a greedy token is its first alternative, exactly
        assert (s.token == s.top[0][0]) == (s.logprob == s.top[0][1])


def generate_on_a_mesh() -> None:
    """Prints the greedy tokens of PROMPTS on one device and on data 2 x model 2."""
    from marin_pipelines.train.sharding import data_mesh
    from marin_pipelines.train.train_config import MeshConfig

    settings = SamplingParams(max_new_tokens=6)
    one = Engine(model(), TOKENIZER, slots=2).generate(PROMPTS, settings)
    mesh = Engine(model(), TOKENIZER, slots=2, mesh=data_mesh(MeshConfig(model=2))).generate(
        PROMPTS, settings
    )
    print(json.dumps([[c.tokens for c in one], [c.tokens for c in mesh]]))


def test_the_engine_runs_sharded_on_the_runs_mesh():
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    here = os.path.dirname(__file__)
    call = "import test_generation_engine as t; t.generate_on_a_mesh()"
    script = f"import sys; sys.path.insert(0, {here!r}); {call}"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    one, mesh = json.loads(out.stdout.splitlines()[-1])
    assert one == mesh and all(len(tokens) == 6 for tokens in one)


def test_the_run_tokenizer_has_eos():
    assert TOKENIZER.token_to_id(EOS) is not None


def test_a_prompt_shape_compiles_once():
    """With parameters committed to their device, as a checkpoint loads them, the fresh cache is placed as
    every later one is, so the second request of a shape reuses the first one's program: a server's warm-up
    is not compiled again by its first client (it was: 1 s on the demo's model)."""
    llama = model()
    nnx.update(llama, jax.device_put(nnx.state(llama), jax.devices()[0]))  # as load_checkpoint gives it
    engine = Engine(llama, TOKENIZER, slots=2)
    for _ in range(3):
        engine.generate([PROMPTS[0]], SamplingParams(max_new_tokens=3))
    assert engine._prefill._cache_size() == 1 and engine._decode._cache_size() == 1
