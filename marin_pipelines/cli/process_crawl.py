"""`marin-pipelines process-crawl`: WARC files to deduplicated text without the UI
(``marin_pipelines.process_crawl``). The last line printed is the funnel of every stage as one JSON object.
"""

from __future__ import annotations

import argparse
import sys

from marin_pipelines.cli import print_json
from marin_pipelines.cli.engine_flags import add_engine_arguments, engine_from
from marin_pipelines.cli.outputs import naming


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "process-crawl", help="WARC files -> deduplicated text, printing the funnel"
    )
    parser.add_argument("--warc", nargs="+", required=True, metavar="PATH", help="WARC/ARC files or folders")
    parser.add_argument("--out", required=True, help="store root for the outputs (a folder)")
    parser.add_argument("--snapshot", default="cli", help="the snapshot key the outputs are filed under")
    add_engine_arguments(parser)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    def note(message: str) -> None:
        print(f"marin-pipelines: note: {message}", file=sys.stderr)

    from marin_pipelines.process_crawl import process_crawl  # here: `--help` stays fast

    engine = engine_from(args)
    with naming(args.out):
        funnels = process_crawl(args.warc, args.out, args.snapshot, engine, progress=print, note=note)
    print_json(funnels, sort_keys=True)
    return 0
