"""Token cache: id-hash split, shards with document offsets, parallel and resumable builds, fsspec reads."""

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import fsspec
import numpy as np
import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer, models

from marin_pipelines.engine import LocalEngine
from marin_pipelines.tokenize import text_sources, tokenized_cache
from marin_pipelines.tokenize.text_sources import read_chunk, text_chunks
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, TokenCache, build_cache, split_key
from marin_pipelines.tokenize.tokenizer import EOS


def build(inputs: list[Path | str], tokenizer: Tokenizer, out: Path, workers: int = 1, **config) -> dict:
    out.mkdir(parents=True)
    work = out.with_name(f".{out.name}.work")
    result = build_cache(
        [str(p) for p in inputs], tokenizer, out, CacheConfig(**config), work, LocalEngine(workers)
    )
    assert not work.exists()
    return result.info


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def decoded(tokenizer: Tokenizer, split) -> list[str]:
    return [tokenizer.decode(split.document(i).tolist()) for i in range(split.num_documents)]


def test_build_and_open(
    tokenizer: Tokenizer, tmp_path: Path, make_docs: Callable, write_parquet: Callable
) -> None:
    docs = make_docs(400)
    inputs = write_parquet(docs, tmp_path / "curated", files=3)
    (inputs / "removed-00000.parquet").write_bytes(b"not read: a stage's removed documents")
    info = build([inputs], tokenizer, tmp_path / "cache", validation_fraction=0.1)
    assert json.loads((tmp_path / "cache" / "cache.json").read_text()) == info
    assert info["dtype"] == "uint16" and info["eos_id"] == info["bos_id"] == tokenizer.token_to_id(EOS) == 0
    train, val = info["splits"]["train"], info["splits"]["validation"]
    assert train["documents"] + val["documents"] == 400 and 15 <= val["documents"] <= 70  # about 10%
    assert len(train["shards"]) == len(val["shards"]) == 3  # one shard per input chunk and split
    expected_val = [d for d in docs if split_key(d["id"], 0) < 0.1]
    expected_train = [d for d in docs if split_key(d["id"], 0) >= 0.1]
    assert val["text_bytes"] == sum(len(d["text"].encode()) for d in expected_val)

    cache = TokenCache(tmp_path / "cache")
    assert cache.info == info and len(cache.train) == train["tokens"]
    assert decoded(tokenizer, cache.validation) == [d["text"] for d in expected_val]  # input order
    assert decoded(tokenizer, cache.train) == [d["text"] for d in expected_train]
    stream = np.asarray(cache.train)  # the whole split: documents joined by EOS, across shards
    assert stream.dtype == np.uint16 and len(stream) == train["tokens"]
    assert int((stream == 0).sum()) == train["documents"] and stream[-1] == 0
    assert Tokenizer.from_file(str(tmp_path / "cache" / "tokenizer.json")).to_str() == tokenizer.to_str()


def test_windows_across_shards_and_errors(
    tokenizer: Tokenizer, tmp_path: Path, make_docs, write_parquet
) -> None:
    build([write_parquet(make_docs(90), tmp_path / "in", files=3)], tokenizer, tmp_path / "cache")
    split = TokenCache(tmp_path / "cache").train
    stream = np.asarray(split)
    first_shard = split.shards[0]["tokens"]
    starts = np.array([0, first_shard - 5, len(stream) - 40])
    np.testing.assert_array_equal(split.windows(starts, 40), np.stack([stream[s : s + 40] for s in starts]))
    with pytest.raises(IndexError, match="outside this split"):
        split.windows(np.array([len(stream) - 3]), 4)
    with pytest.raises(IndexError, match="document 90"):
        split.document(90)
    with pytest.raises(FileNotFoundError, match="not a token cache"):
        TokenCache(tmp_path / "nothing")


def test_split_is_stable_per_document(tokenizer: Tokenizer, tmp_path: Path, make_docs, write_parquet) -> None:
    docs = make_docs(300)
    small = build([write_parquet(docs[:100], tmp_path / "a", 1)], tokenizer, tmp_path / "small")
    large = build([write_parquet(docs, tmp_path / "b", 2)], tokenizer, tmp_path / "large")
    val_small = decoded(tokenizer, TokenCache(tmp_path / "small").validation)
    assert val_small and set(val_small) <= set(decoded(tokenizer, TokenCache(tmp_path / "large").validation))
    assert small["splits"]["validation"]["documents"] < large["splits"]["validation"]["documents"]
    other = build([tmp_path / "b"], tokenizer, tmp_path / "other", seed=7)
    assert other["splits"]["validation"]["text_bytes"] != large["splits"]["validation"]["text_bytes"]
    # the identity a forecast records: other text or another split is another cache; a rebuild is not
    again = build([tmp_path / "b"], tokenizer, tmp_path / "again")
    identity = {name: TokenCache(tmp_path / name).identity for name in ("small", "large", "other", "again")}
    assert len({identity["small"], identity["large"], identity["other"]}) == 3
    assert identity["again"] == identity["large"] and again == large


