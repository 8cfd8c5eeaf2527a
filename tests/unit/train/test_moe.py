"""Mixture-of-experts layers: routing against a per-token reference, capacity drops, balancing a planted skew,
active-parameter FLOPs counted by hand, config errors, and a real MoE run that learns."""

import json
from collections.abc import Iterator
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from pydantic import ValidationError
from resumed import assert_resumes_bit_identically

from marin_pipelines.tokenize.chat_data import PackedSequence, pack
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, TokenizerConfig, train_tokenizer
from marin_pipelines.train.checkpoint import Checkpoints, flatten
from marin_pipelines.train.model import Llama, LlamaConfig, SwiGLU
from marin_pipelines.train.moe import MoE, MoEConfig, rebalance, router_loss
from marin_pipelines.train.optimizer import decay_mask, hyperball, make_optimizer
from marin_pipelines.train.sft import sft
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import _initial_state, _make_train_step, packed_loss, train

D, F, E = 16, 24, 4


def config(**moe) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=32, seq_len=8, d_model=D, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=F, moe=MoEConfig(**moe)
    )


def layer(**moe) -> MoE:
    cfg = config(**moe)
    shared = None
    if cfg.moe.shared_experts:
        shared = SwiGLU(cfg, nnx.Rngs(1), d_ff=cfg.moe.shared_experts * F)
    return MoE(cfg.moe, D, F, "float32", nnx.Rngs(0), std=0.3, out_std=0.3, shared=shared)


def reference(moe: MoE, x: np.ndarray, capacity: int | None) -> tuple[np.ndarray, int]:
    """Token by token: each chosen expert's SwiGLU times its gate, assignments past an expert's capacity
    (first choices of all tokens first, then second choices, each in token order) left out; and how many
    assignments were kept."""
    cfg = moe.moe
    tokens = np.asarray(x, np.float64).reshape(-1, D)
    probs = np.asarray(jax.nn.softmax(tokens @ np.asarray(moe.router.kernel[...], np.float64), -1))
    chosen = np.argsort(-(probs + np.asarray(moe.router_bias[...])), axis=-1, kind="stable")[:, : cfg.top_k]
    gates = np.take_along_axis(probs, chosen, -1)
    if cfg.top_k > 1:
        gates = gates / gates.sum(-1, keepdims=True)
    w_gate, w_up, w_down = (np.asarray(w[...], np.float64) for w in (moe.w_gate, moe.w_up, moe.w_down))
    out, taken, kept = np.zeros_like(tokens), np.zeros(E, int), 0
    for j in range(cfg.top_k):
        for t, token in enumerate(tokens):
            e = chosen[t, j]
            taken[e] += 1
            if capacity is not None and taken[e] > capacity:
                continue
            kept += 1
            hidden = token @ w_gate[e]
            out[t] += gates[t, j] * ((hidden / (1 + np.exp(-hidden)) * (token @ w_up[e])) @ w_down[e])
    if moe.shared is not None:
        out += np.asarray(moe.shared(jnp.asarray(tokens, jnp.float32)))
    return out.reshape(x.shape), kept


X = np.asarray(jax.random.normal(jax.random.key(1), (2, 8, D)))


@pytest.mark.parametrize(
    "moe, capacity",
    [
        (dict(experts=E, top_k=2, dropless=True), None),
        (dict(experts=E, top_k=1, capacity_factor=4.0), None),  # capacity = every token: nothing dropped
        (dict(experts=E, top_k=2, capacity_factor=0.5), 4),  # ceil(0.5 x 16 x 2 / 4)
        (dict(experts=E, top_k=2, shared_experts=1, dropless=True), None),
    ],
)
def test_layer_matches_a_per_token_reference(moe, capacity):
    module = layer(**moe)
    y, stats = module(jnp.asarray(X))
    expected, kept = reference(module, X, capacity)
    np.testing.assert_allclose(np.asarray(y), expected, rtol=2e-4, atol=2e-5)
    assert float(stats.load.sum()) == pytest.approx(1.0)
    assert float(stats.dropped) == pytest.approx(1 - kept / (16 * module.moe.top_k))


