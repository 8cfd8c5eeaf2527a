"""`marin-pipelines sweep`: search a training run's config with Optuna, stopping bad trials early.

``--config`` is a training run's YAML (as ``train`` reads it); ``--space`` a YAML file mapping dotted fields
of it to ``{low, high, log}`` or a list of choices, such as
``train.learning_rate: {low: 1.0e-4, high: 3.0e-2, log: true}``. Each trial is a training run in
``OUT/trials/NNNN``; the study, the trial table, ``best.json`` and the plots are in ``--out``
(``marin_pipelines.sweeps.sweep``). Progress goes to stderr, a line a trial; the last line of stdout is one
JSON object: ``best`` (params, value, trial), ``trials`` (complete, pruned, failed) and ``flops``. Run it
again with the same flags after a kill and it continues: finished trials are not trained again, and the
trial a killed worker left is resumed from its checkpoint.

The sweep step's launcher runs it as ``python -m marin_pipelines.cli sweep --step-config FILE``: the base run,
the cache, the space, the settings and the folder in one JSON file (``SweepLaunch``), no other flag beside
it. A sweep that cannot succeed (every trial failed, or bad input) then also writes ``failed.json`` with the
reason into its folder, for the step to read (``sweeps/launched.py``). A file that names a ``trial`` finishes
that one trial of the sweep (its partition materialised alone: resumed, or trained again where it failed):
its rows go to ``trial_NNNN.json`` in the folder, and to stdout as ``{"rows": [...]}``.
"""

from __future__ import annotations

import argparse
import sys

from marin_pipelines.cli import print_json
from marin_pipelines.cli.outputs import check_folder
from marin_pipelines.cli.step_config import add_step_config, step_config
from marin_pipelines.cli.train import positive_int
from marin_pipelines.train.reporting import REPORTED_METRICS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep", help="search a training run's config (Optuna: TPE, Hyperband), stopping bad trials early"
    )
    parser.add_argument("--config", help="the base run's YAML (path or URL), as for train")
    parser.add_argument("--data", help="a tokenized_cache output: a folder or a gs:// URL")
    parser.add_argument(
        "--space", help="YAML: dotted field -> {low, high, log, step, int, grid} or [choices]"
    )
    parser.add_argument("--trials", type=positive_int, help="trials to finish, failed too")
    parser.add_argument("--out", help="the sweep's folder: study, trials/NNNN, table, plots")
    parser.add_argument("--sampler", choices=("tpe", "random", "grid"), default="tpe", help="default: tpe")
    parser.add_argument(
        "--pruner", choices=("hyperband", "median", "none"), default="hyperband", help="default: hyperband"
    )
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed (default 0)")
    parser.add_argument(
        "--workers", type=positive_int, default=1, help="local processes training trials at once (default 1)"
    )
    parser.add_argument(
        "--metric", default="val_loss", help=f"ranks trials, lower is better: {', '.join(REPORTED_METRICS)}"
    )
    parser.add_argument(
        "--report-every", type=positive_int, help="steps between reports (default: a tenth of a run)"
    )
    parser.add_argument(
        "--startup-trials",
        type=int,
        default=5,
        help="random trials before TPE models the space, and finished trials before the median pruner prunes",
    )
    parser.add_argument(
        "--storage",
        help="where the study lives: a database URL (postgresql://...) or a journal file; default: "
        "OUT/study.journal",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    add_step_config(parser, ("config", "data", "space", "trials", "out"))
    parser.set_defaults(run=run_sweep_command)


def run_sweep_command(args: argparse.Namespace) -> int:
    from marin_pipelines.sweeps.settings import SweepSettings
    from marin_pipelines.sweeps.space import SearchSpace
    from marin_pipelines.sweeps.sweep import SweepFailed, run_sweep
    from marin_pipelines.train.run_config import load_run_config

    if file := step_config(args):
        return launched_sweep(file)
    base = load_run_config(args.config)
    space = SearchSpace.load(args.space, base)
    settings = SweepSettings(
        trials=args.trials,
        sampler=args.sampler,
        pruner=args.pruner,
        seed=args.seed,
        metric=args.metric,
        report_every=args.report_every,
        startup_trials=args.startup_trials,
    )
    check_folder(args.out)
    try:
        result = run_sweep(
            base, args.data, space, settings, args.out, args.storage, args.workers, progress=not args.quiet
        )
    except SweepFailed as e:
        print(f"marin-pipelines: error: {e}", file=sys.stderr)
        return 1
    print_json(result.summary())
    return 0


def launched_sweep(file: str) -> int:
    """The sweep a launcher wrote down (``SweepLaunch``): its outcome goes to its folder (``summary.json``,
    or ``failed.json`` for a sweep no retry mends: every trial failed, or bad input; ``trial_NNNN.json`` for
    one trial)."""
    from marin_pipelines.sweeps.launch_config import SweepLaunch
    from marin_pipelines.sweeps.launched import sweep_launched
    from marin_pipelines.sweeps.sweep import SweepFailed

    launch = SweepLaunch.read(file)
    check_folder(launch.out)
    try:
        result = sweep_launched(launch)
    except SweepFailed as e:
        print(f"marin-pipelines: error: {e}", file=sys.stderr)
        return 1
    print_json({"rows": result} if launch.trial is not None else result.summary())
    return 0
