"""``--step-config FILE``: the one file a launched child is run with (``marin_pipelines/launch_config.py``),
in place of the command's own flags, which stay what a user types."""

from __future__ import annotations

import argparse

from marin_pipelines.launch_config import STEP_CONFIG_FLAG


def add_step_config(
    parser: argparse.ArgumentParser, replaces: tuple[str, ...], keeps: tuple[str, ...] = ()
) -> None:
    """The flag, standing in for the ``replaces`` flags (required without it, refused with it). Called after
    the parser's other flags: those are refused with it too (the file holds the whole run, and a flag beside
    it would be silently ignored), except ``keeps``, which say how to run it rather than what."""
    flags = ", ".join(f"--{name.replace('_', '-')}" for name in replaces)
    parser.add_argument(
        STEP_CONFIG_FLAG,
        dest="step_config",
        metavar="FILE",
        help=f"a launched step's config (JSON, what the launchers write), in place of {flags}",
    )
    others = {
        action.dest: action.default
        for action in parser._actions
        if action.dest not in (*replaces, *keeps, "help", "step_config")
    }
    parser.set_defaults(step_replaces=replaces, step_others=others)


def step_config(args: argparse.Namespace) -> str | None:
    """The step config file, or None where the flags describe the run; either one, never both."""
    given = {name: getattr(args, name) not in (None, []) for name in args.step_replaces}
    flags = {name: f"--{name.replace('_', '-')}" for name in [*args.step_replaces, *args.step_others]}
    if args.step_config:
        given |= {name: getattr(args, name) != default for name, default in args.step_others.items()}
        if any(given.values()):
            both = ", ".join(flags[name] for name, was in given.items() if was)
            raise ValueError(f"{STEP_CONFIG_FLAG} holds the whole run: give it without {both}")
        return args.step_config
    if missing := [flags[name] for name, was in given.items() if not was]:
        raise ValueError(
            f"the following arguments are required: {', '.join(missing)} (or {STEP_CONFIG_FLAG})"
        )
    return None
