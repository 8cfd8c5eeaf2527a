"""`marin-pipelines leaderboard`: the speedrun table and its plot; with ``--evals``, every evaluation in the
store as one table (``evals/leaderboard.py``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "leaderboard",
        help="print the speedrun leaderboard and write its plot; --evals: every evaluated model in the store",
    )
    parser.add_argument(
        "--evals",
        action="store_true",
        help="every evaluation in the store: a row per model, the newest valid result per task",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="folder of speedrun results.json files (default: the demo's speedrun_leaderboard output)",
    )
    parser.add_argument(
        "--store-root", default=None, help="the store holding the demo (default: .marin/store)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where leaderboard.png goes (speedrun default: .); with --evals also leaderboard.parquet",
    )
    parser.add_argument("--json", action="store_true", help="--evals: one JSON object (rows, columns)")
    parser.add_argument("--sort", help="--evals: the column to rank by (a label; default: the average)")
    parser.add_argument(
        "--average",
        help="--evals: comma-separated tasks whose headline metric is averaged (default: what every "
        "evaluation asks, the scored quick tasks: marin_python_mc,marin_python_cloze,marin_python_qa)",
    )
    parser.add_argument("--experiment", help="--evals: only the rows of this experiment")
    parser.add_argument("--every-metric", action="store_true", help="--evals: every metric of every task")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.evals:
        return print_evals(args)
    return print_leaderboard(args.results, args.store_root, args.out or Path("."))


def print_evals(args: argparse.Namespace) -> int:
    from marin_pipelines.evals import leaderboard as lb
    from marin_pipelines.store import ArtifactStore, default_store_root

    options = {"sort": args.sort}
    if args.average is not None:
        options["average"] = [t for t in args.average.split(",") if t]
    board = lb.leaderboard(ArtifactStore(args.store_root or default_store_root()), **options)
    if args.experiment:
        board.models = [m for m in board.models if args.experiment in m.experiments]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        lb.to_polars(board).write_parquet(args.out / "leaderboard.parquet")
        if not lb.plot(board, args.out / "leaderboard.png"):
            print("no leaderboard.png: no column has two models with training FLOPs", file=sys.stderr)
    if args.json:
        print(json.dumps(lb.as_json(board)))
    else:
        print(lb.markdown(board, every_metric=args.every_metric))
    return 0


def print_leaderboard(results: Path | None, store_root: str | None, out: Path) -> int:
    from marin_pipelines.scaling.speedrun import leaderboard_markdown, load_results, plot_leaderboard
    from marin_pipelines.store import default_store_root

    if results is None:
        results = demo_results(store_root or default_store_root())
    runs = load_results(results)
    out.mkdir(parents=True, exist_ok=True)
    plot_leaderboard(runs, out / "leaderboard.png")
    print(leaderboard_markdown(runs))
    print(f"\nplot: {out / 'leaderboard.png'}")
    return 0


def demo_results(store_root: str) -> Path:
    from marin_pipelines.experiments.demo import leaderboard
    from marin_pipelines.store import ArtifactStore

    artifact = ArtifactStore(store_root).get(leaderboard.key, leaderboard.version)
    if artifact is None:
        raise FileNotFoundError(
            f"no {leaderboard.name} under {store_root}: run `marin-pipelines demo` first, or pass --results"
        )
    return artifact.path