def test_padding_takes_no_slot_no_load_no_loss_and_gets_zero_output():
    """Padding first in each row would take the tight capacity's slots ahead of the real tokens: masked, the
    real tokens are routed as if it were not there, and it counts in no statistic."""
    module = layer(experts=E, top_k=2, capacity_factor=0.5, shared_experts=1)  # 4 slots an expert
    valid = np.ones((2, 8), bool)
    valid[:, :3] = False
    y, stats = module(jnp.asarray(X), jnp.asarray(valid))
    real = X[valid][None]  # the 10 real tokens in order
    expected, kept = reference(module, real, capacity=module.moe.capacity(16))
    np.testing.assert_allclose(np.asarray(y)[valid], expected[0], rtol=2e-4, atol=2e-5)
    assert np.all(np.asarray(y)[~valid] == 0)
    assert float(stats.dropped) == pytest.approx(1 - kept / 20)
    _, alone = module(jnp.asarray(real))  # the real tokens without the padding (another capacity)
    for field in ("load", "entropy", "aux_loss", "z_loss"):
        np.testing.assert_allclose(getattr(stats, field), getattr(alone, field), rtol=1e-5, err_msg=field)


def test_padding_content_changes_nothing_in_a_packed_moe_batch():
    """Packed fine-tuning rows end in padding (segment 0): whatever tokens it holds, the loss, the router's
    losses, the gradient and the load the balance bias follows are the same."""
    cfg = config(experts=E, top_k=2, capacity_factor=0.5, balance="aux_loss").model_copy(
        update={"n_layers": 2}
    )
    graphdef, params = nnx.split(Llama(cfg, nnx.Rngs(0)))
    segments = np.array([[1, 1, 1, 2, 2, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 0, 0]], np.int32)
    tokens = np.asarray(jax.random.randint(jax.random.key(4), segments.shape, 0, 32), np.int32)

    def loss_grads_load(padding: int) -> tuple:
        filled = np.where(segments > 0, tokens, padding)
        batch = jnp.asarray(np.stack([filled, segments, np.ones_like(segments)], axis=1))

        def loss(params: nnx.State) -> tuple:
            value, losses = packed_loss(nnx.merge(graphdef, params), batch, z_loss_weight=1e-3)
            return value + router_loss(losses.routing, cfg.moe), losses.routing

        (value, routing), grads = jax.value_and_grad(loss, has_aux=True)(params)
        return value, flatten(grads), [np.asarray(routing[layer].load) for layer in sorted(routing)]

    (value, grads, load), (other_value, other_grads, other_load) = map(loss_grads_load, (0, 31))
    assert float(value) == float(other_value)
    for name, grad in grads.items():
        np.testing.assert_array_equal(grad, other_grads[name], err_msg=name)
    np.testing.assert_array_equal(load, other_load)


def test_packed_sft_of_an_moe_is_the_same_whatever_its_padding_holds(tmp_path, monkeypatch):
    """Fine-tuning an MoE through `sft` (its packing, the trainer's packed step, the balance bias's update):
    the padding the packing leaves, token 0, replaced by other ids changes no loss, routing figure or
    parameter. Routed, padding took the tight capacity's slots and counted in the load the bias follows."""
    words = ["river", "stone", "paper", "light", "garden", "window", "market", "winter"]
    rng = np.random.default_rng(0)
    chats = [
        [{"role": role, "content": " ".join(rng.choice(words, int(rng.integers(1, 6))))} for role in roles]
        for roles in [("user", "assistant")] * 24
    ]
    tokenizer = train_tokenizer([m["content"] for c in chats for m in c] * 5, TokenizerConfig(vocab_size=300))
    base = tmp_path / "base"
    moe = config(experts=E, top_k=2, capacity_factor=0.5, bias_rate=1e-2).model_copy(
        update={"vocab_size": tokenizer.get_vocab_size(), "seq_len": 64, "n_layers": 2}
    )

    def tokens(step: int) -> np.ndarray:
        return np.random.default_rng(step).integers(0, moe.vocab_size, (4, moe.seq_len + 1))

    train(moe, TrainConfig(steps=1, batch_size=4, warmup_steps=1, peak_flops=1e10), tokens, base, False)
    tokenizer.save(str(base / TOKENIZER_FILE))
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": chat}) + "\n" for chat in chats))
    run = TrainConfig(steps=3, batch_size=4, learning_rate=1e-2, warmup_steps=1, peak_flops=1e10)

    def tuned(filler: int) -> tuple[list[dict], dict]:
        def filled(*args) -> Iterator[PackedSequence]:
            for row in pack(*args):
                padding.append((row.segments == 0).mean())
                yield replace(row, tokens=np.where(row.segments > 0, row.tokens, filler).astype(np.int32))

        padding = []

        monkeypatch.setattr("marin_pipelines.train.sft.pack", filled)
        out = tmp_path / f"filled_{filler}"
        sft(base, [data], out, run, progress=False)
        lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        figures = [{k: v for k, v in m.items() if "loss" in k or "moe" in k or "norm" in k} for m in lines]
        assert np.mean(padding) > 0.1  # what the rows' ends hold matters
        with Checkpoints(out / "checkpoints") as checkpoints:
            return figures, checkpoints.restore_flat(checkpoints.latest_step(), ("params",))["params"]

    (figures, params), (other_figures, other_params) = tuned(0), tuned(7)
    assert len(figures) == 3 and any("moe_dropped" in k for k in figures[0])
    assert figures == other_figures
    for name, value in params.items():
        np.testing.assert_array_equal(value, other_params[name], err_msg=name)
    bias = params["blocks.0.mlp.router_bias"]
    assert np.abs(bias).max() > 0  # the balance bias moved: its update saw the same load in both


