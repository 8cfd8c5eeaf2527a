import gzip
import random
import re
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from marin_pipelines.documents import KEPT_PREFIX, REMOVED_PREFIX, read_documents, write_stage
from marin_pipelines.engine import LocalEngine
from marin_pipelines.text.dedup_partitions import deduplicate_snapshot
from marin_pipelines.text.deduplicated_text import (
    DedupConfig,
    DedupIndex,
    MinHasher,
    deduplicate,
)
from marin_pipelines.text.extracted_text import extract_text

PAGES = [
    "theguardian.com.academics",
    "dw.com.colonial",
    "nature.com.telescope",
    "stackoverflow.com.rust",
    "nationalgeographic.co.uk.goats",
    "reuters.com.parasite",
    "spiegel.de.albtraum",
    "github.blog.spiceland",
]


@pytest.fixture(scope="module")
def pages(shared_data) -> dict[str, dict]:
    raw = [
        {
            "id": name,
            "url": f"https://{name}/",
            "html": gzip.decompress((shared_data / "web-pages" / f"{name}.html.gz").read_bytes()),
        }
        for name in PAGES
    ]
    return {doc["id"]: doc for doc, reason in extract_text(raw) if reason is None}


def _copy(doc: dict, new_id: str, text: str | None = None) -> dict:
    return {
        **doc,
        "id": new_id,
        "url": f"https://mirror.example/{new_id}",
        "text": doc["text"] if text is None else text,
    }


def _near_copy(text: str, seed: int = 0) -> str:
    """About one word in a hundred replaced: a near duplicate as mirrors and scrapers produce them."""
    rng = random.Random(seed)
    words = text.split(" ")
    for i in rng.sample(range(len(words)), len(words) // 100):
        words[i] = "banana"
    return " ".join(words)


def _jaccard(a: str, b: str, n: int = 5) -> float:
    def grams(text: str) -> set:
        w = re.findall(r"\w+", text.lower())
        return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}

    return len(grams(a) & grams(b)) / len(grams(a) | grams(b))


def _reasons(docs: list[dict], config: DedupConfig | None = None) -> dict[str, str | None]:
    return {doc["id"]: reason for doc, reason in deduplicate(docs, config)}


def test_distinct_pages_are_all_kept(pages):
    decisions = list(deduplicate(pages.values()))
    assert [reason for _, reason in decisions] == [None] * len(pages)
    assert [doc["text"] for doc, _ in decisions] == [doc["text"] for doc in pages.values()]


def test_planted_exact_and_near_duplicates_are_removed(pages):
    guardian, dw = pages["theguardian.com.academics"], pages["dw.com.colonial"]
    near_text = _near_copy(dw["text"])
    assert 0.85 <= _jaccard(near_text, dw["text"]) <= 0.95
    docs = [*pages.values(), _copy(guardian, "exact"), _copy(dw, "near", near_text)]
    reasons = _reasons(docs)
    assert reasons["exact"] == "exact_duplicate" and reasons["near"] == "near_duplicate"
    assert all(reasons[name] is None for name in pages)


def test_first_copy_in_stream_order_wins(pages):
    dw = pages["dw.com.colonial"]
    near = _copy(dw, "near", _near_copy(dw["text"]))
    assert _reasons([near, dw]) == {"near": None, "dw.com.colonial": "near_duplicate"}
    assert _reasons([dw, near]) == {"dw.com.colonial": None, "near": "near_duplicate"}


def test_seen_paragraphs_are_dropped_from_later_documents(pages):
    guardian = pages["theguardian.com.academics"]
    quoted = guardian["text"].split("\n\n")[4]
    assert len(quoted) > 200
    text = (
        "A new introduction that nobody has written before.\n\n"
        + quoted.upper()
        + "\n\nA closing remark, also new."
    )
    decisions = list(deduplicate([guardian, _copy(guardian, "quote", text)]))
    doc, reason = decisions[1]
    assert reason is None  # normalised (case-insensitive) match removed; the rest stays
    assert doc["text"] == "A new introduction that nobody has written before.\n\nA closing remark, also new."
    repeated = "Same line here.\nSame line here.\nAnother line."
    assert next(deduplicate([_copy(guardian, "r", repeated)]))[0]["text"] == repeated  # within one doc: kept


