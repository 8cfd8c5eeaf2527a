"""`marin-pipelines experiments` lists the experiments; `marin-pipelines experiment NAME` runs what of it
is not done, in the Dagster instance the UI uses (``DAGSTER_HOME``, else the project folder it runs in:
``defs/instance.py``), or with ``--dry-run`` prints what it would do: as its last line one JSON object,
``{"experiment", "record", "steps": [{"name", "version", "status": "done" | "to_run", "output", ...}]}``,
with, for a step whose version changed since the newest stored one, the config fields and inputs that
changed."""

from __future__ import annotations

import argparse
import sys
import time

from marin_pipelines.cli import print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    listing = subparsers.add_parser("experiments", help="list the experiments, one name per line")
    listing.set_defaults(run=lambda args: list_experiments())
    one = subparsers.add_parser("experiment", help="run an experiment's steps that are not done")
    one.add_argument("name", help="an experiment (see `marin-pipelines experiments`)")
    one.add_argument(
        "--dry-run", action="store_true", help="print each step's version and status, run nothing"
    )
    one.add_argument("--store-root", default=None, help="where outputs go (default: .marin/store)")
    one.set_defaults(run=lambda args: run_experiments([args.name], args.store_root, args.dry_run))


def list_experiments() -> int:
    from marin_pipelines.experiment import discover_experiments

    print("\n".join(discover_experiments()))
    return 0


def dry_run(name: str, store_root: str | None) -> dict:
    from marin_pipelines.execution_record import record_name, step_status
    from marin_pipelines.store import ArtifactStore, default_store_root

    experiment = _experiments()[name]
    store = ArtifactStore(store_root or default_store_root())
    steps = []
    for step in experiment.all_steps:
        status = step_status(store, step)
        keys = ("name", "version", "status", "output", "partitions", "changed")
        steps.append({key: status[key] for key in keys if key in status})
    return {"experiment": name, "record": f"{store.root}/{record_name(experiment)}", "steps": steps}


def run_experiments(names: list[str], store_root: str | None, dry: bool = False) -> int:
    """Materialise each named experiment in turn (steps they share run once) and print its summary."""
    experiments = _experiments()
    if unknown := [name for name in names if name not in experiments]:
        raise ValueError(
            f"unknown experiments {unknown}; `marin-pipelines experiments` lists {list(experiments)}"
        )
    if dry:
        for name in names:
            print_json(dry_run(name, store_root))
        return 0
    from marin_pipelines.cli.local_runs import progress_to_stderr, root_cause
    from marin_pipelines.defs.instance import project_instance  # here: a dry run needs no Dagster
    from marin_pipelines.defs.local_run import materialize_experiment, materialize_leaderboard
    from marin_pipelines.store import default_store_root
    from marin_pipelines.summary import experiment_summary, outcome, wrap_up

    instance = project_instance()
    root = store_root or default_store_root()
    failed = False
    outcomes, checks = [], []
    for name in names:
        started = time.time()
        try:
            with progress_to_stderr():
                run = materialize_experiment(
                    experiments[name], root, instance, others=list(experiments.values())
                )
        except Exception as e:  # a failed step: say what failed and why, not Dagster's wrapper around it
            cause = root_cause(e)
            print(f"marin-pipelines: {name} failed: {type(cause).__name__}: {cause}", file=sys.stderr)
            return 1
        print(experiment_summary(experiments[name], root, run, time.time() - started) + "\n")
        outcomes.append(outcome(experiments[name], root, run))
        checks += run.checks
        failed |= not run.checks_passed
    board = materialize_leaderboard(root, instance)  # with no daemon here, its automation is this call
    leaderboard = (
        f"leaderboard: {board['models']} evaluated models in the store, {board['columns']} columns "
        "(`marin-pipelines leaderboard --evals`, or the leaderboard asset in the UI)"
    )
    print(wrap_up(outcomes, checks, leaderboard))
    return 1 if failed else 0


def _experiments() -> dict:
    from marin_pipelines.experiment import discover_experiments

    return discover_experiments()
