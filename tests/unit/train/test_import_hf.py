"""Hugging Face import: real HF folders (numpy + safetensors, tests/unit/train/hf_folders.py) become runs
whose logits an independent numpy forward pass over the HF tensors reproduces, that every command takes, and
that export-hf turns back into the same tensors; what the model cannot take is refused in one line, with
nothing written."""

import json
import os

import numpy as np
import pytest
from hf_folders import LLAMA_TEMPLATE, hf_tokenizer, write_hf_folder
from safetensors.numpy import load_file
from test_checkpoint import TRAIN
from test_export import hf_forward, short_run

from marin_pipelines.cli import main
from marin_pipelines.tokenize.tokenizer import SpecialTokens, TokenizerConfig, train_tokenizer
from marin_pipelines.train.checkpoint import flatten, load_checkpoint, load_params, params_sha256
from marin_pipelines.train.export import export_hf
from marin_pipelines.train.import_hf import import_hf, read_hf_folder
from marin_pipelines.train.run_inputs import OtherInputs, check_inputs, given
from marin_pipelines.train.trained_run import load_run
from marin_pipelines.train.trainer import train

LLAMA = SpecialTokens(bos="<|begin_of_text|>", eos="<|eot_id|>", stop=("<|end_of_text|>",))
TOKENS = np.array([[5, 17, 3, 250, 42, 8, 99, 1, 60, 7, 200, 13], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]])


def imported(hf, out, capsys=None):
    """``hf`` imported by the command into ``out``; its printed summary."""
    assert main(["import-hf", str(hf), "--out", str(out)]) == 0
    return json.loads(capsys.readouterr().out) if capsys else None


@pytest.mark.parametrize(
    ("qwen", "tie", "shards", "template_file"),
    [(False, False, 2, False), (True, True, 1, True)],
    ids=["llama-gqa-sharded", "qwen3-tied"],
)
def test_imported_logits_match_a_numpy_forward_pass_over_the_hf_tensors(
    qwen, tie, shards, template_file, tmp_path, capsys
):
    config, weights = write_hf_folder(
        tmp_path / "hf", qwen=qwen, tie=tie, shards=shards, template_file=template_file
    )
    summary = imported(tmp_path / "hf", tmp_path / "run", capsys)
    assert summary["steps"] == 0 and summary["imported"]["from"] == str(tmp_path / "hf")
    assert summary["imported"]["architecture"] == config["architectures"][0]
    shard_names = sorted(p.name for p in (tmp_path / "hf").glob("*.safetensors"))
    assert len(shard_names) == shards and set(shard_names) <= set(summary["imported"]["files_sha256"])
    model, ours = load_checkpoint(tmp_path / "run")
    assert (ours.n_kv_heads, ours.qk_norm, ours.tie_embeddings) == (2, qwen, tie)
    assert (ours.rope_theta, ours.norm_eps, ours.seq_len) == (500000.0, 1e-6, 64)
    expected = np.asarray(model(TOKENS))
    for row in range(len(TOKENS)):
        np.testing.assert_allclose(
            hf_forward(weights, config, TOKENS[row]), expected[row], atol=2e-4, rtol=1e-4
        )
    assert (tmp_path / "run" / "chat_template.jinja").read_text() == read_hf_folder(
        tmp_path / "hf"
    ).chat_template


def test_bf16_weights_become_the_same_values_in_float32_and_the_record_says_so(tmp_path, capsys):
    _, weights = write_hf_folder(tmp_path / "hf", bf16=True)
    summary = imported(tmp_path / "hf", tmp_path / "run", capsys)
    assert summary["imported"]["dtype"] == "bfloat16 -> float32"
    _, params, _, _ = load_params(tmp_path / "run")
    flat = flatten(params)
    assert flat["embed.embedding"].dtype == np.float32
    np.testing.assert_array_equal(flat["embed.embedding"], weights["model.embed_tokens.weight"])
    np.testing.assert_array_equal(
        flat["blocks.1.attn.wk.kernel"], weights["model.layers.1.self_attn.k_proj.weight"].T
    )


def trained_run(out, **model):
    """A run of two steps with a tokenizer of its own (what export-hf ships and import-hf needs)."""
    short_run(out, vocab_size=300, **model)
    train_tokenizer(["what a run says"] * 20, TokenizerConfig(vocab_size=300)).save(
        str(out / "tokenizer.json")
    )
    return out


