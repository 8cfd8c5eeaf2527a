"""The corpus step and decontamination against datatrove's readers and n-gram decontamination filter, on the
same files, in one run.

The corpus is real text that ships with the installed packages (``package_text``: source and documentation
of a few packages and the standard library), written once as parquet and as JSON lines, with a few of the
shipped lm-eval tasks' items planted into ``--planted`` documents. Then, one core each unless said:

- reading: our ``write_corpus`` against datatrove's ``ParquetReader`` and ``JsonlReader`` into its
  ``ParquetWriter``, every document read and written as parquet shards, documents/s;
- decontamination: our ``decontaminate`` (13-grams, the shipped tasks' items indexed in memory) against
  datatrove's ``NGramsDecontFilter`` (its default 12-grams over the same items, indexed by its
  ``NGramsDecontIndexer``), documents/s and what each removed;
- workers: our ``write_corpus`` on 1 and 2 local workers.

Each measurement is the median of ``--repeats`` runs.

    .venv/bin/python bench/corpus_decontamination.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TASKS = ["marin_python_mc", "marin_python_qa", "marin_python_text", "marin_python_cloze"]


def median_seconds(run: Callable[[], object], repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def build_corpus(folder: Path, planted: int, copies: int) -> tuple[list[dict[str, str]], list[str]]:
    """Package text ``copies`` times (new ids) as 4 parquet files and 4 JSON-lines files, with task items
    planted into the first ``planted`` documents."""
    from marin_pipelines.crawl.package_text import PackageTextConfig, build_package_corpus
    from marin_pipelines.documents import read_documents
    from marin_pipelines.evals.evaluation_items import evaluation_items

    config = PackageTextConfig(distributions=["packaging", "pluggy", "attrs", "click"], include_stdlib=True)
    build_package_corpus(config, folder / "package_text")
    once = [{"id": d["id"], "text": d["text"]} for d in read_documents(folder / "package_text")]
    docs = [{"id": f"{d['id']}#{copy}", "text": d["text"]} for copy in range(copies) for d in once]
    items = [i for i in evaluation_items(TASKS) if len(i.text.split()) >= 13]
    ids = []
    for doc, item in zip(docs[:planted], items, strict=False):
        doc["text"] += f"\n\n{item.text}\n"
        ids.append(doc["id"])
    parts = [docs[i::8] for i in range(8)]
    for i, part in enumerate(parts[:4]):
        pq.write_table(pa.Table.from_pylist(part), folder / f"part-{i}.parquet", row_group_size=100)
    for i, part in enumerate(parts[4:]):
        with open(folder / f"part-{i}.jsonl", "w") as f:
            f.writelines(json.dumps(d) + "\n" for d in part)
    return docs, ids


def ours_read(folder: Path, out: Path, workers: int) -> int:
    """Our corpus step's work: every file read, its documents written as shards into ``out`` (new)."""
    import shutil

    from marin_pipelines.crawl.corpus import CorpusConfig, write_corpus
    from marin_pipelines.engine import LocalEngine

    shutil.rmtree(out, ignore_errors=True)
    config = CorpusConfig(paths=[str(folder)], globs=["part-*"])
    return write_corpus(config, str(out), LocalEngine(workers)).funnel.docs_out


def datatrove_read(folder: Path, out: Path) -> int:
    """datatrove's reader -> writer pipeline over the same files: every document read and written as
    parquet into ``out``."""
    import shutil

    from datatrove.pipeline.readers import JsonlReader, ParquetReader
    from datatrove.pipeline.writers import ParquetWriter

    shutil.rmtree(out, ignore_errors=True)
    count = 0
    for reader in (
        ParquetReader(str(folder), glob_pattern="part-*.parquet", recursive=False),
        JsonlReader(str(folder), glob_pattern="part-*.jsonl", recursive=False),
    ):
        writer = ParquetWriter(str(out / reader.__class__.__name__))
        count += sum(1 for _ in writer.run(reader.run()))
    return count


def ours_decontaminate(shards: Path, workers: int) -> int:
    """Our decontamination step's work on the engine: the corpus's shards against the tasks' items; the
    documents it removed."""
    import shutil

    from marin_pipelines.documents import run_stage
    from marin_pipelines.engine import LocalEngine
    from marin_pipelines.evals.evaluation_items import evaluation_items
    from marin_pipelines.text.decontaminated_text import DecontaminationConfig, NgramIndex, decontaminate

    out = shards.with_name("decontaminated")
    shutil.rmtree(out, ignore_errors=True)
    index = NgramIndex(evaluation_items(TASKS), DecontaminationConfig())
    return sum(run_stage(decontaminate, index, str(shards), str(out), LocalEngine(workers)).removed.values())


