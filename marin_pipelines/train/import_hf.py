"""Import a local Hugging Face ``LlamaForCausalLM`` or ``Qwen3ForCausalLM`` folder as a run folder: the
reverse of ``export.py``, through the same tensor map (``tensor_names``), so that an export imported again
gives back the same parameters bit for bit.

The folder holds ``config.json``, the weights (``model.safetensors``, or shards named by
``model.safetensors.index.json``), ``tokenizer.json`` (byte-level BPE: bits per byte need each token's
bytes), ``tokenizer_config.json`` / ``generation_config.json`` with the special tokens, and maybe a chat
template (``chat_template.jinja``, or ``tokenizer_config.json``'s ``chat_template``). The run folder holds
what ``train`` leaves: an orbax checkpoint (step 0, the parameters in float32, the trainer's parameter
dtype), ``model.json``, ``train.json`` (its summary's ``imported`` record says where the model came from,
the sha256 of each file read, and the dtype converted from), ``tokenizer.json``, the chat template
(``chat_template.jinja``) and the run's special tokens (``special_tokens.json``, where they are not this
project's). ``inputs.json`` records the folder it was made from, so that ``train`` or ``sft`` into it is
refused rather than mixed with it.

``read_hf_folder`` checks everything it can without writing (the config's fields, every tensor's name,
shape and dtype, the tokenizer and its special tokens): what the model cannot take is one line naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from jinja2 import TemplateError
from pydantic import ValidationError
from safetensors import safe_open
from tokenizers import Tokenizer

from marin_pipelines.config_errors import describe
from marin_pipelines.tokenize.chat_data import ChatTemplate
from marin_pipelines.tokenize.tokenizer import (
    TOKENIZER_FILE,
    SpecialTokens,
    save_special_tokens,
    special_token_ids,
    token_byte_lengths,
)
from marin_pipelines.train.checkpoint import Checkpoints, abstract_model, flatten, unflatten
from marin_pipelines.train.export import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    TOKENIZER_CONFIG_FILE,
    WEIGHTS_FILE,
    hf_config,
    tensor_names,
)
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.run_inputs import INPUTS_FILE, file_sha256, given
from marin_pipelines.train.train_config import (
    CHAT_TEMPLATE_FILE,
    CHECKPOINTS_DIR,
    IMPORTED,
    MODEL_FILE,
    TRAIN_FILE,
)

INDEX_FILE = "model.safetensors.index.json"  # sharded weights: tensor name -> shard file
HF_TEMPLATE_FILE = "chat_template.jinja"  # transformers' own file for a chat template
IMPORTED_STEP = 0  # the checkpoint's step: no training step was taken here
ARCHITECTURES = ("LlamaForCausalLM", "Qwen3ForCausalLM")  # Qwen3: Llama with QK-norm
# HF's defaults for the fields a config.json may leave out (transformers' LlamaConfig / Qwen3Config)
MAX_POSITIONS = {"LlamaForCausalLM": 2048, "Qwen3ForCausalLM": 32768}
HF_RMS_NORM_EPS = 1e-6
HF_ROPE_THETA = 10_000.0
# dtypes safetensors may hold, converted exactly to float32; any other is refused
FLOAT_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
# tensors that are not parameters: old Llama checkpoints store RoPE's frequencies, which rope_theta gives
NOT_PARAMETERS = ("rotary_emb.inv_freq",)
# config.json fields that export-hf writes, and what they must be for this model
MUST_AGREE = {
    "model_type": "the architecture's model type",
    "head_dim": "the model's head_dim is hidden_size / num_attention_heads",
    "hidden_act": "the MLP is SwiGLU, gated by silu",
    "attention_bias": "the attention projections have no bias",
    "mlp_bias": "the MLP projections have no bias",
}


class NotImportable(ValueError):
    """A Hugging Face folder this project's model cannot take: the message names the field or file."""


class Stored(NamedTuple):
    """A tensor as a safetensors header describes it."""

    file: Path
    dtype: str  # safetensors' name: F32, BF16, ...
    shape: list[int]


