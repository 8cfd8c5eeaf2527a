"""The scaled-out dedup (map steps over shards and hash partitions) against the single-process reference,
``deduplicate``, on a generated corpus: exact copies, shared paragraphs, near copies and chains."""

import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

from marin_pipelines.documents import REMOVED_PREFIX, read_documents, write_stage
from marin_pipelines.engine import LocalEngine
from marin_pipelines.text import dedup_partitions
from marin_pipelines.text.dedup_partitions import deduplicate_snapshot
from marin_pipelines.text.deduplicated_text import DedupConfig, DedupIndex, MinHasher, deduplicate

SHARD_SIZE = 7  # many shards: first-wins decisions cross shard boundaries


def _words(rng: random.Random, n: int) -> str:
    return " ".join(
        f"{rng.choice('bcdfglmnprstvz')}{rng.choice('aeiou')}{rng.randrange(400)}" for _ in range(n)
    )


def _page(rng: random.Random, paragraphs: int = 5) -> str:
    return "\n".join(_words(rng, rng.randrange(25, 60)) for _ in range(paragraphs))


def _edit(text: str, edits: int, rng: random.Random) -> str:
    """``edits`` words replaced, keeping the lines: a near copy as mirrors make them."""
    lines = [line.split(" ") for line in text.split("\n")]
    spots = [(i, j) for i, line in enumerate(lines) for j in range(len(line))]
    for i, j in rng.sample(spots, edits):
        lines[i][j] = f"x{rng.randrange(10**6)}"
    return "\n".join(" ".join(line) for line in lines)


def _shares_band(hasher: MinHasher, a: str, b: str) -> bool:
    return bool(set(hasher.band_keys(hasher.signature(a))) & set(hasher.band_keys(hasher.signature(b))))


def _chain(rng: random.Random) -> tuple[str, str, str]:
    """A ~ B ~ C sharing a band pairwise, but A and C none: the reference keeps C (it copies no kept
    document), where removing all but the first of a connected component would drop it."""
    hasher = MinHasher(DedupConfig())
    while True:
        a = _page(rng, paragraphs=6)
        b = _edit(a, 14, rng)
        c = _edit(b, 14, rng)
        if _shares_band(hasher, a, b) and _shares_band(hasher, b, c) and not _shares_band(hasher, a, c):
            return a, b, c