def datatrove_config():
    """datatrove's defaults but sha1 hashes: its xxhash wrapper hands str to xxhash, which this xxhash
    refuses (it wants bytes)."""
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig
    from datatrove.utils.hashing import HashConfig

    return NGramsDecontConfig(hash_config=HashConfig(hash_fc="sha1"))


def datatrove_decontaminate(docs: list[dict[str, str]], index_folder: Path) -> list[str]:
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import NGramsDecontFilter

    kept = NGramsDecontFilter(str(index_folder), config=datatrove_config()).run(
        Document(text=d["text"], id=d["id"]) for d in docs
    )
    survivors = {doc.id for doc in kept}
    return [d["id"] for d in docs if d["id"] not in survivors]


def datatrove_index(index_folder: Path) -> None:
    """datatrove's index of the same items, hashed by its indexer's ``compute_hashes`` and saved as its
    ``run`` saves them (``run`` itself imports lighteval, for lighteval's task registry: not installed)."""
    import numpy as np
    from datatrove.pipeline.decont.n_grams import NGramsDecontIndexer

    from marin_pipelines.evals.evaluation_items import evaluation_items

    indexer = object.__new__(NGramsDecontIndexer)  # skips the lighteval check of its __new__
    indexer.__init__(str(index_folder), lighteval_tasks=[], config=datatrove_config())
    hashes: dict[str, set[int]] = {}
    for item in evaluation_items(TASKS):
        hashes.setdefault(item.suite, set()).update(indexer.compute_hashes(item.text, ""))
    index_folder.mkdir()
    for suite, found in hashes.items():
        np.array(sorted(found), dtype=indexer.config.hash_config.np_descr).tofile(
            index_folder / f"{suite}.index.hashes"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--planted", type=int, default=12, help="documents a task item is planted into")
    parser.add_argument("--copies", type=int, default=4, help="copies of the package text (new ids)")
    args = parser.parse_args()
    logging.getLogger("datatrove").setLevel(logging.WARNING)
    from loguru import logger

    logger.remove()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        docs, planted = build_corpus(folder, args.planted, args.copies)
        megabytes = sum(len(d["text"].encode()) for d in docs) / 1e6
        print(f"corpus: {len(docs)} documents, {megabytes:.1f} MB in 4 parquet and 4 JSON-lines files")
        shards = folder / "shards"
        read = {w: median_seconds(lambda w=w: ours_read(folder, shards, w), args.repeats) for w in (1, 2)}
        theirs, m = median_seconds(lambda: datatrove_read(folder, folder / "datatrove"), args.repeats)
        (one, n), (two, _) = read[1], read[2]
        assert m == n == len(docs), (m, n, len(docs))  # every document, both ways
        print(
            f"read and write, 1 core: ours {n / one:,.0f} docs/s, datatrove {m / theirs:,.0f} docs/s: "
            f"{theirs / one:.2f}x"
        )
        print(f"read and write, ours on 2 workers: {n / two:,.0f} docs/s, {one / two:.2f}x one worker")
        datatrove_index(folder / "index")
        cleaned = {w: median_seconds(lambda w=w: ours_decontaminate(shards, w), args.repeats) for w in (1, 2)}
        index = folder / "index"
        theirs, their_removed = median_seconds(lambda: datatrove_decontaminate(docs, index), args.repeats)
        (one, removed), (two, _) = cleaned[1], cleaned[2]
        rates = f"ours {len(docs) / one:,.0f} docs/s, datatrove {len(docs) / theirs:,.0f} docs/s"
        print(f"decontaminate, 1 core: {rates}: {theirs / one:.2f}x")
        print(f"decontaminate, ours on 2 workers: {len(docs) / two:,.0f} docs/s, {one / two:.2f}x one worker")
        found = len(set(their_removed) & set(planted))
        print(
            f"removed: ours {removed} of {len(docs)} ({len(planted)} planted), "
            f"datatrove {len(their_removed)} ({found} of them planted)"
        )


if __name__ == "__main__":
    main()
