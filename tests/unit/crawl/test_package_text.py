"""The installed-packages corpus, on two small real distributions (certifi: a tests folder; click: a
149 KB core.py that a small size cap leaves out), so that a build takes a fraction of a second."""

import dataclasses
import importlib.metadata
import json
import sysconfig
from pathlib import Path

import pytest
from pydantic import ValidationError

from marin_pipelines.crawl.package_text import (
    DEFAULT_DISTRIBUTIONS,
    MANIFEST,
    STDLIB,
    PackageTextConfig,
    UnknownDistribution,
    build_package_corpus,
    corpus_version,
    package_files,
    select_files,
)
from marin_pipelines.documents import read_documents
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, build_cache
from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer

SMALL = PackageTextConfig(
    distributions=("certifi", "click"), include_stdlib=False, max_file_bytes=100_000, shard_size=5
)


@pytest.fixture(scope="module")
def small_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("package-text") / "corpus"
    return out, build_package_corpus(SMALL, out)


def test_two_builds_give_the_same_bytes_and_version(small_build, tmp_path):
    out, manifest = small_build
    again = build_package_corpus(SMALL, tmp_path / "again")
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(p.name for p in (tmp_path / "again").iterdir())
    assert len(manifest["shards"]) > 1  # shard_size=5
    for name in files:
        assert (out / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    assert again["version"] == manifest["version"] == corpus_version(package_files(SMALL))
    assert json.loads((out / MANIFEST).read_text()) == manifest


def test_version_follows_every_included_file():
    files = package_files(SMALL)
    version = corpus_version(files)
    assert len(version) == 64
    assert corpus_version(list(reversed(files))) == version  # the order given does not matter
    changed = [dataclasses.replace(files[0], sha256="0" * 64), *files[1:]]  # another version's file
    assert corpus_version(changed) != version
    renamed = [dataclasses.replace(files[0], id=files[0].id + "x"), *files[1:]]
    assert corpus_version(renamed) != version
    assert corpus_version(files[1:]) != version


def test_every_candidate_is_kept_or_skipped_with_a_reason():
    selection = select_files(SMALL)
    ids = {f.id for f in selection.files}
    listed = sum(len(importlib.metadata.distribution(n).files) for n in SMALL.distributions)
    assert len(selection.files) + sum(selection.skipped.values()) == listed
    assert "certifi/certifi/core.py" in ids
    assert not [i for i in ids if "/tests/" in i]
    assert selection.skipped["tests"] == 2  # certifi/tests/__init__.py and test_certify.py
    assert "click/click/core.py" not in ids  # 149 KB, over the 100 KB cap
    assert selection.skipped["too_large"] == 1
    assert "click/click/types.py" in ids
    assert selection.skipped["extension"] > 0  # bytecode, certifi's cacert.pem, py.typed
    assert selection.skipped["package_metadata"] > 0  # RECORD, WHEEL, LICENSE ...
    assert [f.id for f in selection.files] == sorted(ids)
    readmes = [f for f in selection.files if f.id.endswith(".dist-info/METADATA")]
    assert len(readmes) == 2 and {f.kind for f in readmes} == {"docs"}
    assert {f.kind for f in selection.files if f.id.endswith(".py")} == {"code"}


def test_records_feed_the_token_cache(small_build, tmp_path):
    out, manifest = small_build
    docs = list(read_documents(out))
    assert [d["id"] for d in docs] == sorted(d["id"] for d in docs)
    assert len(docs) == manifest["documents"] == sum(s["documents"] for s in manifest["sources"].values())
    assert {d["source"] for d in docs} == {"certifi", "click"}
    by_id = {d["id"]: d for d in docs}
    source = Path(importlib.metadata.distribution("click").locate_file("click/types.py"))
    assert by_id["click/click/types.py"]["text"] == source.read_text(encoding="utf-8")
    assert sum(len(d["text"].encode()) for d in docs) == manifest["bytes"]
    tokenizer = train_tokenizer((d["text"] for d in docs), TokenizerConfig(vocab_size=300))
    cache = tmp_path / "cache"
    cache.mkdir()
    info = build_cache([str(out)], tokenizer, cache, CacheConfig(), tmp_path / "work").info
    splits = info["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == len(docs)
    assert splits["train"]["text_bytes"] + splits["validation"]["text_bytes"] == manifest["bytes"]


def test_a_build_needs_an_empty_folder(small_build):
    out, _ = small_build
    with pytest.raises(FileExistsError, match="not empty"):
        build_package_corpus(SMALL, out)


def test_unknown_distribution_is_named():
    config = PackageTextConfig(distributions=("click", "no-such-distribution"), include_stdlib=False)
    with pytest.raises(UnknownDistribution, match="'no-such-distribution' is not installed"):
        package_files(config)


def test_config_rejects_repeats_and_no_source():
    with pytest.raises(ValidationError, match="more than once"):
        PackageTextConfig(distributions=("lm_eval", "lm-eval"))
    with pytest.raises(ValidationError, match="no source"):
        PackageTextConfig(distributions=(), include_stdlib=False)
    with pytest.raises(ValidationError, match="start with a dot"):
        PackageTextConfig(extensions=("py",))


def test_default_distributions_are_installed():
    """`make install` brings every default distribution (they are in requirements.lock)."""
    for name in DEFAULT_DISTRIBUTIONS:
        assert importlib.metadata.distribution(name).files, name


def test_stdlib_without_its_test_suite_or_site_packages():
    selection = select_files(PackageTextConfig(distributions=(), include_stdlib=True))
    ids = {f.id for f in selection.files}
    assert f"{STDLIB}/json/decoder.py" in ids
    assert not [i for i in ids if "/test/" in i or "/tests/" in i or "site-packages" in i]
    if (Path(sysconfig.get_paths()["stdlib"]) / "test").is_dir():  # some Linux Pythons ship it apart
        assert selection.skipped["tests"] > 500
    assert f"{STDLIB}/encodings/cp1252.py" not in ids  # a charmap table "generated from" a mapping
    assert selection.skipped["generated"] > 0
