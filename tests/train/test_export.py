"""Hugging Face export, checked by an independent numpy forward pass over the exported tensors."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file
from test_checkpoint import MODEL, TRAIN, repeating_batches

from marin_pipelines.train.checkpoint import load_checkpoint
from marin_pipelines.train.export import export_hf
from marin_pipelines.train.trainer import train


def rms_norm(x, weight, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * weight


def rotate(x, theta):
    """HF Llama's RoPE: x * cos + rotate_half(x) * sin, x of shape [T, heads, head_dim]."""
    seq, dim = x.shape[0], x.shape[-1]
    angles = np.arange(seq)[:, None] * theta ** (-np.arange(0, dim, 2) / dim)
    cos, sin = (np.concatenate([f(angles)] * 2, -1)[:, None, :] for f in (np.cos, np.sin))
    return x * cos + np.concatenate([-x[..., dim // 2 :], x[..., : dim // 2]], -1) * sin


def hf_forward(w: dict, c: dict, tokens: np.ndarray) -> np.ndarray:
    """Logits [T, V] of one sequence, from config.json and the safetensors alone (float64)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    seq, heads, kv, hd, eps = (
        len(tokens),
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["head_dim"],
        c["rms_norm_eps"],
    )
    x = w["model.embed_tokens.weight"][tokens]
    causal = np.triu(np.full((seq, seq), -np.inf), 1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(seq, heads, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(seq, kv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(seq, kv, hd)
        if c["model_type"] == "qwen3":
            q, k = (
                rms_norm(q, w[p + "self_attn.q_norm.weight"], eps),
                rms_norm(k, w[p + "self_attn.k_norm.weight"], eps),
            )
        q, k = rotate(q, c["rope_theta"]), rotate(k, c["rope_theta"])
        k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + causal
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        x = (
            x
            + np.einsum("hqk,khd->qhd", probs, v).reshape(seq, heads * hd)
            @ w[p + "self_attn.o_proj.weight"].T
        )
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        x = (
            x
            + (gate / (1 + np.exp(-gate)) * (h @ w[p + "mlp.up_proj.weight"].T))
            @ w[p + "mlp.down_proj.weight"].T
        )
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


@pytest.mark.parametrize(("tie", "qk_norm"), [(False, False), (True, True)])
def test_exported_logits_match_our_model(tie, qk_norm, tmp_path):
    model = MODEL.model_copy(update={"tie_embeddings": tie, "qk_norm": qk_norm})
    train(
        model,
        TRAIN.model_copy(update={"steps": 5, "warmup_steps": 1}),
        repeating_batches,
        tmp_path / "run",
        progress=False,
    )
    export_hf(tmp_path / "run", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM" if qk_norm else "LlamaForCausalLM"]
    weights = load_file(tmp_path / "hf" / "model.safetensors")
    assert ("lm_head.weight" in weights) is not tie
    ours, _ = load_checkpoint(tmp_path / "run")
    tokens = repeating_batches(7)[:2, :-1]
    expected = np.asarray(ours(tokens))
    for row in range(2):
        np.testing.assert_allclose(
            hf_forward(weights, config, tokens[row]), expected[row], atol=2e-4, rtol=1e-4
        )
