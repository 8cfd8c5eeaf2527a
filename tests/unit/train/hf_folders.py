"""Real Hugging Face model folders, written as transformers saves them, with numpy and safetensors only (no
torch, no transformers): ``config.json``, the weights (one file or shards with their index), a byte-level
BPE ``tokenizer.json``, ``tokenizer_config.json`` with a chat template, ``generation_config.json``."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

# Llama 3 Instruct's special tokens and chat template (shortened: no system prompt date or tools)
LLAMA_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)
LLAMA_TEMPLATE = (
    "{{- bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>"
    "\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
# Qwen3's (ChatML): no BOS in tokenizer_config.json, <|im_end|> ends a turn
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "A model brought in from elsewhere still speaks its own tokens.",
    "Grouped-query attention shares keys and values between heads.",
] * 20


@functools.cache
def hf_tokenizer(specials: tuple[str, ...]) -> str:
    """A byte-level BPE tokenizer.json with ``specials`` first (ids 0, 1, ...), and, as Llama 3's, a
    post-processor that adds the first of them before a text encoded with special tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TEXT, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{specials[0]} $A", special_tokens=[(specials[0], 0)]
    )
    return tokenizer.to_str()


def hf_weights(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 tensors of the shapes ``config`` asks, by HF's names, (out, in) as torch keeps them."""
    rng = np.random.default_rng(seed)
    d, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    hd, ff, vocab = config["head_dim"], config["intermediate_size"], config["vocab_size"]

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.2).astype(np.float32)

    def scale(dim: int) -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)

    w = {"model.embed_tokens.weight": matrix(vocab, d), "model.norm.weight": scale(d)}
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = matrix(vocab, d)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w |= {
            p + "self_attn.q_proj.weight": matrix(heads * hd, d),
            p + "self_attn.k_proj.weight": matrix(kv * hd, d),
            p + "self_attn.v_proj.weight": matrix(kv * hd, d),
            p + "self_attn.o_proj.weight": matrix(d, heads * hd),
            p + "mlp.gate_proj.weight": matrix(ff, d),
            p + "mlp.up_proj.weight": matrix(ff, d),
            p + "mlp.down_proj.weight": matrix(d, ff),
            p + "input_layernorm.weight": scale(d),
            p + "post_attention_layernorm.weight": scale(d),
        }
        if config["model_type"] == "qwen3":
            w |= {p + "self_attn.q_norm.weight": scale(hd), p + "self_attn.k_norm.weight": scale(hd)}
    return w


def write_hf_folder(
    folder: Path,
    qwen: bool = False,
    kv_heads: int = 2,
    tie: bool = False,
    shards: int = 1,
    bf16: bool = False,
    config_updates: dict | None = None,
    weights_updates: dict | None = None,
    template_file: bool = False,
) -> tuple[dict, dict[str, np.ndarray]]:
    """A LlamaForCausalLM (or, ``qwen``, Qwen3ForCausalLM) folder; its config and float32 tensors.
    ``config_updates`` / ``weights_updates`` (None deletes) change what is written; ``shards`` > 1 writes
    the weights sharded with an index; ``bf16`` stores them in bfloat16 (the tensors returned are the exact
    float32 values); ``template_file`` puts the chat template in chat_template.jinja."""
    folder.mkdir(parents=True, exist_ok=True)
    specials = QWEN_SPECIALS if qwen else LLAMA_SPECIALS
    tokenizer = Tokenizer.from_str(hf_tokenizer(specials))
    config = {
        "architectures": ["Qwen3ForCausalLM" if qwen else "LlamaForCausalLM"],
        "model_type": "qwen3" if qwen else "llama",
        "vocab_size": 320,  # beyond the tokenizer's 300: padded, as Qwen's embeddings are
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": kv_heads,
        "head_dim": 8,
        "hidden_act": "silu",
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "rope_theta": 500000.0,
        "rope_scaling": None,
        "tie_word_embeddings": tie,
        "attention_bias": False,
        "torch_dtype": "bfloat16" if bf16 else "float32",
        "bos_token_id": tokenizer.token_to_id(specials[0]),
        "eos_token_id": tokenizer.token_to_id(specials[-1] if qwen else specials[1]),
        **({"sliding_window": None, "use_sliding_window": False} if qwen else {"mlp_bias": False}),
    }
    weights = hf_weights(config)
    if bf16:
        weights = {k: v.astype(ml_dtypes.bfloat16).astype(np.float32) for k, v in weights.items()}
    for source, updates in ((config, config_updates), (weights, weights_updates)):
        for key, value in (updates or {}).items():
            if value is None:
                source.pop(key, None)
            else:
                source[key] = value
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    stored = {
        k: v.astype(ml_dtypes.bfloat16) if bf16 and v.dtype == np.float32 else v for k, v in weights.items()
    }
    names = sorted(stored)
    if shards == 1:
        save_file(stored, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for shard in range(shards):
            file = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
            part = {name: stored[name] for name in names[shard::shards]}
            save_file(part, str(folder / file), metadata={"format": "pt"})
            weight_map |= dict.fromkeys(part, file)
        total = sum(v.nbytes for v in stored.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (folder / "tokenizer.json").write_text(tokenizer.to_str())
    template = QWEN_TEMPLATE if qwen else LLAMA_TEMPLATE
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None if qwen else specials[0],
        "eos_token": "<|im_end|>" if qwen else {"content": "<|eot_id|>", "special": True},
        **({} if template_file else {"chat_template": template}),
    }
    if template_file:
        (folder / "chat_template.jinja").write_text(template)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    stops = ("<|im_end|>", "<|endoftext|>") if qwen else ("<|end_of_text|>", "<|eot_id|>")
    generation = {
        "bos_token_id": config.get("bos_token_id"),
        "eos_token_id": [tokenizer.token_to_id(token) for token in stops],
    }
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))
    return config, weights