@pytest.mark.parametrize(("tie", "qk_norm"), [(False, False), (True, True)], ids=["llama", "qwen3-tied"])
def test_export_then_import_gives_back_the_same_parameters_bit_for_bit(tie, qk_norm, tmp_path, capsys):
    run = trained_run(tmp_path / "run", tie_embeddings=tie, qk_norm=qk_norm)
    export_hf(run, tmp_path / "hf")
    imported(tmp_path / "hf", tmp_path / "back")
    _, before, config, _ = load_params(run)
    _, after, config_after, step = load_params(tmp_path / "back")
    assert config_after == config and step == 0
    assert params_sha256(after) == params_sha256(before)
    for name, leaf in flatten(before).items():
        np.testing.assert_array_equal(np.asarray(flatten(after)[name]), np.asarray(leaf))
    assert not (tmp_path / "back" / "special_tokens.json").exists()  # the defaults: no file
    export_hf(tmp_path / "back", tmp_path / "hf2")
    first, second = (
        load_file(tmp_path / "hf" / "model.safetensors"),
        load_file(tmp_path / "hf2" / "model.safetensors"),
    )
    assert first.keys() == second.keys()
    for name in first:
        np.testing.assert_array_equal(second[name], first[name])


@pytest.mark.parametrize("qwen", [False, True], ids=["llama-gqa-sharded", "qwen3-tied"])
def test_import_then_export_gives_back_the_same_tensors_and_special_tokens(qwen, tmp_path, capsys):
    _, weights = write_hf_folder(tmp_path / "hf", qwen=qwen, tie=qwen, shards=1 if qwen else 3)
    imported(tmp_path / "hf", tmp_path / "run")
    assert main(["export-hf", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    exported = load_file(tmp_path / "out" / "model.safetensors")
    assert exported.keys() == weights.keys()
    for name, tensor in weights.items():
        np.testing.assert_array_equal(exported[name], tensor)
    given = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    again = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert sorted(again["eos_token_id"]) == sorted(given["eos_token_id"])
    assert read_hf_folder(tmp_path / "out").specials == read_hf_folder(tmp_path / "hf").specials
    tokenizer_config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == ("<|im_end|>" if qwen else "<|eot_id|>")


def test_an_imported_run_is_a_run_for_eval_sft_checkpoint_info_and_warm_start(tmp_path, capsys):
    """Each command on the imported Llama, with its own special tokens: bits per byte of text laid out
    <|begin_of_text|> ... <|eot_id|>, chat loss through its template, SFT keeping its tokens, a warm start
    whose optimiser is fresh (an import has none)."""
    write_hf_folder(tmp_path / "hf", shards=2)
    imported(tmp_path / "hf", tmp_path / "run")
    run = tmp_path / "run"
    capsys.readouterr()

    assert main(["checkpoint-info", str(run)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["step"] == 0 and info["checkpoints"] == [0]
    assert info["sha256"] == params_sha256(load_params(run)[1])
    # each count says its base: the totals hold the embeddings, the non-embedding count does not
    assert info["non_embedding_params"] < info["params"] == info["active_params"]
    assert "params and active_params: total with embeddings" in info["params_counted"]
    assert "non_embedding_params: non-embedding" in info["params_counted"]

    # generation begins a text with <|begin_of_text|> and stops at <|eot_id|> or <|end_of_text|>
    assert main(["generate", str(run), "--prompt", "The quick", "--max-new-tokens", "5", "--chat"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["finish_reason"] in ("stop", "length") and len(said["tokens"]) <= 5
    loaded = load_run(run)
    assert loaded.encode("x")[0] == loaded.tokenizer.token_to_id(LLAMA.bos)
    stops = {loaded.tokenizer.token_to_id(t) for t in (LLAMA.eos, *LLAMA.stop)}
    assert set(loaded.ids.stop) == stops and not stops & set(said["tokens"])

    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog.\n")
    chats = tmp_path / "chats.jsonl"
    conversation = {
        "messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]
    }
    chats.write_text(json.dumps(conversation) + "\n")
    results = tmp_path / "results.json"
    argv = ["eval", "--checkpoint", str(run), "--bpb", str(text), "--chat", str(chats), "--out", str(results)]
    assert main(argv) == 0
    scored = json.loads(results.read_text())
    assert scored["bpb"]["text.txt"]["bits_per_byte"] > 0 and scored["chat"]["chats.jsonl"]["loss"] > 0

    (tmp_path / "sft.yaml").write_text("train: {steps: 2, warmup_steps: 1, batch_size: 2}\n")
    (tmp_path / "llama.jinja").write_text(LLAMA_TEMPLATE)
    argv = ["sft", "--base", str(run), "--data", str(chats), "--out", str(tmp_path / "sft")]
    assert (
        main(
            [*argv, "--config", str(tmp_path / "sft.yaml"), "--chat-template", str(tmp_path / "llama.jinja")]
        )
        == 0
    )
    assert SpecialTokens.model_validate_json((tmp_path / "sft" / "special_tokens.json").read_text()) == LLAMA
    assert json.loads((tmp_path / "sft" / "train.json").read_text())["summary"]["warm_start"]["dir"] == str(
        run
    )

    _, config = load_checkpoint(run)
    summary = train(
        config,
        TRAIN.model_copy(update={"steps": 1, "warmup_steps": 0, "batch_size": 2}),
        lambda step: np.tile(np.arange(config.seq_len + 1) % 7, (2, 1)),
        tmp_path / "warm",
        progress=False,
        warm_start=run,
        warm_start_optimizer=True,  # what `train --warm-start` asks by default
    )
    with pytest.raises(OtherInputs, match="hf_model: made from"):  # train or sft into it: refused
        check_inputs(str(run), {"data": given("cache", "cache")}, record=True)
    record = summary["warm_start"]
    assert record["optimizer"] == "fresh: the base was imported, it has no optimiser state"
    assert (
        not record["new"]
        and not record["dropped"]
        and len(record["loaded"]) == len(flatten(load_params(run)[1]))
    )


def test_consumers_use_the_runs_special_tokens(tmp_path):
    """bpb text, lm-eval's prefix and stops, and the chat template read the imported run's tokens."""
    from tokenizers import Tokenizer

    from marin_pipelines.evals.eval_results import text_tokens
    from marin_pipelines.evals.lm_eval_adapter import JaxLM
    from marin_pipelines.tokenize.chat_data import ChatTemplate
    from marin_pipelines.tokenize.tokenizer import special_token_ids

    tokenizer = Tokenizer.from_str(hf_tokenizer(("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>")))
    ids = special_token_ids(tokenizer, LLAMA)
    assert ids.stop == (ids.eos, tokenizer.token_to_id("<|end_of_text|>"))
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"text": "one"}\n{"text": "two"}\n')
    stream = text_tokens([str(docs)], tokenizer, LLAMA).tolist()
    one, two = (tokenizer.encode(t, add_special_tokens=False).ids for t in ("one", "two"))
    assert stream == [ids.bos, *one, ids.eos, ids.bos, *two, ids.eos]

    write_hf_folder(tmp_path / "hf")
    imported(tmp_path / "hf", tmp_path / "run")
    model, _ = load_checkpoint(tmp_path / "run")
    chat = ChatTemplate(tokenizer, LLAMA_TEMPLATE, LLAMA)
    rendered = chat.render([{"role": "user", "content": "Hi?"}], add_generation_prompt=True)
    assert rendered.startswith("<|begin_of_text|><|start_header_id|>user")
    lm = JaxLM(model, tokenizer, chat=chat, specials=LLAMA)
    rendered_ids = chat.tokenizer.encode(rendered, add_special_tokens=False).ids
    assert lm.prompt_ids(rendered) == rendered_ids and rendered_ids[0] == ids.bos  # the template's own BOS
    assert JaxLM(model, tokenizer, specials=LLAMA)._context_and_continuation("one", " two")[0][0] == ids.bos
    assert lm.stop_ids == {ids.eos, tokenizer.token_to_id("<|end_of_text|>")}
    with pytest.raises(ValueError, match="other special tokens"):
        JaxLM(model, tokenizer, chat=ChatTemplate(tokenizer, LLAMA_TEMPLATE), specials=LLAMA)


def _bias(name):
    return {name: np.zeros(32, np.float32)}


REFUSED = {
    "mistral": (
        {"config_updates": {"architectures": ["MistralForCausalLM"]}},
        "architectures ['MistralForCausalLM']",
    ),
    "rope-scaling": (
        {"config_updates": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}},
        'rope_scaling {"rope_type": "llama3", "factor": 8.0}',
    ),
    "attention-bias": ({"config_updates": {"attention_bias": True}}, "attention_bias is True"),
    "mlp-bias": ({"config_updates": {"mlp_bias": True}}, "mlp_bias is True"),
    "sliding-window": (
        {"qwen": True, "config_updates": {"sliding_window": 16, "use_sliding_window": True}},
        "sliding_window 16",
    ),
    "gelu": ({"config_updates": {"hidden_act": "gelu"}}, "hidden_act is 'gelu'"),
    "head-dim": ({"config_updates": {"head_dim": 16}}, "head_dim is 16"),
    "missing-tensor": (
        {"weights_updates": {"model.layers.1.mlp.up_proj.weight": None}},
        "lack tensors the config's model has: model.layers.1.mlp.up_proj.weight",
    ),
    "wrong-shape": (
        {"weights_updates": {"model.layers.0.self_attn.k_proj.weight": np.zeros((32, 32), np.float32)}},
        "model.layers.0.self_attn.k_proj.weight has shape [32, 32], config.json's model needs [16, 32]",
    ),
    "bias-tensor": (
        {"weights_updates": _bias("model.layers.0.self_attn.o_proj.bias")},
        "no place for (biases? another architecture?): model.layers.0.self_attn.o_proj.bias",
    ),
    "int8": (
        {"weights_updates": {"model.norm.weight": np.ones(32, np.int8)}},
        "model.norm.weight is stored as I8",
    ),
    "quantized": (
        {"config_updates": {"quantization_config": {"quant_method": "gptq"}}},
        "quantization_config (gptq)",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_the_model_cannot_take_is_one_line_naming_it_and_nothing_is_written(case, tmp_path, capsys):
    changes, named = REFUSED[case]
    write_hf_folder(tmp_path / "hf", **changes)
    before = sorted(os.listdir(tmp_path))
    assert main(["import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert named in error and error.count("\n") == 1, error
    assert sorted(os.listdir(tmp_path)) == before


def test_tokenizers_and_folders_it_cannot_take_are_refused_with_nothing_written(tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers

    hf = tmp_path / "hf"
    write_hf_folder(hf)

    def refused(out="run"):
        before = sorted(os.listdir(tmp_path))
        assert main(["import-hf", str(hf), "--out", str(tmp_path / out)]) == 2
        assert sorted(os.listdir(tmp_path)) == before
        error = capsys.readouterr().err
        assert error.count("\n") == 1, error
        return error

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert f"--out {tmp_path / 'full'} already exists and is no empty folder" in refused("full")
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"

    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "eos_token_id": 999}))
    (hf / "generation_config.json").unlink()
    tokenizer_config = json.loads((hf / "tokenizer_config.json").read_text())
    (hf / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "eos_token": None}))
    assert "special token id 999 is not a token of tokenizer.json" in refused()

    metaspace = Tokenizer(models.WordLevel({"▁the": 0, "<s>": 1, "</s>": 2}, unk_token="<s>"))
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace()
    (hf / "tokenizer.json").write_text(metaspace.to_str())
    assert "is not a byte-level BPE tokenizer" in refused()
    (hf / "tokenizer.json").unlink()
    assert "has no tokenizer.json" in refused()
    (hf / "model.safetensors").rename(hf / "weights.bin")
    assert "has no model.safetensors or model.safetensors.index.json" in refused()


def test_an_empty_out_folder_is_taken_and_the_library_reads_before_it_writes(tmp_path, capsys):
    write_hf_folder(tmp_path / "hf")
    (tmp_path / "empty").mkdir()
    imported(tmp_path / "hf", tmp_path / "empty")
    assert (tmp_path / "empty" / "model.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no work folder, no lease left
    model = read_hf_folder(tmp_path / "hf")
    summary = import_hf(model, tmp_path / "direct")
    assert (
        summary["imported"]["files_sha256"] == json.loads(capsys.readouterr().out)["imported"]["files_sha256"]
    )
