"""Our text pipeline against datatrove's on the same WARC, both with the same number of workers.

The WARC is built from ../shared/data/web-pages with ../shared/tools/make_warc.py (``--copies`` packs
the pages that many times, for a longer run; copies are then removed by dedup in both pipelines).

- ours: ``process_crawl`` (fastwarc -> resiliparse extraction + language id -> Gopher / C4 / FineWeb
  rules -> exact paragraph + MinHash dedup), shard-parallel over ``--workers`` processes; the web
  documents are cut into shards of ``--shard-docs`` so that one WARC still spreads over the workers.
- datatrove: WarcReader -> Trafilatura -> GopherRepetition / GopherQuality / C4Quality / FineWebQuality
  filters -> JsonlWriter, then MinHash (signatures, buckets, clusters, filter), LocalPipelineExecutor
  with ``--workers`` workers and as many tasks. datatrove splits work by file, so its second task
  reads nothing from a single WARC: that is its design, measured as it is.

Each side runs ``--repeats`` times from scratch (fresh output folders, modules already imported); the
medians give documents/s (pages in the WARC per second) and the ratio.

    .venv/bin/python bench/text_pipeline.py --workers 2 --repeats 3
"""

from __future__ import annotations

import argparse
import gzip
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from marin_pipelines.crawl.web_documents import WebDocumentsConfig
from marin_pipelines.engine import LocalEngine
from marin_pipelines.process_crawl import process_crawl

SHARED = Path(__file__).resolve().parents[2] / "shared"


def build_warc(folder: Path, copies: int) -> tuple[Path, int]:
    pages = sorted(str(p) for p in (SHARED / "data" / "web-pages").glob("*.html.gz"))
    warc = folder / "web-pages.warc.gz"
    subprocess.run(
        [sys.executable, str(SHARED / "tools" / "make_warc.py"), str(warc), *pages * copies], check=True
    )
    return warc, len(pages) * copies


def ours(warc: Path, out: Path, workers: int, shard_docs: int) -> int:
    configs = {"web_documents": WebDocumentsConfig(shard_docs=shard_docs)}
    funnels = process_crawl([warc], out, engine=LocalEngine(workers), configs=configs)
    return funnels["deduplicated_text"]["docs_out"]


def datatrove(warc: Path, out: Path, workers: int) -> int:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupBuckets
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.readers import JsonlReader, WarcReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    # 5-grams, 14 buckets x 8 hashes. sha1 shingle hashes: datatrove 0.10.1's xxhash path passes str to
    # xxhash 4, which refuses it (a few ms per run over these pages; trafilatura dominates its time)
    config = MinhashConfig(hash_config=HashConfig(hash_fc="sha1"))
    logs = str(out / "logs")
    extract = LocalPipelineExecutor(
        [
            WarcReader(str(warc.parent), glob_pattern="*.warc.gz"),
            Trafilatura(favour_precision=True),
            GopherRepetitionFilter(),
            GopherQualityFilter(),
            C4QualityFilter(filter_no_terminal_punct=False),
            FineWebQualityFilter(),
            JsonlWriter(str(out / "filtered")),
            MinhashDedupSignature(output_folder=str(out / "signatures"), config=config),
        ],
        tasks=workers,
        workers=workers,
        logging_dir=f"{logs}/1",
    )
    buckets = LocalPipelineExecutor(
        [MinhashDedupBuckets(str(out / "signatures"), str(out / "buckets"), config=config)],
        tasks=config.num_buckets,
        workers=workers,
        logging_dir=f"{logs}/2",
        depends=extract,
    )
    cluster = LocalPipelineExecutor(
        [MinhashDedupCluster(str(out / "buckets"), str(out / "remove_ids"), config=config)],
        tasks=1,
        logging_dir=f"{logs}/3",
        depends=buckets,
    )
    final = LocalPipelineExecutor(
        [
            JsonlReader(str(out / "filtered")),
            MinhashDedupFilter(str(out / "remove_ids")),
            JsonlWriter(str(out / "deduplicated")),
        ],
        tasks=workers,
        workers=workers,
        logging_dir=f"{logs}/4",
        depends=cluster,
    )
    final.run()
    return sum(1 for path in (out / "deduplicated").glob("*.jsonl.gz") for _ in _lines(path))


def _lines(path: Path) -> Iterator[str]:
    with gzip.open(path, "rt") as f:
        yield from f


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=1, help="times each page is packed into the WARC")
    parser.add_argument("--shard-docs", type=int, default=32, help="our web-document shard size")
    args = parser.parse_args()
    from loguru import logger  # datatrove's logger: quiet

    logger.remove()
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        warc, pages = build_warc(Path(tmp), args.copies)
        print(f"WARC: {pages} pages, {warc.stat().st_size / 1e6:.1f} MB; {args.workers} workers")
        times: dict[str, list[float]] = {"ours": [], "datatrove": []}
        kept: dict[str, int] = {}
        for repeat in range(args.repeats):
            for name in ("ours", "datatrove"):
                out = Path(tmp) / f"{name}-{repeat}"
                started = time.perf_counter()
                if name == "ours":
                    kept[name] = ours(warc, out, args.workers, args.shard_docs)
                else:
                    kept[name] = datatrove(warc, out, args.workers)
                times[name].append(time.perf_counter() - started)
        for name, seconds in times.items():
            median = statistics.median(seconds)
            print(
                f"{name:>9}: {pages / median:8.1f} documents/s  (median {median:.2f} s of "
                f"{', '.join(f'{s:.2f}' for s in seconds)}; {kept[name]} documents kept)"
            )
        ratio = statistics.median(times["datatrove"]) / statistics.median(times["ours"])
        print(f"ratio: ours / datatrove = {ratio:.1f}x documents/s (goal >= 3x)")


if __name__ == "__main__":
    main()
