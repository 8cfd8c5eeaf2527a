"""What one Common Crawl snapshot costs, on paper, from measured rates: documents per second per core for
each document stage, output bytes per input page, and dedup's shuffle volume per document.

The WARC is the real web pages of ../shared/data/web-pages packed ``--copies`` times (as
``bench/text_pipeline.py`` builds it). Each stage runs through ``process_crawl`` on one worker process and
then on ``--workers`` (the peer run, same script): the ratio of the two is how far the stages scale over the
cores of one machine, the premise of the per-core extrapolation. The rates are per-stage wall times from
the outputs' manifests. Dedup's shuffle is measured as the bytes of (key, position) pairs its partitions
exchange: its distinct paragraph keys and band keys, 16 bytes each.

    .venv/bin/python bench/stage_costs.py --copies 4 --workers 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from text_pipeline import build_warc

from marin_pipelines.crawl.web_documents import WebDocumentsConfig
from marin_pipelines.documents import read_documents
from marin_pipelines.engine import LocalEngine
from marin_pipelines.process_crawl import DOCUMENT_STAGES, EXPERIMENT, process_crawl
from marin_pipelines.store import read_manifest
from marin_pipelines.text.deduplicated_text import DedupConfig, paragraph_keys

PAGES_PER_SNAPSHOT = 3.0e9  # Common Crawl, ~90,000 WARC files
PAIR_BYTES = 16  # a uint64 key and a uint64 stream position


def stage_outputs(out: Path) -> dict[str, dict]:
    """Each stage's manifest: wall seconds, files and bytes, funnel."""
    manifests = {}
    for stage in DOCUMENT_STAGES:
        (folder,) = [p for p in (out / EXPERIMENT / stage).glob("*/*") if (p / "manifest.json").is_file()]
        manifests[stage] = read_manifest(str(folder)) | {"folder": folder}
    return manifests


def shuffle_bytes(filtered: Path, config: DedupConfig) -> tuple[int, int]:
    """Documents into dedup and the bytes of their paragraph and band (key, position) pairs."""
    docs, pairs = 0, 0
    for doc in read_documents(filtered):
        docs += 1
        pairs += len(set(paragraph_keys(doc["text"])[1].values())) + config.bands
    return docs, pairs * PAIR_BYTES


def measure(warc: Path, folder: Path, workers: int) -> dict[str, dict]:
    configs = {"web_documents": WebDocumentsConfig(shard_docs=32)}
    process_crawl([warc], folder, engine=LocalEngine(workers), configs=configs)
    return stage_outputs(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4, help="times each page is packed into the WARC")
    parser.add_argument("--workers", type=int, default=2, help="the peer run's worker processes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        warc, pages = build_warc(Path(tmp), args.copies)
        print(f"WARC: {pages} pages, {warc.stat().st_size / 1e6:.1f} MB")
        one = measure(warc, Path(tmp) / "one", 1)
        many = measure(warc, Path(tmp) / "many", args.workers)
        docs_dedup, shuffle = shuffle_bytes(one["filtered_text"]["folder"], DedupConfig())
    rows = []
    print(f"\n| stage | docs/s per core | x{args.workers} workers | output bytes per page |")
    print("|---|---:|---:|---:|")
    for stage, manifest in one.items():
        docs_in = manifest["metadata"]["funnel"]["docs_in"]
        rate = docs_in / manifest["wall_seconds"]
        speedup = manifest["wall_seconds"] / many[stage]["wall_seconds"]
        out_bytes = sum(f["bytes"] for f in manifest["files"]) / pages
        share = docs_in / pages  # of the snapshot's pages that reach this stage
        rows.append({"stage": stage, "docs_per_s": rate, "share": share, "bytes_per_page": out_bytes})
        print(f"| {stage} | {rate:,.0f} | {speedup:.2f} | {out_bytes:,.0f} |")
    per_doc = shuffle / max(docs_dedup, 1)
    print(f"\ndedup shuffle: {per_doc:,.0f} bytes per document into dedup ({docs_dedup} documents)")
    print(f"\nOne snapshot of {PAGES_PER_SNAPSHOT:.0e} pages, at these rates and these pages' survival:")
    print("| stage | core-hours | output TB |")
    print("|---|---:|---:|")
    total = 0.0
    for row in rows:
        hours = PAGES_PER_SNAPSHOT * row["share"] / row["docs_per_s"] / 3600
        total += hours
        print(f"| {row['stage']} | {hours:,.0f} | {PAGES_PER_SNAPSHOT * row['bytes_per_page'] / 1e12:,.1f} |")
    dedup_docs = PAGES_PER_SNAPSHOT * rows[-1]["share"]
    print(f"| all | {total:,.0f} | |")
    print(
        f"dedup shuffle: {dedup_docs * per_doc / 1e12:,.2f} TB; per partition task at P=1024: "
        f"{dedup_docs * per_doc / 1024 / 1e9:,.2f} GB"
    )
    print(json.dumps({"rows": rows, "shuffle_bytes_per_doc": per_doc}))


if __name__ == "__main__":
    main()