def test_planted_skew_drops_what_exceeds_the_capacity_and_the_bias_rebalances_it():
    """A router that sends every token to expert 0: with capacity 4 of 16 tokens, 12 assignments are
    dropped (their rows are zero: no shared expert), the load is all on one expert; the balance bias then
    spreads the load without any gradient."""
    cfg = config(experts=E, top_k=1, capacity_factor=1.0, bias_rate=0.02)
    model = Llama(cfg, nnx.Rngs(0))
    model.blocks[0].mlp.router.kernel[...] = 0.3 * jax.random.normal(jax.random.key(3), (D, E))
    model.blocks[0].mlp.router_bias[...] = jnp.array([2.0, 0.0, 0.0, 0.0])  # planted: expert 0 always wins
    x = jnp.asarray(X)
    y, stats = model.blocks[0].mlp(x)
    assert float(stats.dropped) == pytest.approx(12 / 16)
    assert np.asarray(stats.load).tolist() == [1.0, 0.0, 0.0, 0.0]
    rows = np.asarray(y).reshape(16, D)
    assert np.all(rows[4:] == 0) and np.all(np.abs(rows[:4]).sum(-1) > 0)  # the first 4 tokens kept

    graphdef, params = nnx.split(model)
    tokens = jax.random.randint(jax.random.key(2), (4, 8), 0, 32)
    imbalance = []
    for _ in range(80):
        _, routing = nnx.merge(graphdef, params).forward(tokens)
        imbalance.append(float(routing[0].load.max() / routing[0].load.mean()))
        params = rebalance(params, routing, cfg.moe)
    assert imbalance[0] == pytest.approx(E) and max(imbalance[-10:]) <= 1.5


def test_aux_loss_is_one_when_balanced_and_only_counted_when_chosen():
    module = layer(experts=E, top_k=1, dropless=True, router_z_loss_weight=0.0)
    module.router.kernel[...] = jnp.zeros((D, E))  # uniform probabilities; the bias breaks the ties evenly
    _, stats = module(jnp.asarray(X))
    with_bias = MoEConfig(experts=E, top_k=1, dropless=True, router_z_loss_weight=0.0)
    with_aux = with_bias.model_copy(update={"balance": "aux_loss", "aux_loss_weight": 0.5})
    assert float(stats.aux_loss) == pytest.approx(1.0)
    assert float(router_loss({0: stats}, with_bias)) == 0.0
    assert float(router_loss({0: stats}, with_aux)) == pytest.approx(0.5)


def test_active_parameters_and_flops_by_hand():
    """2 layers (layer 1 MoE: every 2), d 16, 8 experts of width 12, top 2, 1 shared; attention 4 d^2."""
    cfg = LlamaConfig(
        vocab_size=40, seq_len=8, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=24,
        moe=MoEConfig(experts=8, top_k=2, shared_experts=1, d_ff=12, every=2),
    )  # fmt: skip
    attention, dense_mlp, expert, router = 4 * 16 * 16, 3 * 16 * 24, 3 * 16 * 12, 16 * 8
    norms, embeddings = 5 * 16, 2 * 40 * 16
    total = 2 * attention + dense_mlp + router + (8 + 1) * expert + norms + embeddings
    active = 2 * attention + dense_mlp + router + (2 + 1) * expert + norms + embeddings
    assert cfg.num_params() == total and cfg.num_params(active=True) == active
    model = Llama(cfg, nnx.Rngs(0))
    leaves = sum(leaf.size for leaf in jax.tree.leaves(nnx.state(model)))
    assert leaves == total + 8  # the balance bias is state, not a parameter
    matmul = 2 * attention + dense_mlp + router + 3 * expert + 40 * 16
    assert cfg.flops_per_token() == 3 * (2 * matmul + 2 * (4 * 8 * 16 + 3 * 8 * 2))