def test_workers_do_not_change_the_bytes(
    tokenizer: Tokenizer, tmp_path: Path, make_docs, write_parquet
) -> None:
    inputs = write_parquet(make_docs(300), tmp_path / "in", files=4)
    build([inputs], tokenizer, tmp_path / "one", workers=1)
    build([inputs], tokenizer, tmp_path / "two", workers=2)
    assert tree(tmp_path / "one") == tree(tmp_path / "two")


@pytest.mark.parametrize("files", [3, 9])  # the moved document in the middle of a shard, or alone in one
def test_a_small_build_always_has_a_validation_document(
    tokenizer: Tokenizer, tmp_path: Path, make_docs, write_parquet, files: int
) -> None:
    """At 1% the hash split puts none of these 9 documents in validation; the one with the smallest key
    (doc-1) moves there, the same whatever the number of workers."""
    docs = make_docs(9)
    keys = [split_key(d["id"], 0) for d in docs]
    assert min(keys) > 0.01 and int(np.argmin(keys)) == 1
    inputs = write_parquet(docs, tmp_path / "in", files)
    info = build([inputs], tokenizer, tmp_path / "one", validation_fraction=0.01)
    build([inputs], tokenizer, tmp_path / "two", workers=2, validation_fraction=0.01)
    assert tree(tmp_path / "one") == tree(tmp_path / "two")
    cache = TokenCache(tmp_path / "one")
    assert decoded(tokenizer, cache.validation) == [docs[1]["text"]]
    assert decoded(tokenizer, cache.train) == [d["text"] for d in docs[:1] + docs[2:]]
    train, val = info["splits"]["train"], info["splits"]["validation"]
    assert [s["name"] for s in val["shards"]] == ["validation/00000" if files == 3 else "validation/00001"]
    assert len(train["shards"]) == (3 if files == 3 else 8)
    assert val["text_bytes"] == len(docs[1]["text"].encode())
    assert train["text_bytes"] + val["text_bytes"] == sum(len(d["text"].encode()) for d in docs)
    assert (len(np.asarray(cache.train)), len(np.asarray(cache.validation))) == (
        train["tokens"],
        val["tokens"],
    )
    single = build([write_parquet(docs[:1], tmp_path / "single", 1)], tokenizer, tmp_path / "single-cache")
    assert single["splits"]["validation"]["documents"] == 0  # one document: kept for training