def test_switches(pages):
    dw = pages["dw.com.colonial"]
    near, exact = _copy(dw, "near", _near_copy(dw["text"])), _copy(dw, "exact")
    assert _reasons([dw, near], DedupConfig(fuzzy=False)) == {"dw.com.colonial": None, "near": None}
    assert _reasons([dw, exact], DedupConfig(exact_paragraphs=False))["exact"] == "near_duplicate"


def test_signatures_estimate_jaccard_and_are_reproducible(pages):
    hasher = MinHasher(DedupConfig())
    dw, guardian = pages["dw.com.colonial"]["text"], pages["theguardian.com.academics"]["text"]
    near = _near_copy(dw, seed=3)
    signature = hasher.signature(dw)
    assert signature.shape == (20 * 8,) and signature.dtype == np.uint64
    assert np.array_equal(signature, MinHasher(DedupConfig()).signature(dw))
    assert not np.array_equal(signature, MinHasher(DedupConfig(seed=2)).signature(dw))
    agreement = float(np.mean(signature == hasher.signature(near)))
    assert abs(agreement - _jaccard(dw, near)) < 0.1
    assert float(np.mean(signature == hasher.signature(guardian))) < 0.05
    assert len(hasher.band_keys(signature)) == 20


def test_short_texts_are_one_shingle():
    hasher = MinHasher(DedupConfig())
    assert len(hasher.shingles("Just three words")) == 1
    assert len(hasher.shingles("")) == 0
    assert np.array_equal(hasher.signature("Just THREE words!"), hasher.signature("just three words"))


def test_config_validation():
    with pytest.raises(ValidationError, match="bands"):
        DedupConfig(bands=0)
    with pytest.raises(ValidationError, match="ngram"):
        DedupConfig(ngram=0)
    with pytest.raises(ValidationError, match="partitions"):
        DedupConfig(partitions=0)


@pytest.fixture(scope="module")
def all_pages(shared_data) -> list[dict]:
    """Every real web page with extractable text (they are all distinct pages)."""
    raw = [
        {"id": path.name, "url": f"https://{path.name}/", "html": gzip.decompress(path.read_bytes())}
        for path in sorted((shared_data / "web-pages").glob("*.html.gz"))
    ]
    return [doc for doc, reason in extract_text(raw) if reason is None and len(doc["text"].split()) >= 100]


def _edited(text: str, rate: float, seed: int) -> str:
    """A near copy: ``rate`` of the words replaced, deleted or doubled, as scrapers and templates do."""
    rng = random.Random(seed)
    words = text.split(" ")
    for i in sorted(rng.sample(range(len(words)), max(1, int(len(words) * rate))), reverse=True):
        edit = rng.choice(("replace", "delete", "insert"))
        if edit == "replace":
            words[i] = f"w{rng.randrange(10**6)}"
        elif edit == "delete":
            del words[i]
        else:
            words.insert(i, words[i])
    return " ".join(words)


@pytest.fixture(scope="module")
def planted(all_pages) -> tuple[list[dict], list[dict]]:
    """Exact and near copies (5-gram Jaccard >= 0.8) of the real pages, to follow all the originals."""
    near = []
    for n, page in enumerate(all_pages):
        for seed, rate in enumerate((0.005, 0.01, 0.015, 0.02, 0.03)):
            text = _edited(page["text"], rate, seed=1000 * n + seed)
            if _jaccard(text, page["text"]) >= 0.8:
                near.append(_copy(page, f"near-{n}-{seed}", text))
    exact = [_copy(page, f"exact-{n}") for n, page in enumerate(all_pages)]
    return exact, near


def test_near_duplicate_recall_and_no_false_positives_on_real_pages(all_pages, planted):
    exact, near = planted
    assert len(all_pages) >= 80 and len(near) >= 300
    reasons = _reasons([*all_pages, *exact, *near])
    false_positives = [page["id"] for page in all_pages if reasons[page["id"]] is not None]
    recall = sum(reasons[doc["id"]] is not None for doc in near) / len(near)
    print(
        f"\nnear-duplicate recall {recall:.3f} over {len(near)} planted copies (J >= 0.8); "
        f"distinct pages removed: {len(false_positives)} of {len(all_pages)}"
    )
    assert false_positives == []
    assert all(reasons[doc["id"]] == "exact_duplicate" for doc in exact)
    assert recall >= 0.95


