"""Downstream of a crawl where everything was removed (issue 16.6): tokenizer training, tokenization and
training fail with an error saying there is no text, naming the upstream step that removed it and why
(from its funnel), before any library is handed nothing; and bad text files are errors naming the file."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from bad_warcs import pages, prose, write_warc
from dagster import DagsterEventType, DagsterInstance

from marin_pipelines.cli import main
from marin_pipelines.cli.local_runs import root_cause
from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    crawl_and_text,
    quality_and_curation,
    tokenizer_and_cache,
    train,
)
from marin_pipelines.stages.crawl import NoDocuments
from marin_pipelines.steps import InputError
from marin_pipelines.tokenize.tokenizer import NoText, TokenizerConfig, train_tokenizer

QUALITY = {"bucket": 10_000, "epoch": 5}


@pytest.mark.parametrize("texts", [[], ["", ""]], ids=["no_documents", "empty_documents"])
def test_a_tokenizer_is_not_trained_on_nothing(texts):
    with pytest.raises(
        NoText, match=r"no text to train the tokenizer on \(\d documents, all empty or none\)"
    ):
        train_tokenizer(iter(texts), TokenizerConfig(vocab_size=300))


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    train_tokenizer([prose(i) for i in range(50)], TokenizerConfig(vocab_size=300)).save(str(path))
    return str(path)


def write_inputs(folder, kind: str):
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "empty_jsonl":
        (folder / "a.jsonl").write_text("")
    elif kind == "empty_parquet":
        pq.write_table(pa.table({"text": pa.array([], pa.string())}), folder / "documents-0.parquet")
    elif kind == "not_utf8":
        (folder / "latin.txt").write_bytes("café".encode("latin-1"))
    elif kind == "not_json":
        (folder / "b.jsonl").write_text('{"text": "fine"}\nnot json\n')
    elif kind == "not_an_object":
        (folder / "b.jsonl").write_text("[1, 2]\n")
    elif kind == "not_parquet":
        (folder / "c.parquet").write_bytes(b"PAR1 not really")
    return str(folder)


@pytest.mark.parametrize(
    ("kind", "tokenizer", "said"),
    [
        ("empty_jsonl", False, "--input {input}: no text to train the tokenizer on (0 documents"),
        ("empty_parquet", True, "no documents to tokenize in {input} (text files read: 1)"),
        ("not_utf8", False, "latin.txt: not UTF-8 text (unexpected end of data at byte 3)"),
        ("not_json", True, "b.jsonl: a line that is not JSON (Expecting value: 'not json\\n')"),
        ("not_an_object", True, "b.jsonl: a line is list, not a JSON object"),
        ("not_parquet", False, "c.parquet: not a readable parquet file (Parquet magic bytes not found"),
    ],
)
def test_tokenize_command_says_what_is_wrong_with_its_input(
    tmp_path, capsys, tokenizer_file, kind, tokenizer, said
):
    source = write_inputs(tmp_path / "in put ü", kind)
    how = ["--tokenizer", tokenizer_file] if tokenizer else ["--vocab-size", "300"]
    assert main(["tokenize", "--input", source, "--out", str(tmp_path / "out"), *how, "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert said.format(input=source) in err and "Traceback" not in err


def test_tokenize_command_says_a_tokenizer_file_is_unreadable(tmp_path, capsys):
    (tmp_path / "doc.txt").write_text("text")
    (tmp_path / "tokenizer.json").write_text('{"model": ')
    args = ["tokenize", "--input", str(tmp_path / "doc.txt"), "--out", str(tmp_path / "o")]
    assert main([*args, "--tokenizer", str(tmp_path / "tokenizer.json")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'tokenizer.json'} is not a tokenizer.json that HF tokenizers can read" in err
    assert "Traceback" not in err


def test_tokenize_and_train_commands_with_unicode_paths_and_too_little_text(tmp_path, capsys):
    """A cache into a folder with unicode and spaces; then a run whose sequence is longer than the text."""
    source = tmp_path / "tëxt dir" / "dóc one.jsonl"
    source.parent.mkdir()
    source.write_text(json.dumps({"id": "a", "text": "Grüße, a short text."}) + "\n")
    cache = tmp_path / "tök out" / "cäche ü"
    assert main(["tokenize", "--input", str(source), "--out", str(cache), "--vocab-size", "300"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["documents"] == 1
    config = tmp_path / "rün.yaml"
    config.write_text(
        yaml.safe_dump({"model": {"size": "nano", "seq_len": 64}, "train": {"warmup_steps": 1}})
    )
    args = [
        "train",
        "--config",
        str(config),
        "--data",
        str(cache),
        "--out",
        str(tmp_path / "rün ö" / "out 1"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"data source 'main' (token cache {cache}), train split: too few tokens for one sequence" in err
    assert "need seq_len + 1 = 65; lower the model's seq_len or give it more text" in err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def crawl_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("crawl") / "snap-1"
    write_warc(root / "pages.warc.gz", pages(6))
    return str(root)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return str(tmp_path_factory.mktemp("store"))


def failure_of(steps, store) -> tuple[BaseException, int]:
    """Why materialising ``steps`` failed, and how many times Dagster retried a step before it did."""
    instance = DagsterInstance.ephemeral()
    with pytest.raises(Exception) as failure:
        materialize_experiment(Experiment("empty", steps=steps), store, instance)
    retries = [
        event
        for run in instance.get_runs()
        for event in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)
    ]
    return root_cause(failure.value), len(retries)


def test_tokenizer_and_cache_after_a_curation_that_kept_nothing(crawl_root, store):
    text = crawl_and_text("empty", warc_root=crawl_root)
    nothing = quality_and_curation(
        "empty", text.deduplicated_text, quality=QUALITY, curation={"threshold": 1.0}
    )
    tokens = tokenizer_and_cache("empty", nothing.curated_text, tokenizer={"vocab_size": 300})
    cause, _ = failure_of([tokens.cache], store)
    assert isinstance(cause, NoDocuments)
    assert str(cause).startswith("empty/tokenizer has no documents to train a tokenizer on: ")
    assert "empty/curated_text removed all" in str(cause) and "(low_quality: " in str(cause)

    # a tokenizer made elsewhere: the cache step says the same
    kept = quality_and_curation(
        "kept", text.deduplicated_text, quality=QUALITY, curation={"top_fraction": 1.0}
    )
    shared = tokenizer_and_cache("kept", kept.curated_text, tokenizer={"vocab_size": 300}).tokenizer
    cache = tokenizer_and_cache("empty_cache", nothing.curated_text, tokenizer=shared).cache
    cause, _ = failure_of([cache], store)
    assert isinstance(cause, NoDocuments)
    assert str(cause).startswith(
        "empty_cache/tokenized_cache has no documents to tokenize: empty/curated_text"
    )


def test_training_on_too_little_text_fails_before_launching_and_without_retries(
    crawl_root, store, monkeypatch
):
    monkeypatch.setenv("MARIN_RETRY_DELAY_SECONDS", "0.1")  # were it retried, quickly
    text = crawl_and_text("empty", warc_root=crawl_root)
    kept = quality_and_curation(
        "kept", text.deduplicated_text, quality=QUALITY, curation={"top_fraction": 1.0}
    )
    tokens = tokenizer_and_cache("kept", kept.curated_text, tokenizer={"vocab_size": 300})
    run = train("kept/run", tokens, model={"size": "nano", "seq_len": 100_000}, train={"warmup_steps": 1})
    cause, retries = failure_of([run], store)
    assert isinstance(cause, InputError) and retries == 0
    assert "data_mixture source 'main': the train split of " in str(cause)
    assert "fewer than one sequence of seq_len + 1 = 100001" in str(cause)

    other = train(
        "kept/mixed",
        tokens,
        model={"size": "nano", "seq_len": 16},
        train={"warmup_steps": 1},
        data_mixture={"sources": {"main": {"weight": 1}, "extra": {"cache": "/no/such/cache", "weight": 1}}},
    )
    cause, retries = failure_of([other], store)
    assert isinstance(cause, InputError) and retries == 0
    assert str(cause) == "data_mixture.sources.extra.cache: not a token cache (no cache.json): /no/such/cache"


def test_gzip_text_is_not_a_text_file(tmp_path, capsys):
    """A gzipped .txt is not UTF-8: an error naming it, not a decode traceback."""
    (tmp_path / "doc.txt").write_bytes(gzip.compress(b"hello"))
    assert (
        main(["tokenize", "--input", str(tmp_path), "--out", str(tmp_path / "o"), "--vocab-size", "300"]) == 2
    )
    err = capsys.readouterr().err
    assert "doc.txt: not UTF-8 text" in err and "Traceback" not in err


def test_training_into_a_folder_with_unicode_and_spaces(tmp_path, capsys):
    """The same commands on enough text: the cache, the checkpoints and the metrics land in such folders."""
    source = tmp_path / "tëxt dir" / "döcs.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps({"id": str(i), "text": prose(i)}) + "\n" for i in range(40)))
    cache = tmp_path / "tök out" / "cäche ü"
    assert main(["tokenize", "--input", str(source), "--out", str(cache), "--vocab-size", "300"]) == 0
    config = tmp_path / "rün.yaml"
    run = {
        "model": {"size": "nano", "seq_len": 16},
        "train": {"steps": 2, "batch_size": 2, "warmup_steps": 1},
    }
    run["train"].update(checkpoint_every=1, peak_flops=1e10)
    config.write_text(yaml.safe_dump(run))
    out = tmp_path / "rün ö" / "out 1"
    assert main(["train", "--config", str(config), "--data", str(cache), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["checkpoint-info", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 2