def test_encode_batch_size_never_changes_the_bytes(
    tokenizer: Tokenizer, tmp_path: Path, make_docs, write_parquet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks cut into many encode batches, several in flight, give the cache of one batch per chunk."""
    inputs = write_parquet(make_docs(200), tmp_path / "in", files=2)
    build([inputs], tokenizer, tmp_path / "whole", validation_fraction=0.2)
    monkeypatch.setattr(tokenized_cache, "ENCODE_CHARS", 300)
    monkeypatch.setattr(tokenized_cache, "ENCODE_AHEAD", 3)
    build([inputs], tokenizer, tmp_path / "pieces", validation_fraction=0.2)
    assert tree(tmp_path / "pieces") == tree(tmp_path / "whole")


def test_chunks_without_documents(
    tokenizer: Tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Byte ranges of a JSON-lines file in which no line starts are chunks without documents."""
    texts = [" ".join(["river"] * (i * 7 % 40)) for i in range(30)]
    lines = [json.dumps({"id": f"d{i}", "text": text}) for i, text in enumerate(texts)]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(text_sources, "JSONL_CHUNK_BYTES", 64)
    assert any(not list(read_chunk(c)) for c in text_chunks([str(tmp_path / "docs.jsonl")]))
    build([tmp_path / "docs.jsonl"], tokenizer, tmp_path / "one", validation_fraction=0.2)
    build([tmp_path / "docs.jsonl"], tokenizer, tmp_path / "two", workers=2, validation_fraction=0.2)
    assert tree(tmp_path / "one") == tree(tmp_path / "two")
    cache = TokenCache(tmp_path / "one")
    assert sorted(decoded(tokenizer, cache.train) + decoded(tokenizer, cache.validation)) == sorted(texts)


KILLED_BUILD = """
import os, signal, sys
from pathlib import Path
from tokenizers import Tokenizer
from marin_pipelines.tokenize import tokenized_cache as tc

tc.ENCODE_CHARS = 1000  # shards are written in pieces, so the kill comes half-way through one
read_chunk, calls = tc.read_chunk, []

def dying(chunk):  # SIGKILL ourselves half-way through the fourth chunk (read ahead of its writing)
    calls.append(chunk)
    for i, doc in enumerate(read_chunk(chunk)):
        if len(calls) == 4 and i == 40:
            os.kill(os.getpid(), signal.SIGKILL)
        yield doc

tc.read_chunk = dying
inputs, tokenizer, out, work = sys.argv[1:]
tc.build_cache([inputs], Tokenizer.from_file(tokenizer), Path(out), tc.CacheConfig(), Path(work))
"""


def test_resume_after_kill(tokenizer: Tokenizer, tmp_path: Path, make_docs, write_parquet) -> None:
    inputs = write_parquet(make_docs(480), tmp_path / "in", files=8)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    out, work = tmp_path / "resumed", tmp_path / ".resumed.work"
    out.mkdir()
    args = [
        sys.executable,
        "-c",
        KILLED_BUILD,
        str(inputs),
        str(tmp_path / "tokenizer.json"),
        str(out),
        str(work),
    ]
    killed = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(p.name for p in work.glob("*.json")) == [
        "00000.json",
        "00001.json",
        "00002.json",
        "build.json",
    ]
    assert list(work.rglob(".00003.tmp-*"))  # killed while writing the fourth chunk's shards
    finished = {str(p.relative_to(work)): p.stat().st_ino for p in work.glob("*/0000[012].*")}

    tokenizer_again = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tokenizer_again.encode_special_tokens = True
    resumed = build_cache([str(inputs)], tokenizer_again, out, CacheConfig(), work)
    assert (resumed.chunks_reused, resumed.chunks_encoded) == (3, 5)
    assert len(finished) >= 6 and finished == {name: (out / name).stat().st_ino for name in finished}  # kept
    build([inputs], tokenizer_again, tmp_path / "uninterrupted")
    assert tree(out) == tree(tmp_path / "uninterrupted")


def test_a_different_build_clears_the_work_folder(
    tokenizer: Tokenizer, tmp_path: Path, make_docs, write_parquet
) -> None:
    inputs = write_parquet(make_docs(50), tmp_path / "in", files=2)
    work = tmp_path / ".cache.work"
    (work / "train").mkdir(parents=True)
    (work / "build.json").write_text('{"fingerprint": "another build"}')
    (work / "00000.json").write_text('{"not": "this build"}')
    (tmp_path / "cache").mkdir()
    result = build_cache([str(inputs)], tokenizer, tmp_path / "cache", CacheConfig(), work)
    assert (result.chunks_reused, result.chunks_encoded) == (0, 2)
    assert (
        result.info["splits"]["train"]["documents"] + result.info["splits"]["validation"]["documents"] == 50
    )


def test_uint32_for_large_vocabulary(tmp_path: Path) -> None:
    vocab = {f"w{i}": i for i in range(70_000)} | {EOS: 70_000}
    big = Tokenizer(models.WordLevel(vocab, unk_token=EOS))
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "w69999"}\n{"id": "b", "text": "w1"}\n')
    info = build([tmp_path / "in.jsonl"], big, tmp_path / "cache")
    assert info["dtype"] == "uint32"
    cache = TokenCache(tmp_path / "cache")
    tokens = np.concatenate([np.asarray(cache.train), np.asarray(cache.validation)])
    assert sorted(tokens.tolist()) == [1, 69_999, 70_000, 70_000]


def test_text_files_of_every_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [json.dumps({"text": f"line {i} " + "é" * (i % 7)}) for i in range(40)]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n\n")
    (tmp_path / "one.txt").write_text("a whole file is one document\n")
    monkeypatch.setattr(text_sources, "JSONL_CHUNK_BYTES", 50)  # many chunks, lines across their borders
    chunks = text_chunks([str(tmp_path)])
    assert len(chunks) > 10 and {c.kind for c in chunks} == {"jsonl", "txt"}
    texts = [text for chunk in chunks for _, text in read_chunk(chunk)]
    assert texts == [json.loads(line)["text"] for line in lines] + ["a whole file is one document\n"]
    (tmp_path / "bad.jsonl").write_text('{"text": 3}\n')
    with pytest.raises(ValueError, match="bad.jsonl: a document's 'text' is int"):
        [doc for chunk in text_chunks([str(tmp_path / "bad.jsonl")]) for doc in read_chunk(chunk)]
    (tmp_path / "bad.jsonl.gz").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a file ending in one of"):
        text_chunks([str(tmp_path / "bad.jsonl.gz")])
    with pytest.raises(FileNotFoundError, match="input not found"):
        text_chunks([str(tmp_path / "missing")])