@pytest.mark.parametrize(
    "moe, message",
    [
        (dict(experts=4, top_k=5), "top_k (5) must not exceed experts (4)"),
        (dict(experts=4, top_k=1, dropless=True, capacity_factor=2.0), "not both"),
        (dict(experts=1, top_k=1), "experts"),
        (dict(experts=4, top_k=1, balance="loss"), "'bias' or 'aux_loss'"),
    ],
)
def test_impossible_configs_name_the_field(moe, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MoEConfig(**moe)


def test_moe_run_learns_logs_routing_and_resumes_bit_identically(tmp_path):
    cfg = config(experts=E, top_k=2, capacity_factor=1.0).model_copy(update={"n_layers": 2})
    run = TrainConfig(steps=30, batch_size=8, learning_rate=1e-2, warmup_steps=3, checkpoint_every=10)
    run = run.model_copy(update={"peak_flops": 1e10})
    pattern = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7])

    def batches(step: int) -> np.ndarray:  # a periodic stream at random offsets: learnable
        offsets = np.random.default_rng(step).integers(0, len(pattern), run.batch_size)
        return np.stack([np.resize(np.roll(pattern, -o), cfg.seq_len + 1) for o in offsets])

    whole, resumed = assert_resumes_bit_identically(cfg, run, batches, tmp_path)
    assert whole["final_loss"] < 0.7 * whole["initial_loss"] and resumed["resumed_from_step"] == 10
    assert whole["params"] > whole["active_params"] == cfg.num_params(active=True)
    metrics = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert {"moe_load_max_over_mean", "moe_dropped", "moe_router_entropy", "moe_aux_loss"} <= metrics[
        0
    ].keys()


def test_the_trainers_bias_update_moves_a_planted_skew_toward_balance():
    """The trainer's step moves each layer's bias by that layer's load: a bias planted on expert 0 sends it
    every token, and the steps (learning rate ~0: only the bias moves) spread the load again."""
    cfg = config(experts=E, top_k=1, capacity_factor=1.0, bias_rate=0.02)
    model = Llama(cfg, nnx.Rngs(0))
    model.blocks[0].mlp.router.kernel[...] = 0.3 * jax.random.normal(jax.random.key(3), (D, E))
    model.blocks[0].mlp.router_bias[...] = jnp.array([2.0, 0.0, 0.0, 0.0])
    run = TrainConfig(steps=80, batch_size=4, learning_rate=1e-9, warmup_steps=1, spike_window=0)
    tx = make_optimizer(run)
    step = jax.jit(_make_train_step(nnx.graphdef(model), tx, run, cfg.moe))
    state = _initial_state(model, tx, run)
    tokens = jax.random.randint(jax.random.key(2), (4, 9), 0, 32)
    imbalance = []
    for _ in range(run.steps):
        state, metrics = step(state, tokens)
        imbalance.append(float(metrics["moe_load_max_over_mean"]))
    assert imbalance[0] == pytest.approx(E) and max(imbalance[-10:]) <= 1.5
    bias = np.asarray(state["params"]["blocks"][0]["mlp"]["router_bias"][...])
    assert bias[0] < 2.0 and np.all(bias[1:] > 0)


def test_expert_weights_decay_and_each_expert_keeps_its_own_sphere_under_adamh():
    params = nnx.split(Llama(config(experts=E, top_k=1), nnx.Rngs(0)))[1]
    decays = flatten(decay_mask(params))
    assert decays["blocks.0.mlp.w_gate"] and decays["blocks.0.mlp.router.kernel"]
    assert not decays["blocks.0.mlp.router_bias"] and not decays["embed.embedding"]
    expert = jnp.stack([jnp.full((3, 2), 1.0), jnp.full((3, 2), 5.0)])  # experts of very different norms
    tx = hyperball(0.1, 1e-3)
    state = tx.init({"w": expert})
    updates, _ = tx.update({"w": jnp.ones_like(expert)}, state, {"w": expert})
    moved = expert + updates["w"]
    np.testing.assert_allclose(
        np.linalg.norm(np.asarray(moved), axis=(1, 2)), [6**0.5, 5 * 6**0.5], rtol=1e-6
    )


def test_moe_every_beyond_the_layers_is_refused_naming_the_field():
    """Every k-th layer is MoE: with k past the last layer there is none, and the router loss would have no
    layer to average over."""
    with pytest.raises(ValidationError, match=r"moe.every \(3\) must not exceed n_layers \(2\)"):
        LlamaConfig(
            **{
                **config(experts=E, top_k=1).model_dump(),
                "n_layers": 2,
                "moe": {"experts": E, "top_k": 1, "every": 3},
            }
        )
