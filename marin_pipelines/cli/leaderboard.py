"""`marin-pipelines leaderboard [--results DIR] [--out DIR]`: the speedrun table, and its plot written."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("leaderboard", help="print the speedrun leaderboard and write its plot")
    parser.add_argument(
        "--results",
        type=Path,
        help="folder of speedrun results.json files (default: the demo's speedrun_leaderboard output)",
    )
    parser.add_argument(
        "--store-root", default=None, help="the store holding the demo (default: .marin/store)"
    )
    parser.add_argument("--out", type=Path, default=Path("."), help="where leaderboard.png goes")
    parser.set_defaults(run=lambda args: print_leaderboard(args.results, args.store_root, args.out))


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