@dataclass(frozen=True)
class HFModel:
    """A Hugging Face folder as read and checked, before anything is written."""

    folder: Path
    architecture: str
    config: LlamaConfig
    tensors: dict[str, Stored]  # by HF tensor name
    dtypes: tuple[str, ...]  # the stored dtypes of the parameters
    ignored: tuple[str, ...]  # stored tensors that are not parameters (RoPE's frequencies, a tied head)
    tokenizer: str  # tokenizer.json as read
    specials: SpecialTokens
    chat_template: str | None
    sources: tuple[Path, ...]  # every file read: their sha256 go into the record


def read_hf_folder(folder: str | os.PathLike[str]) -> HFModel:
    """The model of a Hugging Face folder, every part checked (no tensor data read, nothing written)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"not a folder: {folder}")
    hf = _json(folder / CONFIG_FILE, required=True)
    architecture, config = model_config(hf, f"{folder / CONFIG_FILE}")
    weight_files, tensors = _tensors(folder)
    ignored = _check_tensors(tensors, config, folder)
    tokenizer_file = folder / TOKENIZER_FILE
    if not tokenizer_file.is_file():
        raise NotImportable(
            f"{folder} has no {TOKENIZER_FILE}: only a Hugging Face tokenizers file is read (not a "
            "SentencePiece tokenizer.model)"
        )
    tokenizer_json = tokenizer_file.read_text()
    tokenizer = _tokenizer(tokenizer_json, tokenizer_file, config)
    tokenizer_config = _json(folder / TOKENIZER_CONFIG_FILE)
    generation = _json(folder / GENERATION_CONFIG_FILE)
    specials = special_tokens(tokenizer, tokenizer_config, generation, hf, folder)
    template = _chat_template(folder, tokenizer_config)
    if template is not None:
        try:
            ChatTemplate(tokenizer, template, specials)
        except TemplateError as e:
            raise NotImportable(f"{folder}: the chat template is not Jinja that renders: {e}") from None
    read = [CONFIG_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, GENERATION_CONFIG_FILE, HF_TEMPLATE_FILE]
    sources = [folder / name for name in read if (folder / name).is_file()]
    if (folder / INDEX_FILE).is_file() and not (folder / WEIGHTS_FILE).is_file():
        sources.append(folder / INDEX_FILE)
    return HFModel(
        folder=folder.absolute(),
        architecture=architecture,
        config=config,
        tensors=tensors,
        dtypes=tuple(sorted({FLOAT_DTYPES[t.dtype] for name, t in tensors.items() if name not in ignored})),
        ignored=tuple(ignored),
        tokenizer=tokenizer_json,
        specials=specials,
        chat_template=template,
        sources=(*sources, *weight_files),
    )


def model_config(hf: dict[str, Any], where: str) -> tuple[str, LlamaConfig]:
    """The architecture named by a ``config.json`` and our model of it; a field it cannot take refused."""
    architectures = hf.get("architectures")
    if (
        not isinstance(architectures, list)
        or len(architectures) != 1
        or architectures[0] not in ARCHITECTURES
    ):
        raise NotImportable(
            f"{where}: architectures {architectures!r} is not one of {sorted(ARCHITECTURES)} (the dense "
            "decoders this project trains)"
        )
    architecture = architectures[0]
    _refuse_unsupported(hf, where)
    missing = [
        key
        for key in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
        )
        if key not in hf
    ]
    if missing:
        raise NotImportable(f"{where} has no {', '.join(missing)}")
    rope = _rope_parameters(hf)
    try:
        config = LlamaConfig(
            vocab_size=hf["vocab_size"],
            seq_len=hf.get("max_position_embeddings", MAX_POSITIONS[architecture]),
            d_model=hf["hidden_size"],
            n_layers=hf["num_hidden_layers"],
            n_heads=hf["num_attention_heads"],
            n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
            d_ff=hf["intermediate_size"],
            rope_theta=hf.get("rope_theta", rope.get("rope_theta", HF_ROPE_THETA)),
            tie_embeddings=hf.get("tie_word_embeddings", False),
            qk_norm=architecture == "Qwen3ForCausalLM",  # Qwen3: RMSNorm on each head's queries and keys
            norm_eps=hf.get("rms_norm_eps", HF_RMS_NORM_EPS),
        )
    except ValidationError as e:
        raise NotImportable(f"{where}: {describe(e, title='model')}") from None
    ours = hf_config(config)
    for key, reason in MUST_AGREE.items():
        if hf.get(key) is not None and hf[key] != ours[key]:
            raise NotImportable(
                f"{where}: {key} is {hf[key]!r}, this model takes only {ours[key]!r} ({reason})"
            )
    return architecture, config


def _refuse_unsupported(hf: dict[str, Any], where: str) -> None:
    """Fields that would change the computation in ways our model has no place for."""
    rope_type = _rope_parameters(hf).get("rope_type", "default")
    if hf.get("rope_scaling") is not None or rope_type != "default":
        scaling = hf.get("rope_scaling") or hf.get("rope_parameters")
        raise NotImportable(
            f"{where}: rope_scaling {json.dumps(scaling)}: this model has plain RoPE (rope_theta) only, no "
            "scaled RoPE (llama3, yarn, linear, dynamic)"
        )
    sliding = hf.get("use_sliding_window", hf.get("sliding_window") is not None)
    layer_types = set(hf.get("layer_types") or ["full_attention"])
    if sliding or layer_types != {"full_attention"}:
        raise NotImportable(
            f"{where}: sliding_window {hf.get('sliding_window')!r} (layer_types {sorted(layer_types)}): this "
            "model attends over the whole context, it has no sliding-window attention"
        )
    if hf.get("partial_rotary_factor", 1) != 1:
        raise NotImportable(
            f"{where}: partial_rotary_factor {hf['partial_rotary_factor']!r}: RoPE turns every channel here"
        )
    if (quantization := hf.get("quantization_config")) is not None:
        method = quantization.get("quant_method", "?") if isinstance(quantization, dict) else quantization
        raise NotImportable(f"{where}: quantization_config ({method}): quantized weights cannot be imported")


def _rope_parameters(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers' newer ``rope_parameters`` (rope_type, rope_theta), where a config.json has them."""
    rope = hf.get("rope_parameters")
    return rope if isinstance(rope, dict) else {}


