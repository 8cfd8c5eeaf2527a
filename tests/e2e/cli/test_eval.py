import json
import shutil

import fsspec
import numpy as np
import pytest
from upath import UPath

from marin_pipelines.cli import main
from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS_DIR
from marin_pipelines.store import ArtifactStore
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, build_cache
from marin_pipelines.tokenize.tokenizer import (
    TOKENIZER_FILE,
    TokenizerConfig,
    load_tokenizer,
    train_tokenizer,
)
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import train

TEXTS = [line for f in sorted(SHIPPED_TASKS_DIR.glob("*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A training directory with its tokenizer.json beside the checkpoints, trained for a few steps."""
    directory = tmp_path_factory.mktemp("run")
    tokenizer = train_tokenizer(TEXTS * 2, TokenizerConfig(vocab_size=300))
    tokenizer.save(str(directory / TOKENIZER_FILE))
    model = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        seq_len=32,
        d_model=32,
        n_layers=1,
        n_heads=2,
        n_kv_heads=1,
        d_ff=64,
    )
    stream = np.asarray(tokenizer.encode(" ".join(TEXTS)).ids, np.int32)
    config = TrainConfig(steps=4, batch_size=4, warmup_steps=1)
    train(
        model,
        config,
        lambda step: np.stack([stream[i * 33 : i * 33 + 33] for i in range(4)]),
        directory,
        False,
    )
    return directory


def user_task(folder):
    """A task of the user's, in its own folder, with its data file named relative to the YAML."""
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "colours.jsonl").write_text(
        '{"q": "The colour of the sky is", "a": " blue"}\n{"q": "Grass is", "a": " green"}\n'
    )
    (folder / "colours.yaml").write_text(
        "task: my_colours\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: data/colours.jsonl\n"
        "output_type: loglikelihood\ntest_split: test\ndoc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n"
        "target_delimiter: ''\nmetric_list:\n  - metric: acc\n"
    )


def test_eval_writes_lm_eval_json_with_a_bpb_section(checkpoint, tmp_path, monkeypatch, capsys):
    user_task(tmp_path / "my_tasks")
    text = tmp_path / "notes.txt"
    text.write_text("Lists hold items in order; dictionaries map keys to values.")
    monkeypatch.chdir(tmp_path / "my_tasks" / "data")  # relative data_files resolve against the YAML
    out = tmp_path / "results" / "eval.json"
    docs = SHIPPED_TASKS_DIR / "text.jsonl"
    rc = main(
        ["eval", "--checkpoint", str(checkpoint), "--tasks", "marin_python_mc,my_colours",
         "--include-path", str(tmp_path / "my_tasks"), "--bpb", str(text), str(docs), "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    results = json.loads(out.read_text())
    assert 0 <= results["results"]["marin_python_mc"]["acc,none"] <= 1
    assert results["n-samples"]["marin_python_mc"]["effective"] == 16
    assert results["n-samples"]["my_colours"]["effective"] == 2
    assert set(results["bpb"]) == {"notes.txt", "text.jsonl", "overall"}
    notes, docs, overall = (results["bpb"][k] for k in ("notes.txt", "text.jsonl", "overall"))
    assert notes["bytes"] == len(text.read_bytes()) and notes["bits_per_byte"] > 0
    assert overall["tokens"] == notes["tokens"] + docs["tokens"]
    total_bits = notes["bits_per_byte"] * notes["bytes"] + docs["bits_per_byte"] * docs["bytes"]
    assert overall["bits_per_byte"] == pytest.approx(total_bits / (notes["bytes"] + docs["bytes"]))
    assert "| marin_python_mc/acc |" in capsys.readouterr().out


def test_eval_errors_name_the_problem(checkpoint, tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "model.json").write_text((checkpoint / "model.json").read_text())
    assert (
        main(["eval", "--checkpoint", str(bare), "--bpb", str(bare), "--out", str(tmp_path / "x.json")]) == 2
    )
    assert "pass --tokenizer" in capsys.readouterr().err
    args = [
        "eval",
        "--checkpoint",
        str(checkpoint),
        "--tasks",
        "no_such_task",
        "--out",
        str(tmp_path / "x.json"),
    ]
    assert main(args) == 2
    assert "unknown lm-eval tasks ['no_such_task']" in capsys.readouterr().err


def test_bpb_on_a_cache_of_another_tokenizer_is_refused_naming_both(checkpoint, tmp_path, capsys):
    """Another tokenizer of the same vocabulary size: every id is in range, the number is meaningless."""
    other = train_tokenizer([line[::-1] for line in TEXTS] * 2, TokenizerConfig(vocab_size=300))
    assert other.get_vocab_size() == load_tokenizer(checkpoint / TOKENIZER_FILE).get_vocab_size()
    cache = tmp_path / "cache"
    cache.mkdir()
    docs = [str(SHIPPED_TASKS_DIR / "text.jsonl")]
    build_cache(docs, other, cache, CacheConfig(validation_fraction=0.5), tmp_path / "work")
    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(checkpoint), "--bpb", str(cache), "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "made with another tokenizer" in error
    assert f"{cache}/{TOKENIZER_FILE}" in error and f"({checkpoint}/{TOKENIZER_FILE}, hash " in error
    assert not out.exists()
    given = tmp_path / "given.json"  # a --tokenizer is named as given
    given.write_bytes((checkpoint / TOKENIZER_FILE).read_bytes())
    args = ["eval", "--checkpoint", str(checkpoint), "--tokenizer", str(given), "--bpb", str(cache)]
    assert main([*args, "--out", str(out)]) == 2
    assert f"({given}, hash " in capsys.readouterr().err and not out.exists()


def test_named_bpb_sets_join_their_files(checkpoint, tmp_path, capsys):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("Tuples are immutable sequences.")
    second.write_text("Strings are sequences of characters.")
    out = tmp_path / "eval.json"
    args = ["eval", "--checkpoint", str(checkpoint), "--out", str(out), "--bpb"]
    assert main([*args, f"both={first},{second}", str(second)]) == 0
    bpb = json.loads(out.read_text())["bpb"]
    assert set(bpb) == {"both", "b.txt", "overall"}
    assert bpb["both"]["bytes"] == bpb["b.txt"]["bytes"] + len(first.read_bytes())
    assert main([*args, f"b.txt={first}", str(second)]) == 2
    assert "distinct names" in capsys.readouterr().err


def test_eval_reads_its_inputs_from_a_bucket_and_writes_there(checkpoint, gcs_root, tmp_path, monkeypatch):
    """As a pod evaluates a store on gs://: checkpoint, tokenizer, a token cache (an artifact, read from its
    local copy) and the results are URLs; the numbers are those of the same files on local disk."""
    fs, root = fsspec.core.url_to_fs(gcs_root)
    for file in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
        fs.put_file(str(file), f"{root}/run/{file.relative_to(checkpoint).as_posix()}")
    cache = tmp_path / "cache"
    cache.mkdir()
    tokenizer = load_tokenizer(checkpoint / TOKENIZER_FILE)
    docs = [str(SHIPPED_TASKS_DIR / "text.jsonl")]
    build_cache(docs, tokenizer, cache, CacheConfig(validation_fraction=0.5), tmp_path / "work")
    store = ArtifactStore(gcs_root)
    with store.write(["tokenized_cache"], "v1") as pending:
        shutil.copytree(cache, pending.path, dirs_exist_ok=True)
    monkeypatch.setenv("MARIN_CACHE_DIR", str(tmp_path / "copies"))

    local = tmp_path / "local.json"
    assert main(["eval", "--checkpoint", str(checkpoint), "--bpb", f"held={cache}", "--out", str(local)]) == 0
    args = ["eval", "--checkpoint", f"{gcs_root}/run", "--tokenizer", f"{gcs_root}/run/{TOKENIZER_FILE}"]
    args += ["--bpb", f"held={store.url(['tokenized_cache'], 'v1')}", "--out", f"{gcs_root}/eval.json"]
    assert main(args) == 0
    remote = json.loads(UPath(f"{gcs_root}/eval.json").read_text())
    assert remote["bpb"] == json.loads(local.read_text())["bpb"] and remote["bpb"]["held"]["tokens"] > 0
    assert (tmp_path / "copies" / "store").is_dir()  # the cache was read from its local copy


def test_chat_sets_give_the_loss_per_assistant_token(checkpoint, tmp_path, capsys):
    chat = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in [
            ("A list?", "Ordered."),
            ("A dict?", "Keys to values."),
        ]  # short: the model's seq_len is 32
    ]
    held = tmp_path / "held.jsonl"
    held.write_text("\n".join(map(json.dumps, chat)) + "\n{broken\n")
    template = tmp_path / "terse.jinja"  # no role headers: conversations fit the model's 32 tokens
    template.write_text("{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}")
    out = tmp_path / "eval.json"
    args = [
        "eval",
        "--checkpoint",
        str(checkpoint),
        "--chat",
        f"held={held}",
        "--chat-template",
        str(template),
    ]
    assert main([*args, "--out", str(out)]) == 0
    result = json.loads(out.read_text())["chat"]["held"]
    assert result["conversations"] == 2 and result["skipped"] == {"not_json": 1} and result["truncated"] == 0
    assert 0 < result["assistant_tokens"] < result["tokens"] and 0 < result["loss"] < 20
    assert "| chat/held |" in capsys.readouterr().out
