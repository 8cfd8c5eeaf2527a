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
    from marin_pipelines.experiment import default_store_root
    from marin_pipelines.scaling.speedrun import leaderboard_markdown, load_results, plot_leaderboard

    if results is None:
        results = demo_results(store_root or default_store_root())
    runs = load_results(results)
    out.mkdir(parents=True, exist_ok=True)
    plot_leaderboard(runs, out / "leaderboard.png")
    print(leaderboard_markdown(runs))
    print(f"\nplot: {out / 'leaderboard.png'}")
    return 0


def demo_results(store_root: str) -> Path:
    from marin_pipelines.experiments.demo import demo
    from marin_pipelines.store import ArtifactStore

    experiment = demo()
    stage = "speedrun_leaderboard"
    artifact = ArtifactStore(store_root).get([experiment.name, stage], experiment.versions[stage])
    if artifact is None:
        raise FileNotFoundError(
            f"no demo {stage} under {store_root}: run `marin-pipelines demo` first, or pass --results DIR"
        )
    return artifact.path
