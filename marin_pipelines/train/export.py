"""Export a checkpoint to Hugging Face format: ``model.safetensors`` + ``config.json`` (+ the run's
``tokenizer.json`` when the training directory has one, with a ``tokenizer_config.json`` naming its special
tokens (``run_special_tokens``) and, for a chat model, its chat template, and a ``generation_config.json``
with the ids generation stops at, so the folder loads and chats on its own). ``import_hf`` is the reverse.

The folder is the export's alone: ``export.json`` (written first) names the run it holds, and a folder that
is neither empty nor an export of the same run is refused, so that the user's own files are never replaced
or mixed with the export's. Every file gets the mode any new file gets here (the umask's).

Our layers map one to one onto ``LlamaForCausalLM`` (RoPE on channel halves, as HF's
``rotate_half``); with QK-norm the model is exactly ``Qwen3ForCausalLM`` (RMSNorm over each head's
queries and keys before RoPE), so it is exported as that. Kernels are stored (in, out) by flax and
(out, in) by torch, hence the transposes. The training directory and the output may be URLs (gs://).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem
from safetensors.numpy import save_file
from tokenizers import Tokenizer
from upath import UPath

from marin_pipelines.store import is_local
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, run_special_tokens, special_token_ids
from marin_pipelines.train.checkpoint import flatten, load_params, training_dir
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.train_config import CHAT_TEMPLATE_FILE

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
GENERATION_CONFIG_FILE = "generation_config.json"  # the token ids generation starts with and stops at
EXPORT_RECORD = "export.json"  # the run (and step) the folder is an export of


class NotAnExport(ValueError):
    """An output folder that holds other files than an earlier export of the same run."""


def hf_config(config: LlamaConfig) -> dict[str, Any]:
    architecture = "Qwen3" if config.qk_norm else "Llama"
    return {
        "architectures": [f"{architecture}ForCausalLM"],
        "model_type": architecture.lower(),
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "intermediate_size": config.d_ff,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": config.seq_len,
        "rms_norm_eps": config.norm_eps,
        "rope_theta": config.rope_theta,
        "tie_word_embeddings": config.tie_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }


def tensor_names(config: LlamaConfig) -> dict[str, tuple[str, bool]]:
    """Our flat parameter names -> HF tensor names, and whether the tensor is stored transposed (a kernel:
    flax keeps it (in, out), torch (out, in)). The one map both ways: ``hf_tensors`` and ``import_hf``."""
    names = {
        "embed.embedding": ("model.embed_tokens.weight", False),
        "final_norm.scale": ("model.norm.weight", False),
    }
    if not config.tie_embeddings:
        names["lm_head.kernel"] = ("lm_head.weight", True)
    linear = {
        "attn.wq": "self_attn.q_proj",
        "attn.wk": "self_attn.k_proj",
        "attn.wv": "self_attn.v_proj",
        "attn.wo": "self_attn.o_proj",
        "mlp.w_gate": "mlp.gate_proj",
        "mlp.w_up": "mlp.up_proj",
        "mlp.w_down": "mlp.down_proj",
    }
    norms = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"}
    if config.qk_norm:
        norms.update({"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"})
    for i in range(config.n_layers):
        for ours, theirs in linear.items():
            names[f"blocks.{i}.{ours}.kernel"] = (f"model.layers.{i}.{theirs}.weight", True)
        for ours, theirs in norms.items():
            names[f"blocks.{i}.{ours}.scale"] = (f"model.layers.{i}.{theirs}.weight", False)
    return names


def hf_tensors(params: dict[str, np.ndarray], config: LlamaConfig) -> dict[str, np.ndarray]:
    """Our flat parameter names -> HF tensor names and layouts."""
    return {
        theirs: np.ascontiguousarray(params[ours].T if transposed else params[ours], np.float32)
        for ours, (theirs, transposed) in tensor_names(config).items()
    }


def export_hf(
    train_dir: str | os.PathLike[str], out: str | os.PathLike[str], chat_template: str | None = None
) -> dict[str, Any]:
    """Write the latest checkpoint of ``train_dir`` as a Hugging Face model into ``out``, a folder or a URL
    (written on local disk first, then uploaded: safetensors writes files), new, empty or an earlier export
    of the same run (``check_export_folder``). ``chat_template`` (Jinja) goes into ``tokenizer_config.json``;
    by default the training directory's ``chat_template.jinja``, if any."""
    run = run_url(train_dir)
    check_export_folder(str(out), run)
    _, params, config, step = load_params(train_dir)
    if config.moe is not None:
        raise ValueError(
            f"{train_dir} holds a mixture-of-experts model: export-hf writes dense LlamaForCausalLM / "
            "Qwen3ForCausalLM only (no MoE mapping yet)"
        )
    template = train_dir_template(UPath(train_dir)) if chat_template is None else chat_template
    record = json.dumps({"run": run, "step": step}, indent=2)
    fs, target = _folder(str(out))
    fs.makedirs(target, exist_ok=True)
    fs.pipe_file(f"{target}/{EXPORT_RECORD}", record.encode())  # first: a half-written export is still known
    if isinstance(fs, LocalFileSystem):
        return write_hf(params, config, step, UPath(train_dir), Path(target), template)
    with tempfile.TemporaryDirectory() as scratch:
        hf = write_hf(params, config, step, UPath(train_dir), Path(scratch), template)
        for file in sorted(Path(scratch).iterdir()):
            fs.put_file(str(file), f"{target}/{file.name}")
    return hf


