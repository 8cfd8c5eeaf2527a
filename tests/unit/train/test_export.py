"""Hugging Face export, checked by an independent numpy forward pass over the exported tensors."""

import json
import os
import shutil

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


def short_run(out, **model):
    """A run of two steps in ``out``, of MODEL with ``model``'s fields changed."""
    train(
        MODEL.model_copy(update=model),
        TRAIN.model_copy(update={"steps": 2, "warmup_steps": 1}),
        repeating_batches,
        out,
        progress=False,
    )
    return out


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


def test_a_chat_model_exports_its_template_for_transformers(tmp_path, capsys):
    """tokenizer_config.json read back without our code: jinja2 as transformers sets it up renders the same
    text as our ChatTemplate, and its eos_token is a special token of the exported tokenizer.json."""
    import jinja2
    from tokenizers import Tokenizer

    from marin_pipelines.cli import main
    from marin_pipelines.tokenize.chat_data import DEFAULT_TEMPLATE, ChatTemplate
    from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer

    run = short_run(tmp_path / "run")
    tokenizer = train_tokenizer(["a chat model answers questions"] * 20, TokenizerConfig(vocab_size=300))
    tokenizer.save(str(run / "tokenizer.json"))
    export_hf(run, tmp_path / "base")
    assert "chat_template" not in json.loads((tmp_path / "base" / "tokenizer_config.json").read_text())
    (run / "chat_template.jinja").write_text(DEFAULT_TEMPLATE)  # what an SFT run leaves
    assert main(["export-hf", str(run), "--out", str(tmp_path / "hf")]) == 0
    capsys.readouterr()
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    messages = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # transformers' settings
    rendered = environment.from_string(config["chat_template"]).render(
        messages=messages,
        add_generation_prompt=False,
        eos_token=config["eos_token"],
        bos_token=config["bos_token"],
    )
    assert rendered == ChatTemplate(tokenizer).render(messages)
    exported = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    eos = exported.token_to_id(config["eos_token"])
    assert eos is not None and any(
        t.content == config["eos_token"] and t.special for t in exported.get_added_tokens_decoder().values()
    )
    terse = tmp_path / "terse.jinja"
    terse.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert main(["export-hf", str(run), "--out", str(tmp_path / "hf2"), "--chat-template", str(terse)]) == 0
    assert (
        json.loads((tmp_path / "hf2" / "tokenizer_config.json").read_text())["chat_template"]
        == terse.read_text()
    )


def test_export_hf_writes_only_into_its_own_folder_readable_as_any_output(tmp_path, capsys):
    """A folder of the user's is refused untouched; an earlier export of the same run is replaced; an export
    of another run is refused; every file gets the mode a new file gets (here: readable by all)."""
    from marin_pipelines.cli import main

    run = short_run(tmp_path / "run")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"the user\'s": true}')
    assert main(["export-hf", str(run), "--out", str(mine)]) == 2
    error = capsys.readouterr().err
    assert (
        f"--out {mine} already holds files (config.json)" in error and "give a new or empty folder" in error
    )
    assert [p.name for p in mine.iterdir()] == ["config.json"]
    assert (mine / "config.json").read_text() == '{"the user\'s": true}'

    hf = tmp_path / "hf"
    umask = os.umask(0o022)
    try:
        assert main(["export-hf", str(run), "--out", str(hf)]) == 0
    finally:
        os.umask(umask)
    assert {f"{p.name} {p.stat().st_mode & 0o777:o}" for p in hf.iterdir()} == {
        f"{name} 644"
        for name in ("config.json", "model.safetensors", "export.json")  # no tokenizer in this run
    }
    (hf / "README.md").write_text("my notes")  # an export the user added to is still the run's export
    assert main(["export-hf", str(run), "--out", str(hf)]) == 0
    assert (hf / "README.md").read_text() == "my notes"

    other = tmp_path / "other"
    shutil.copytree(run, other)
    capsys.readouterr()
    assert main(["export-hf", str(other), "--out", str(hf)]) == 2
    assert f"--out {hf} holds an export of {run}, not of {other}" in capsys.readouterr().err
