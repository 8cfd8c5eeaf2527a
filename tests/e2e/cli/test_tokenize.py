"""`marin-pipelines tokenize`: text files of each kind into a cache, a JSON summary, clear errors."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from marin_pipelines.cli import main
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.tokenize.tokenizer import load_tokenizer

TEXTS = [f"document {i}: the river runs past the old mill, Grüße 😀 {'abc ' * i}" for i in range(60)]


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:50]))
    for i, text in enumerate(TEXTS[50:]):
        (tmp_path / f"page-{i}.txt").write_text(text)
    return [str(tmp_path / "docs.jsonl"), *(str(p) for p in sorted(tmp_path.glob("page-*.txt")))]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["tokenize", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_trains_a_tokenizer_and_builds_a_cache(
    inputs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = str(tmp_path / "cache")
    code, out, _ = run(capsys, "--input", *inputs, "--out", out_dir, "--vocab-size", "300", "--workers", "1")
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["documents"] == 60 and summary["vocab_size"] == 300
    assert summary["train_documents"] + summary["validation_documents"] == 60
    cache = TokenCache(tmp_path / "cache")
    assert summary["tokens"] == len(cache.train) + len(cache.validation)
    assert summary["shards"] == len(cache.info["splits"]["train"]["shards"]) + len(
        cache.info["splits"]["validation"]["shards"]
    )
    tokenizer = load_tokenizer(tmp_path / "cache")
    decoded = [tokenizer.decode(cache.train.document(i).tolist()) for i in range(cache.train.num_documents)]
    assert set(decoded) <= set(TEXTS) and len(decoded) == summary["train_documents"]
    assert not list(tmp_path.glob(".cache*"))  # no temporary or work folder left behind


def test_with_a_given_tokenizer_in_a_process(inputs: list[str], tmp_path: Path) -> None:
    """The installed command, with a pool of worker processes: same bytes as one process."""
    main(
        [
            "tokenize",
            "--input",
            *inputs,
            "--out",
            str(tmp_path / "first"),
            "--vocab-size",
            "300",
            "--workers",
            "1",
        ]
    )
    command = [str(Path(sys.executable).parent / "marin-pipelines"), "tokenize", "--input", *inputs]
    tokenizer = ["--tokenizer", str(tmp_path / "first" / "tokenizer.json"), "--workers", "2"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path / "second"), *tokenizer], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["documents"] == 60
    for name in ("cache.json", "train/00000.bin", "validation/00000.ends"):
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes()
    np.testing.assert_array_equal(
        np.asarray(TokenCache(tmp_path / "first").train), np.asarray(TokenCache(tmp_path / "second").train)
    )


def test_errors(inputs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--input", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "c"))
    assert code == 2 and "input not found" in err
    (tmp_path / "exists").mkdir()
    code, _, err = run(capsys, "--input", *inputs, "--out", str(tmp_path / "exists"))
    assert code == 2 and "already exists" in err
    code, _, err = run(
        capsys, "--input", *inputs, "--out", str(tmp_path / "c"), "--validation-fraction", "0.9"
    )
    assert code == 2 and "--validation-fraction" in err and "0.5" in err
    with pytest.raises(SystemExit):
        main(["tokenize", "--input", *inputs, "--out", "x", "--tokenizer", "t.json", "--vocab-size", "300"])