def run_url(train_dir: str | os.PathLike[str]) -> str:
    """A training directory as an export records it: its absolute path, or its URL."""
    path = training_dir(train_dir)
    return os.path.abspath(path) if is_local(path) else str(path).rstrip("/")


def check_export_folder(out: str, run: str) -> None:
    """``out`` may take an export of ``run``: it is missing, empty, or an earlier export of the same run
    (its ``export.json`` says so), whose files the export replaces. Any other folder is refused: its
    ``config.json`` would be replaced and its files mixed with the export's."""
    fs, target = _folder(out)
    if not fs.exists(target):
        return
    if not fs.isdir(target):
        raise NotAnExport(f"--out {out} is a file; give a folder for the export")
    names = sorted(PurePosixPath(p.rstrip("/")).name for p in fs.ls(target, detail=False))
    if not names:
        return
    if EXPORT_RECORD not in names:
        listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise NotAnExport(
            f"--out {out} already holds files ({listed}) and is no export of {run}: export-hf would replace "
            "its config.json and mix the export's files with them; give a new or empty folder"
        )
    try:
        recorded = json.loads(fs.cat_file(f"{target}/{EXPORT_RECORD}"))["run"]
    except (json.JSONDecodeError, KeyError, TypeError):
        recorded = None
    if recorded != run:
        raise NotAnExport(
            f"--out {out} holds an export of {recorded or 'an unknown run'}, not of {run}: give a new or "
            "empty folder (or remove that export first)"
        )


def _folder(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The file system and path of a folder, without a trailing slash (files are named below it)."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/") or "/"


def train_dir_template(train_dir: UPath) -> str | None:
    path = train_dir / CHAT_TEMPLATE_FILE
    return path.read_text() if path.is_file() else None


def write_hf(
    params: Any, config: LlamaConfig, step: int, train_dir: UPath, folder: Path, chat_template: str | None
) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    flat = {name: np.asarray(leaf) for name, leaf in flatten(params).items()}
    save_file(
        hf_tensors(flat, config), str(folder / WEIGHTS_FILE), metadata={"format": "pt", "step": str(step)}
    )
    hf = hf_config(config)
    (folder / CONFIG_FILE).write_text(json.dumps(hf, indent=2))
    shutil.copymode(folder / CONFIG_FILE, folder / WEIGHTS_FILE)  # safetensors writes it private (0600)
    tokenizer = train_dir / TOKENIZER_FILE
    if tokenizer.is_file():
        (folder / TOKENIZER_FILE).write_bytes(tokenizer.read_bytes())
        specials = run_special_tokens(train_dir)
        tokenizer_config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": specials.bos,
            "eos_token": specials.eos,
            "model_max_length": config.seq_len,
            "clean_up_tokenization_spaces": False,
            **({"chat_template": chat_template} if chat_template else {}),
        }
        (folder / TOKENIZER_CONFIG_FILE).write_text(json.dumps(tokenizer_config, indent=2))
        ids = special_token_ids(Tokenizer.from_str(tokenizer.read_text()), specials)
        generation = {
            "bos_token_id": ids.bos,
            "eos_token_id": list(ids.stop) if len(ids.stop) > 1 else ids.eos,
        }
        (folder / GENERATION_CONFIG_FILE).write_text(json.dumps(generation, indent=2))
    return hf