def test_empty_input_and_bad_config(tokenizer: Tokenizer, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no documents to tokenize"):
        build([tmp_path / "empty.jsonl"], tokenizer, tmp_path / "cache")
    with pytest.raises(ValidationError, match="validation_fraction"):
        CacheConfig(validation_fraction=0)


def test_read_from_a_remote_filesystem(
    tokenizer: Tokenizer, tmp_path: Path, make_docs, write_parquet
) -> None:
    """Inputs and the cache at fsspec URLs (memory:// here, gs:// in production) read like local ones."""
    memory = fsspec.filesystem("memory")
    write_parquet(make_docs(120), tmp_path / "in", files=2)
    memory.put(str(tmp_path / "in"), "/remote-in", recursive=True)
    build(["memory://remote-in"], tokenizer, tmp_path / "cache")
    memory.put(str(tmp_path / "cache"), "/remote-cache", recursive=True)
    local, remote = TokenCache(tmp_path / "cache"), TokenCache("memory://remote-cache")
    assert remote.info == local.info
    starts = np.array([0, 17, len(local.train) - 50])
    np.testing.assert_array_equal(remote.train.windows(starts, 50), local.train.windows(starts, 50))
    np.testing.assert_array_equal(remote.validation.document(1), local.validation.document(1))
    memory.rm("/remote-in", recursive=True), memory.rm("/remote-cache", recursive=True)


def test_real_multilingual_pages_round_trip(shared_data: Path, tmp_path: Path) -> None:
    """Real pages in many languages: every document decodes from the cache to exactly its text."""
    import gzip

    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer

    texts = []
    for path in sorted((shared_data / "web-pages").glob("*.html.gz")):
        html = gzip.decompress(path.read_bytes())
        if text := extract_plain_text(bytes_to_str(html, detect_encoding(html)), main_content=True):
            texts.append(text)
    lines = [json.dumps({"id": str(i), "text": t}) for i, t in enumerate(texts)]
    (tmp_path / "pages.jsonl").write_text("\n".join(lines))
    tokenizer = train_tokenizer(texts[::2], TokenizerConfig(vocab_size=1024))
    tokenizer.encode_special_tokens = True
    build([tmp_path / "pages.jsonl"], tokenizer, tmp_path / "cache", validation_fraction=0.3)
    cache = TokenCache(tmp_path / "cache")
    assert sorted(decoded(tokenizer, cache.train) + decoded(tokenizer, cache.validation)) == sorted(texts)


def one_document_a_shard(cache: Path, out: Path, copies: int) -> np.ndarray:
    """``cache``'s train split rewritten as ``copies`` rounds of one shard per document (the files a cache of
    many small input files has); the stream it holds."""
    info = json.loads((cache / tokenized_cache.INFO_FILE).read_text())
    source = TokenCache(cache).train
    (out / "train").mkdir(parents=True)
    shards, stream = [], []
    for index in range(copies * source.num_documents):
        tokens = np.append(source.document(index % source.num_documents), info["eos_id"])
        name = f"train/{index:06d}"
        tokens.astype(info["dtype"]).tofile(out / f"{name}.bin")
        np.array([len(tokens)], np.uint64).tofile(out / f"{name}.ends")
        shards.append({"name": name, "documents": 1, "tokens": len(tokens), "text_bytes": 0})
        stream.append(tokens)
    info["splits"]["train"] = {"documents": len(shards), "tokens": sum(s["tokens"] for s in shards)}
    info["splits"]["train"].update(text_bytes=0, shards=shards)
    (out / tokenized_cache.INFO_FILE).write_text(json.dumps(info))
    return np.concatenate(stream)


def test_a_cache_of_more_shards_than_open_files_allowed_is_read_whole(token_cache: Path, tmp_path: Path):
    # the loader reads windows of a few shards per step; a step per window keeps at most OPEN_MAPS open
    stream = one_document_a_shard(token_cache, tmp_path / "cache", copies=4)
    shards = len(
        json.loads((tmp_path / "cache" / tokenized_cache.INFO_FILE).read_text())["splits"]["train"]["shards"]
    )
    assert shards > 1000
    read = f"""
import numpy as np
from marin_pipelines.tokenize.tokenized_cache import TokenCache
split = TokenCache({str(tmp_path / "cache")!r}).train
starts = np.arange(0, len(split) - 64, 37)
steps = [split.windows(starts[i : i + 8], 64) for i in range(0, len(starts), 8)]
np.save({str(tmp_path / "windows.npy")!r}, np.concatenate(steps))
np.save({str(tmp_path / "whole.npy")!r}, np.asarray(split))
"""
    limited = subprocess.run(
        ["bash", "-c", f'ulimit -n 256 && exec "{sys.executable}" -c "$0"', read],
        capture_output=True,
        text=True,
    )
    assert limited.returncode == 0, limited.stderr[-2000:]
    assert np.array_equal(np.load(tmp_path / "whole.npy"), stream)
    starts = np.arange(0, len(stream) - 64, 37)
    assert np.array_equal(np.load(tmp_path / "windows.npy"), np.stack([stream[s : s + 64] for s in starts]))