def _json(path: Path, required: bool = False) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise NotImportable(f"{path.parent} has no {path.name}: not a Hugging Face model folder")
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise NotImportable(f"{path} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise NotImportable(f"{path} is not a JSON object")
    return data


def _tensors(folder: Path) -> tuple[list[Path], dict[str, Stored]]:
    """The weight files, and each tensor's file, dtype and shape (from the headers)."""
    if (folder / WEIGHTS_FILE).is_file():  # transformers reads the single file first too
        files = [folder / WEIGHTS_FILE]
        mapped: dict[str, Path] | None = None
    elif (folder / INDEX_FILE).is_file():
        weight_map = _json(folder / INDEX_FILE).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise NotImportable(f"{folder / INDEX_FILE} has no weight_map of tensor names to files")
        mapped = {name: folder / str(file) for name, file in weight_map.items()}
        files = sorted(set(mapped.values()))
        absent = [file.name for file in files if not file.is_file()]
        if absent:
            raise NotImportable(f"{folder / INDEX_FILE} names shards that are not there: {', '.join(absent)}")
    else:
        raise NotImportable(
            f"{folder} has no {WEIGHTS_FILE} or {INDEX_FILE}: only safetensors weights are read (not "
            "pytorch_model.bin)"
        )
    tensors = {}
    for file in files:
        try:
            with safe_open(file, framework="numpy") as opened:
                for name in opened.keys():  # noqa: SIM118 (a safe_open handle is no dict)
                    if mapped is None or mapped.get(name) == file:
                        header = opened.get_slice(name)
                        tensors[name] = Stored(file, header.get_dtype(), list(header.get_shape()))
        except Exception as e:  # safetensors raises its own error types for a damaged header
            raise NotImportable(f"{file} is not a safetensors file that can be read: {e}") from None
    if mapped is not None and (lost := sorted(mapped.keys() - tensors.keys())):
        raise NotImportable(f"{folder / INDEX_FILE} names tensors its shards lack: {_listed(lost)}")
    return files, tensors


def _check_tensors(tensors: dict[str, Stored], config: LlamaConfig, folder: Path) -> list[str]:
    """Every parameter there in its shape and a float dtype, no stray tensor; returns those ignored."""
    _, like = abstract_model(config)
    shapes = {name: leaf.shape for name, leaf in flatten(like).items()}
    expected = {}
    for ours, (theirs, transposed) in tensor_names(config).items():
        expected[theirs] = list(shapes[ours][::-1] if transposed else shapes[ours])
    missing = sorted(expected.keys() - tensors.keys())
    if missing:
        raise NotImportable(f"{folder}: the weights lack tensors the config's model has: {_listed(missing)}")
    tied_head = ["lm_head.weight"] if config.tie_embeddings else []  # tied: HF uses the embedding
    ignored = sorted(
        n for n in tensors.keys() - expected.keys() if n.endswith(NOT_PARAMETERS) or n in tied_head
    )
    unexpected = sorted(tensors.keys() - expected.keys() - set(ignored))
    if unexpected:
        raise NotImportable(
            f"{folder}: tensors this model has no place for (biases? another architecture?): "
            + _listed(unexpected)
        )
    for name, shape in expected.items():
        stored = tensors[name]
        if stored.dtype not in FLOAT_DTYPES:
            raise NotImportable(
                f"{stored.file}: {name} is stored as {stored.dtype}; only float32, bfloat16 and float16 "
                "weights can be imported"
            )
        if stored.shape != shape:
            raise NotImportable(
                f"{stored.file}: {name} has shape {stored.shape}, config.json's model needs {shape}"
            )
    return ignored


def _listed(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f", ... ({len(names)} in all)" if len(names) > shown else "")


def _tokenizer(text: str, file: Path, config: LlamaConfig) -> Tokenizer:
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as e:  # HF tokenizers raises a bare Exception for JSON it cannot read
        raise NotImportable(f"{file} is not a tokenizer.json that HF tokenizers can read: {e}") from None
    try:
        token_byte_lengths(tokenizer)
    except ValueError as e:
        raise NotImportable(
            f"{file} is not a byte-level BPE tokenizer ({e}): bits per byte need the bytes of every token"
        ) from None
    size = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1
    if size > config.vocab_size:
        raise NotImportable(
            f"{file} has token ids up to {size - 1}, config.json's vocab_size is only {config.vocab_size}"
        )
    return tokenizer


def _token(value: Any) -> str | None:
    """A special token as tokenizer_config.json names it: a string or an AddedToken's dict."""
    return value.get("content") if isinstance(value, dict) else value


def _ids(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


def special_tokens(
    tokenizer: Tokenizer,
    tokenizer_config: dict[str, Any],
    generation: dict[str, Any],
    hf: dict[str, Any],
    folder: Path,
) -> SpecialTokens:
    """The folder's special tokens: BOS and EOS as ``tokenizer_config.json`` names them (else the ids of
    ``generation_config.json`` or ``config.json``; BOS is EOS where none is named, as lm-eval prefixes such
    a model's texts), and as further stop tokens the other ids generation ends at (a list
    ``eos_token_id``: a chat model's end of turn)."""
    eos_ids = _ids(generation.get("eos_token_id")) or _ids(hf.get("eos_token_id"))
    bos_ids = _ids(generation.get("bos_token_id")) or _ids(hf.get("bos_token_id"))
    names = {}
    for token_id in [*eos_ids, *bos_ids]:
        name = tokenizer.id_to_token(token_id) if isinstance(token_id, int) else None
        if name is None:
            raise NotImportable(f"{folder}: special token id {token_id!r} is not a token of {TOKENIZER_FILE}")
        names[token_id] = name
    eos = _token(tokenizer_config.get("eos_token")) or (names[eos_ids[0]] if eos_ids else None)
    if eos is None:
        raise NotImportable(
            f"{folder}: no eos token named in {TOKENIZER_CONFIG_FILE}, {GENERATION_CONFIG_FILE} or "
            f"{CONFIG_FILE}"
        )
    bos = _token(tokenizer_config.get("bos_token")) or (names[bos_ids[0]] if bos_ids else eos)
    stop = tuple(dict.fromkeys(names[i] for i in eos_ids if names[i] != eos))
    specials = SpecialTokens(bos=bos, eos=eos, stop=stop)
    try:
        special_token_ids(tokenizer, specials)
    except ValueError as e:
        raise NotImportable(f"{folder / TOKENIZER_FILE}: {e}") from None
    return specials


def _chat_template(folder: Path, tokenizer_config: dict[str, Any]) -> str | None:
    """``chat_template.jinja`` (what transformers saves now), else ``tokenizer_config.json``'s template (a
    string, or a list of named ones: the ``default``)."""
    if (folder / HF_TEMPLATE_FILE).is_file():
        return (folder / HF_TEMPLATE_FILE).read_text()
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise NotImportable(f"{folder / TOKENIZER_CONFIG_FILE}: chat_template is not a Jinja string")
    return template


def load_params(model: HFModel) -> dict[str, np.ndarray]:
    """Our flat parameters from the folder's tensors, in float32 (bf16 and fp16 convert exactly); each
    file opened once."""
    by_file: dict[Path, list[tuple[str, str, bool]]] = {}
    for ours, (theirs, transposed) in tensor_names(model.config).items():
        by_file.setdefault(model.tensors[theirs].file, []).append((ours, theirs, transposed))
    params = {}
    for file, names in by_file.items():
        with safe_open(file, framework="numpy") as opened:
            for ours, theirs, transposed in names:
                array = opened.get_tensor(theirs).astype(np.float32)
                params[ours] = np.ascontiguousarray(array.T if transposed else array)
    return params


def import_hf(model: HFModel, out: str | os.PathLike[str]) -> dict[str, Any]:
    """Write ``model`` (``read_hf_folder``'s) as a run folder into ``out``, a new folder; returns the
    summary that ``train.json`` records."""
    out = Path(out)
    config = model.config
    files = {str(path.relative_to(model.folder)): file_sha256(str(path)) for path in model.sources}
    record: dict[str, Any] = {
        "from": str(model.folder),
        "architecture": model.architecture,
        "files_sha256": files,
        "dtype": "float32" if model.dtypes == ("float32",) else f"{', '.join(model.dtypes)} -> float32",
        "special_tokens": model.specials.model_dump(),
        "chat_template": model.chat_template is not None,
    }
    if model.ignored:
        record["ignored_tensors"] = list(model.ignored)
    _, like = abstract_model(config)
    params = unflatten(like, load_params(model))
    out.mkdir(parents=True, exist_ok=True)
    with Checkpoints(out / CHECKPOINTS_DIR, keep_last=1) as checkpoints:
        # the trainer's count of updates applied (none): a training state item that is not empty
        state = {"params": params, "applied": np.zeros((), np.int32)}
        checkpoints.save(IMPORTED_STEP, state, {"model": config.model_dump(), IMPORTED: record})
    summary = {
        "steps": IMPORTED_STEP,
        "tokens_seen": 0,
        "params": config.num_params(),
        "active_params": config.num_params(active=True),
        "non_embedding_params": config.num_params(include_embeddings=False),
        IMPORTED: record,
    }
    (out / MODEL_FILE).write_text(json.dumps(config.model_dump(), indent=2))
    (out / TRAIN_FILE).write_text(json.dumps({"summary": summary}, indent=2))
    (out / TOKENIZER_FILE).write_text(model.tokenizer)
    if model.chat_template is not None:
        (out / CHAT_TEMPLATE_FILE).write_text(model.chat_template)
    save_special_tokens(out, model.specials)
    identity = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    (out / INPUTS_FILE).write_text(json.dumps({"hf_model": given(identity, str(model.folder))}, indent=2))
    return summary
