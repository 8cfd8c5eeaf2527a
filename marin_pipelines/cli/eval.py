"""`marin-pipelines eval --checkpoint DIR --out FILE.json`: lm-eval tasks and bits per byte of any checkpoint.

The JSON is lm-eval's (``results``, ``configs``, ``versions``, ...) with a ``bpb`` section: one entry per
``--bpb`` set (named by its file or folder name) and ``overall``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate a training directory on lm-eval tasks and bits-per-byte sets"
    )
    parser.add_argument("--checkpoint", required=True, type=Path, help="a directory written by training")
    parser.add_argument(
        "--tasks",
        type=lambda text: [t for t in text.split(",") if t],
        default=[],
        help="comma-separated lm-eval task names (the shipped ones: marin_python_mc, marin_python_cloze, "
        "marin_python_qa, marin_python_text)",
    )
    parser.add_argument(
        "--include-path", type=Path, action="append", default=[], help="a folder of further task YAMLs"
    )
    parser.add_argument(
        "--bpb", nargs="+", default=[], help="text files / folders (.txt, .jsonl, .parquet) or token caches"
    )
    parser.add_argument(
        "--tokenizer", type=Path, help="tokenizer.json (default: the one beside the checkpoint)"
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--limit", type=int, help="at most this many documents per task")
    parser.add_argument("--out", required=True, type=Path, help="where to write the results (JSON)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from marin_pipelines.evals.checkpoint_eval import (
        EvalConfig,
        evaluate_checkpoint,
        load_for_eval,
        results_table,
        scores,
    )

    if not args.tasks and not args.bpb:
        raise ValueError("nothing to evaluate: give --tasks and/or --bpb")
    names = [Path(p.rstrip("/")).name for p in args.bpb]
    if len(set(names)) < len(names):
        raise ValueError(f"--bpb sets need distinct file or folder names, got {names}")
    config = EvalConfig(tasks=args.tasks, include_paths=[str(p) for p in args.include_path], limit=args.limit)
    model, tokenizer = load_for_eval(args.checkpoint, args.tokenizer)
    bpb_sets = {name: [path] for name, path in zip(names, args.bpb, strict=True)}
    results = evaluate_checkpoint(model, tokenizer, bpb_sets, config, args.batch_size)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(results_table(scores(results)))
    return 0
