"""`marin-pipelines demo`: the demo, its z-loss ablation and its fine-tuning (which share every data step; the
fine-tuning also the demo's run), materialised in this process, each followed by its summary."""

from __future__ import annotations

import argparse
import os

DEMO = ("demo", "zloss_ablation", "sft_demo")


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="materialise the demo, its z-loss ablation and its SFT here, then summarise"
    )
    demo.add_argument("--warc-root", help="folder of WARC/ARC files (default: build the embedded demo crawl)")
    demo.add_argument("--store-root", default=None, help="where outputs go (default: .marin/store)")
    demo.add_argument(
        "--experiment",
        action="append",
        help=f"run this experiment instead (repeatable; default: {', '.join(DEMO)})",
    )
    demo.set_defaults(run=lambda args: run_demo(args.warc_root, args.store_root, args.experiment))


def run_demo(warc_root: str | None, store_root: str | None, names: list[str] | None = None) -> int:
    if warc_root:  # read by the demo's crawl step when the experiments are imported
        os.environ["MARIN_WARC_ROOT"] = warc_root
    from marin_pipelines.cli.experiment import run_experiments

    return run_experiments(names or list(DEMO), store_root)
