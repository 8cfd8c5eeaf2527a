"""What the sweep tests (tests/e2e/sweeps, tests/system/sweeps) share: a tiny base run, its files, the command
and what it prints."""

import json
import re
import sys
from pathlib import Path

import yaml

# 20 steps of a nano model: a trial trains in about a second once its program is compiled (the learning
# rates below are the only choices that change the program: the persistent cache keeps both)
BASE = {
    "model": {"size": "nano", "seq_len": 32},
    "train": {"steps": 20, "batch_size": 8, "warmup_steps": 2, "checkpoint_every": 10, "peak_flops": 1e10},
}
GOOD_LR, BAD_LR = 0.03, 1.0e-6


def write_inputs(folder: Path, space: dict, base: dict = BASE) -> tuple[Path, Path]:
    """The base run's and the space's YAML files in ``folder``."""
    config, space_file = folder / "base.yaml", folder / "space.yaml"
    config.write_text(yaml.safe_dump(base))
    space_file.write_text(yaml.safe_dump(space))
    return config, space_file


def sweep_args(config: Path, space: Path, cache: Path, out: Path, trials: int, *more: str) -> list[str]:
    flags = ["--config", str(config), "--space", str(space), "--data", str(cache), "--out", str(out)]
    return ["sweep", *flags, "--trials", str(trials), *more]


def command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "marin_pipelines.cli", *args]


def last_json(stdout: str) -> dict:
    """The command's last line."""
    return json.loads(stdout.strip().splitlines()[-1])


def trial_lines(stderr: str, what: str) -> list[int]:
    """The trial numbers of the progress lines ``sweep OUT: trial N <what>``, in order."""
    return [int(n) for n in re.findall(rf"^sweep .*: trial (\d+) {what}\b", stderr, re.MULTILINE)]