def _corpus(seed: int, pages: int, earlier: Sequence[dict] = ()) -> list[dict]:
    """Distinct pages, then (shuffled) exact copies, copies in another case and spacing, pages quoting
    paragraphs, pages made of others' paragraphs, near copies, chains, odd texts; copies of ``earlier``."""
    rng = random.Random(seed)
    originals = [_page(rng) for _ in range(pages)]
    sources = originals + [doc["text"] for doc in earlier if doc["text"].count("\n") >= 3]  # whole pages
    derived = []
    for _ in range(pages // 4):
        text = rng.choice(sources)
        derived.append(text)
        derived.append("  " + text.upper().replace(" ", "  ", 3) + "\n\n\n")
        quoted = rng.choice(sources).split("\n")
        derived.append("\n".join([_words(rng, 30), rng.choice(quoted), _words(rng, 20), rng.choice(quoted)]))
        two = rng.sample(sources, 2)
        derived.append("\n\n".join([two[0].split("\n")[0], two[1].split("\n")[1]]))
        derived.append(_edit(rng.choice(sources), 2, rng))
    derived += ["", " \n ", "Same line.\nSame line.\n" + _words(rng, 40)]
    rng.shuffle(derived)
    chains = [text for _ in range(3) for text in _chain(rng)]
    texts = [*originals, *derived[: len(derived) // 2], *chains, *derived[len(derived) // 2 :]]
    return [
        {"id": f"s{seed}-{i}", "url": f"https://example.org/{seed}/{i}", "text": t}
        for i, t in enumerate(texts)
    ]


def _source(folder: Path, docs: list[dict]) -> str:
    folder.mkdir(parents=True)
    write_stage(((doc, None) for doc in docs), folder, shard_size=SHARD_SIZE)
    return str(folder)


def _expected(source: str, config: DedupConfig, index: DedupIndex | None = None) -> tuple[list, list]:
    decisions = list(deduplicate(read_documents(Path(source)), config, index))
    kept = [doc for doc, reason in decisions if reason is None]
    return kept, [{**doc, "reason": reason} for doc, reason in decisions if reason is not None]


def _result(work: Path) -> tuple[list, list]:
    return list(read_documents(work)), list(read_documents(work, prefix=REMOVED_PREFIX))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _index(work: Path, kind: str) -> set[int]:
    return {key for path in (work / "index" / kind).glob("part-*.npy") for key in np.load(path).tolist()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    return _source(tmp_path_factory.mktemp("corpus") / "filtered", _corpus(1, pages=40))


@pytest.mark.parametrize(
    "config",
    [
        DedupConfig(partitions=1),
        DedupConfig(partitions=3),
        DedupConfig(partitions=16),
        DedupConfig(partitions=3, fuzzy=False),
        DedupConfig(partitions=3, exact_paragraphs=False),
    ],
    ids=["P1", "P3", "P16", "exact-only", "fuzzy-only"],
)
def test_the_scaled_out_dedup_decides_as_the_reference(corpus, tmp_path, config):
    metadata = deduplicate_snapshot(corpus, str(tmp_path / "work"), config)
    kept, removed = _expected(corpus, config)
    assert _result(tmp_path / "work") == (kept, removed)
    counts = Counter(doc["reason"] for doc in removed)
    assert metadata["funnel"] == {
        "docs_in": len(kept) + len(removed),
        "docs_out": len(kept),
        "removed": counts,
    }
    reference = DedupIndex()
    list(deduplicate(read_documents(Path(corpus)), config, reference))
    assert _index(tmp_path / "work", "paragraphs") == reference.paragraphs
    assert _index(tmp_path / "work", "bands") == reference.bands
    assert (metadata["index_paragraphs"], metadata["index_band_keys"]) == (
        len(reference.paragraphs),
        len(reference.bands),
    )


def test_the_corpus_has_every_case_and_chains_where_components_would_differ(corpus, tmp_path):
    metadata = deduplicate_snapshot(corpus, str(tmp_path / "work"), DedupConfig(partitions=3))
    kept, removed = _expected(corpus, DedupConfig())
    details = {doc["detail"] for doc in removed}
    assert {"every paragraph seen in this snapshot", "near copy seen in this snapshot"} <= details
    docs = list(read_documents(Path(corpus)))
    originals = {doc["id"]: doc["text"] for doc in docs}
    assert any(doc["text"] != originals[doc["id"]] for doc in kept)  # kept, with seen paragraphs dropped
    chains = [doc["id"] for doc in docs if doc["text"].count("\n") == 5 and " x" in doc["text"]]
    reasons = {doc["id"]: doc["reason"] for doc in removed}
    for b, c in zip(chains[::2], chains[1::2], strict=True):  # each chain's B and C
        assert reasons.get(b) == "near_duplicate" and c not in reasons
    assert metadata["largest_component"] >= 3 and metadata["components"] < metadata["colliding_documents"]


def test_same_bytes_on_any_engine_and_the_same_shards_for_any_partitions(corpus, tmp_path):
    outputs = {}
    for name, engine, partitions in (("one", LocalEngine(1), 3), ("two", LocalEngine(2), 3), ("p1", None, 1)):
        deduplicate_snapshot(corpus, str(tmp_path / name), DedupConfig(partitions=partitions), engine=engine)
        outputs[name] = _files(tmp_path / name)
    assert outputs["one"] == outputs["two"]
    shards = {name: {k: v for k, v in out.items() if k.endswith(".parquet")} for name, out in outputs.items()}
    assert shards["one"] == shards["p1"]
    assert _index(tmp_path / "one", "bands") == _index(tmp_path / "p1", "bands")
    assert {name.split("/")[0] for name in outputs["one"]} == {"index", *shards["one"]}  # no _done, _shuffle
    for p in range(3):
        for kind in ("paragraphs", "bands"):
            keys = np.load(tmp_path / "one" / "index" / kind / f"part-{p:05d}.npy")
            assert keys.dtype == np.uint64 and np.all(np.diff(keys) > 0) and np.all(keys % np.uint64(3) == p)


def test_snapshots_in_order_equal_one_stream_and_the_reference_with_earlier_indexes(tmp_path):
    config = DedupConfig(partitions=3)
    snapshots, earlier, index, stream = [], [], DedupIndex(), []
    for n in range(3):
        docs = _corpus(10 + n, pages=16, earlier=stream[-40:])
        source = _source(tmp_path / f"s{n}-in", docs)
        work = tmp_path / f"s{n}"
        metadata = deduplicate_snapshot(source, str(work), config, earlier, LocalEngine(2))
        reference = DedupIndex(
            np.array(sorted(index.paragraphs), np.uint64), np.array(sorted(index.bands), np.uint64)
        )
        assert _result(work) == _expected(source, config, reference)
        assert _index(work, "paragraphs") == reference.paragraphs and _index(work, "bands") == reference.bands
        assert metadata["earlier_snapshots"] == n
        index.paragraphs |= reference.paragraphs
        index.bands |= reference.bands
        snapshots.append(work)
        earlier.append(str(work))
        stream += list(read_documents(Path(source)))
    # together, one pass over the three in order: the same documents kept, the same removed, the same index
    one_pass = list(deduplicate(stream, config))
    kept = [doc for work in snapshots for doc in read_documents(work)]
    removed = [doc for work in snapshots for doc in read_documents(work, prefix=REMOVED_PREFIX)]
    assert kept == [doc for doc, reason in one_pass if reason is None]
    assert [(d["id"], d["reason"]) for d in removed] == [(d["id"], r) for d, r in one_pass if r is not None]
    assert any("earlier snapshot" in doc["detail"] for doc in removed)
    assert set().union(*(_index(work, "paragraphs") for work in snapshots)) == index.paragraphs


def test_an_earlier_index_is_read_one_partition_per_task(corpus, tmp_path):
    earlier = tmp_path / "s1"
    deduplicate_snapshot(corpus, str(earlier), DedupConfig(partitions=3))
    only = tmp_path / "only-part-1"
    for kind in ("paragraphs", "bands"):
        (only / "index" / kind).mkdir(parents=True)
        shutil.copy(earlier / "index" / kind / "part-00001.npy", only / "index" / kind)
    plan = dedup_partitions._Plan(DedupConfig(partitions=3), str(tmp_path / "s2"), 0, (str(only),))
    keys = dedup_partitions._earlier_index(plan, "bands", 1)
    assert np.array_equal(keys, np.load(earlier / "index" / "bands" / "part-00001.npy"))
    with pytest.raises(FileNotFoundError, match=r"only-part-1/index/bands/part-00000.npy"):
        dedup_partitions._earlier_index(plan, "bands", 0)


def test_a_missing_or_mismatched_earlier_index_is_a_clear_error(corpus, tmp_path):
    earlier = tmp_path / "s1"
    deduplicate_snapshot(corpus, str(earlier), DedupConfig(partitions=3))
    with pytest.raises(ValueError, match="has 3 partitions, this dedup 2"):
        deduplicate_snapshot(corpus, str(tmp_path / "a"), DedupConfig(partitions=2), [str(earlier)])
    (earlier / "index" / "bands" / "part-00002.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"s1/index/bands/part-00002.npy: missing"):
        deduplicate_snapshot(corpus, str(tmp_path / "b"), DedupConfig(partitions=3), [str(earlier)])


@dataclass
class Stopping:
    """An engine that runs the units here, one by one, and loses its driver after ``budget`` units."""

    budget: int | None = None
    runs: list[int] = field(default_factory=list)

    def map(
        self, fn: Callable, items: Sequence, progress: Callable[[int, int], None] | None = None
    ) -> list[Any]:
        self.runs.append(len(items))
        results = []
        for item in items:
            if self.budget is not None:
                if self.budget == 0:
                    raise RuntimeError("the driver is lost")
                self.budget -= 1
            results.append(fn(item))
            if progress:
                progress(len(results), len(items))
        return results

    @contextmanager
    def session(self) -> Iterator["Stopping"]:
        yield self


def test_a_rerun_does_only_the_units_without_a_done_record(corpus, tmp_path):
    config = DedupConfig(partitions=3)
    clean = deduplicate_snapshot(corpus, str(tmp_path / "clean"), config)
    shards = len(list(Path(corpus).glob("documents-*.parquet")))
    lost = Stopping(budget=shards + 2)
    with pytest.raises(RuntimeError, match="driver is lost"):
        deduplicate_snapshot(corpus, str(tmp_path / "work"), config, engine=lost)
    assert lost.runs == [shards, 3]  # every shard's paragraph keys, and two of three partitions
    reports: list[tuple[str, int, int]] = []
    rerun = Stopping()
    metadata = deduplicate_snapshot(
        corpus,
        str(tmp_path / "work"),
        config,
        engine=rerun,
        progress=lambda step: lambda done, total: reports.append((step, done, total)),
    )
    assert rerun.runs == [0, 1, shards, 3, 1, shards, 3]
    assert metadata == clean and _files(tmp_path / "work") == _files(tmp_path / "clean")
    funnel = metadata["funnel"]
    assert funnel["docs_in"] == funnel["docs_out"] + sum(funnel["removed"].values()) > 0
    assert reports[0] == ("keys", shards, shards) and ("paragraphs", 2, 3) in reports
    assert [step for step, done, total in reports if done == total] == [
        "keys", "paragraphs", "signatures", "buckets", "clusters", "filter", "index"
    ]  # fmt: skip


def test_an_empty_snapshot_leaves_an_empty_index_for_the_next(tmp_path):
    config = DedupConfig(partitions=2)
    empty = _source(tmp_path / "empty-in", [])
    metadata = deduplicate_snapshot(empty, str(tmp_path / "s1"), config)
    assert metadata["funnel"] == {"docs_in": 0, "docs_out": 0, "removed": {}} and metadata["components"] == 0
    assert sorted(_files(tmp_path / "s1")) == [
        f"index/{k}/part-0000{p}.npy" for k in ("bands", "paragraphs") for p in (0, 1)
    ]
    docs = _corpus(3, pages=8)
    source = _source(tmp_path / "s2-in", docs)
    deduplicate_snapshot(source, str(tmp_path / "s2"), config, [str(tmp_path / "s1")])
    assert _result(tmp_path / "s2") == _expected(source, config)


def test_on_a_bucket_the_same_files_as_on_disk(tmp_path, gcs_root):
    """Source, work and the earlier snapshot's index by URL, as workers on other machines read them."""
    source = _source(tmp_path / "filtered", _corpus(5, pages=8))
    fs = fsspec.filesystem("gs")
    fs.put(f"{source}/", f"{gcs_root}/filtered/", recursive=True)
    config = DedupConfig(partitions=2)
    for name, earlier in (("s1", []), ("s2", ["s1"])):
        local = deduplicate_snapshot(
            source, str(tmp_path / name), config, [str(tmp_path / e) for e in earlier]
        )
        remote = deduplicate_snapshot(
            f"{gcs_root}/filtered", f"{gcs_root}/{name}", config, [f"{gcs_root}/{e}" for e in earlier]
        )
        assert remote == local
        fs.get(f"{gcs_root}/{name}/", str(tmp_path / f"{name}-from-bucket"), recursive=True)
        assert _files(tmp_path / f"{name}-from-bucket") == _files(tmp_path / name)
