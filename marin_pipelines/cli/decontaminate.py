"""`marin-pipelines decontaminate`: documents less those that share a long n-gram with evaluation data
(``text/decontaminated_text.py``), without the UI. ``--input`` is a folder of ``documents-*.parquet`` (a
document step's output, or ``corpus``'s); ``--against`` takes lm-eval task names or YAMLs and files (``.txt``
one item a line, ``.jsonl`` with a ``text`` field or chat ``messages``). ``--out``, a new folder, receives the
kept ``documents-*.parquet`` and the ``removed-*.parquet`` (with the sets and items each matched); a killed
run, started again with the same flags and inputs, finishes where it stopped. Flags, items and the input
shards' ``text`` column are checked before ``--out`` is made; a document whose text is null is removed as
``missing_field`` and counted. The last line printed is one JSON object: the funnel and, per evaluation set,
the documents matched and the items found in the data.
"""

from __future__ import annotations

import argparse
import sys

from marin_pipelines.cli import print_json
from marin_pipelines.cli.engine_flags import add_engine_arguments, engine_from
from marin_pipelines.cli.outputs import new_folder


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "decontaminate",
        help="remove documents that share a long n-gram with evaluation data, printing the funnel",
        description=__doc__.split("\n", 1)[1],
    )
    parser.add_argument("--input", required=True, help="a folder (or URL) of documents-*.parquet")
    parser.add_argument(
        "--against", nargs="+", required=True, metavar="TASK|FILE", help="lm-eval tasks, task YAMLs, files"
    )
    parser.add_argument("--out", required=True, help="the folder the kept and removed shards go to")
    parser.add_argument("--n", type=int, default=13, help="words in a shared n-gram (default 13)")
    parser.add_argument("--min-words", type=int, default=8, help="shorter items are not matched (default 8)")
    parser.add_argument(
        "--min-overlap",
        type=float,
        default=0.0,
        help="share of an item's n-grams to hold (default 0: any one)",
    )
    parser.add_argument(
        "--match-prompt-alone",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a question-answer item's prompt matches on its own (default); --no-match-prompt-alone: only "
        "n-grams that reach into the answer",
    )
    add_engine_arguments(parser)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from marin_pipelines.documents import (
        REMOVED_PREFIX,
        check_text_column,
        list_shards,
        read_shard,
        run_stage,
    )
    from marin_pipelines.evals.evaluation_items import evaluation_items
    from marin_pipelines.text.decontaminated_text import (
        DecontaminationConfig,
        NgramIndex,
        contamination_report,
        decontaminate,
    )
    from marin_pipelines.tokenize.text_sources import find_files

    shards = find_files([args.input], (".parquet",))
    if not list_shards(args.input):
        raise FileNotFoundError(f"--input {args.input}: no documents-*.parquet there")
    check_text_column(list_shards(args.input))  # every flag and input checked before --out is made
    config = DecontaminationConfig(
        n=args.n,
        min_words=args.min_words,
        min_overlap=args.min_overlap,
        match_prompt_alone=args.match_prompt_alone,
    )
    items = evaluation_items(args.against)
    index = NgramIndex(items, config)
    print(f"{len(index.items)} evaluation items from {len(index.suites)} sets", file=sys.stderr)
    inputs = [[url, info.get("size"), str(info.get("mtime"))] for url, info in shards.items()]
    key = [config.model_dump(mode="json"), inputs, [[i.suite, i.item, i.text] for i in items]]
    with new_folder(args.out, "decontaminate", key) as work:
        funnel = run_stage(decontaminate, index, args.input, work, engine_from(args))
    removed = (doc for shard in list_shards(args.out, REMOVED_PREFIX) for doc in read_shard(shard))
    report = contamination_report(removed, index)
    print_json({"funnel": funnel.as_dict(), **report}, sort_keys=True)
    return 0
