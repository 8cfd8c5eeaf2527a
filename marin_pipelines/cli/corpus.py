"""`marin-pipelines corpus`: documents from existing datasets (parquet, JSON lines, saved Hugging Face
datasets) as document shards in a new folder (``crawl/corpus.py``): what ``tokenize --input`` and the text
stages read. The last line printed is the funnel (rows read, kept, left out per reason, with the first
places of each) as one JSON object. A killed run, started again with the same flags, redoes only the
chunks it had not finished (they wait in a work folder beside ``--out``).
"""

from __future__ import annotations

import argparse
import sys

from marin_pipelines.cli import print_json
from marin_pipelines.cli.engine_flags import add_engine_arguments, engine_from
from marin_pipelines.cli.outputs import new_folder


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "corpus", help="existing datasets (parquet, JSON lines, HF save_to_disk) -> document shards"
    )
    parser.add_argument(
        "--input", nargs="+", required=True, metavar="PATH", help="files or folders, local or fsspec URLs"
    )
    parser.add_argument(
        "--out", required=True, help="the folder to create for the shards (it must not exist)"
    )
    parser.add_argument("--text-field", default="text", metavar="F", help="the field of the text (text)")
    parser.add_argument("--id-field", default="id", metavar="F", help="the field of the id (id; else a hash)")
    parser.add_argument("--keep-field", nargs="+", default=[], metavar="F", help="fields kept as columns")
    parser.add_argument("--glob", nargs="+", default=[], metavar="PATTERN", help="files to read in folders")
    parser.add_argument("--limit", type=int, metavar="N", help="read at most N rows, in file order")
    parser.add_argument("--sample", type=float, default=1.0, help="the fraction of rows read (by --seed)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the sample")
    parser.add_argument("--max-chars", type=int, default=1_000_000, help="a longer text is left out")
    add_engine_arguments(parser)
    parser.set_defaults(run=run_corpus)


def run_corpus(args: argparse.Namespace) -> int:
    from marin_pipelines.cli.tokenize import flags_config
    from marin_pipelines.crawl.corpus import CorpusConfig, corpus_identity, write_corpus

    config = flags_config(
        CorpusConfig,
        paths=args.input,
        globs=args.glob,
        text_field=args.text_field,
        id_field=args.id_field,
        keep_fields=args.keep_field,
        limit=args.limit,
        sample=args.sample,
        seed=args.seed,
        max_chars=args.max_chars,
    )
    engine = engine_from(args)
    with new_folder(args.out, "corpus", [config.model_dump(mode="json"), corpus_identity(config)]) as work:
        result = write_corpus(config, work, engine)
    if not result.funnel.docs_out:
        print(f"marin-pipelines corpus: no document kept: {result.funnel.as_dict()}", file=sys.stderr)
    print_json({"out": args.out, **result.as_dict()})
    return 0