def test_the_scaled_out_dedup_decides_as_the_reference_on_real_pages(all_pages, planted, tmp_path):
    """Real pages, their planted copies interleaved, in shards of 50: the map steps over shards and hash
    partitions give ``deduplicate``'s decisions, details and kept texts."""
    exact, near = planted
    docs = [*all_pages[:40], *near[::2], *exact, *all_pages[40:], *near[1::2]]
    source = tmp_path / "filtered"
    source.mkdir()
    write_stage(((doc, None) for doc in docs), source, shard_size=50)
    metadata = deduplicate_snapshot(str(source), str(tmp_path / "dedup"), DedupConfig(partitions=4))
    reference = list(deduplicate(read_documents(source)))
    assert list(read_documents(tmp_path / "dedup")) == [doc for doc, reason in reference if reason is None]
    assert list(read_documents(tmp_path / "dedup", prefix=REMOVED_PREFIX)) == [
        {**doc, "reason": reason} for doc, reason in reference if reason is not None
    ]
    assert metadata["funnel"]["docs_in"] == len(docs) and metadata["components"] >= len(all_pages) // 2


def _snapshot(tmp_path, name: str, docs: list[dict], earlier: list[str]) -> tuple[dict, dict[str, dict]]:
    source, out = tmp_path / f"{name}-in", tmp_path / name
    source.mkdir()
    write_stage(((doc, None) for doc in docs), source, shard_size=3)
    metadata = deduplicate_snapshot(str(source), str(out), DedupConfig(partitions=3), earlier, LocalEngine(2))
    removed = {doc["id"]: doc for doc in read_documents(out, prefix=REMOVED_PREFIX)}
    return metadata, removed


def _index_keys(folders: list[Path], kind: str) -> set[int]:
    return {
        key
        for folder in folders
        for path in (folder / "index" / kind).glob("part-*.npy")
        for key in np.load(path).tolist()
    }


def test_a_later_snapshot_loses_what_an_earlier_one_had(pages, tmp_path):
    first = list(pages.values())[:5]
    dw = pages["dw.com.colonial"]
    repeats = [_copy(first[0], "again"), _copy(dw, "near-again", _near_copy(dw["text"]))]
    second = [*repeats, *list(pages.values())[5:], _copy(first[1], "twice-in-second")]
    meta1, removed1 = _snapshot(tmp_path, "s1", first, [])
    assert meta1["funnel"] == {"docs_in": 5, "docs_out": 5, "removed": {}} and not removed1
    meta2, removed2 = _snapshot(tmp_path, "s2", second, [str(tmp_path / "s1")])
    funnel = meta2["funnel"]
    assert funnel["docs_in"] == len(second) == funnel["docs_out"] + sum(funnel["removed"].values())
    assert funnel["removed"] == {"exact_duplicate": 2, "near_duplicate": 1}
    assert {i: d["reason"] for i, d in removed2.items()} == {
        "again": "exact_duplicate",
        "near-again": "near_duplicate",
        "twice-in-second": "exact_duplicate",
    }
    assert "earlier snapshot" in removed2["again"]["detail"]
    assert "earlier snapshot" in removed2["near-again"]["detail"]
    assert meta2["earlier_snapshots"] == 1
    # each snapshot stores only its own keys; together they equal one pass over both in order
    together = DedupIndex()
    list(deduplicate([*first, *second], DedupConfig(), together))
    snapshots = [tmp_path / "s1", tmp_path / "s2"]
    assert _index_keys(snapshots, "paragraphs") == together.paragraphs
    assert _index_keys(snapshots, "bands") == together.bands
    assert meta1["index_paragraphs"] + meta2["index_paragraphs"] == len(together.paragraphs)
    assert {path.name for path in (tmp_path / "s2").iterdir()} == {
        "index",
        *(path.name for path in (tmp_path / "s2").glob(f"{KEPT_PREFIX}-*.parquet")),
        *(path.name for path in (tmp_path / "s2").glob(f"{REMOVED_PREFIX}-*.parquet")),
    }
