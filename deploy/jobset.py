"""Print a JobSet manifest that trains one run on several TPU slices at once (multislice), for kubectl.

The slice shape, image, store and secrets come from the same MARIN_K8S_* variables as the launcher
(deploy/k8s/marin-env.yaml), so a multislice run's pods are the launcher's pods, once per host of each
slice. It runs outside Dagster: the JobSet controller restarts it after a failure (a preempted slice), and
training resumes from the last checkpoint in --out.

    # with marin-env.yaml's variables exported, for slices of 4 hosts x 4 chips:
    MARIN_K8S_TPU_TOPOLOGY=4x4 MARIN_K8S_CHIPS=4 MARIN_K8S_HOSTS=4 python deploy/jobset.py \\
        --name big-run --slices 2 --config gs://BUCKET/runs/big.yaml \\
        --data gs://BUCKET/store/demo/tokenized_cache/_/VERSION --out gs://BUCKET/runs/big \\
      | kubectl apply -n marin -f -
"""

from __future__ import annotations

import argparse
import sys

import yaml

from marin_pipelines.launch_config import CHILD_MODULE
from marin_pipelines.resources.launcher import K8sLauncher
from marin_pipelines.resources.launcher_env import launcher_from_env


def train_command(config: str, data: str, out: str) -> list[str]:
    """``marin-pipelines train`` as a user runs it, in a pod (no terminal: no progress bar)."""
    return ["-m", CHILD_MODULE, "train", "--config", config, "--data", data, "--out", out, "--quiet"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="the JobSet's name (a DNS label)")
    parser.add_argument("--slices", required=True, type=int, help="TPU slices, each of MARIN_K8S_HOSTS hosts")
    parser.add_argument("--config", required=True, help="the run's YAML (model and train)")
    parser.add_argument("--data", required=True, help="a tokenized_cache output")
    parser.add_argument("--out", required=True, help="the run's folder (resumed if it has checkpoints)")
    args = parser.parse_args(argv)
    launcher = launcher_from_env()
    if not isinstance(launcher, K8sLauncher):
        parser.error("set MARIN_LAUNCHER=k8s and the MARIN_K8S_* variables of the slices")
    command = train_command(args.config, args.data, args.out)
    yaml.safe_dump(launcher.multislice_jobset(args.name, command, args.slices), sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
