"""An experiment's execution record: a JSON file in the store, next to the data, as Marin keeps one.

It lists every step with its resolved config, version, output path and status (``done`` when a complete
output of that version exists, whichever experiment made it), the Dagster runs that made the outputs,
the git commit of the code (and whether the tree was dirty) and when it was written. It is derived from
the store, so whoever writes it last writes a whole, consistent view. For a step not yet done it says
which config fields or inputs changed since the newest stored version: why the hash forked.
Only configs go in; secrets live in the environment and never reach a config.
"""

from __future__ import annotations

import json
import subprocess
import time
from functools import cache
from pathlib import Path
from typing import Any

from marin_pipelines.experiment import Experiment
from marin_pipelines.steps import Step, changed_fields, upstream_versions
from marin_pipelines.store import RECORDS, Artifact, ArtifactStore


def record_name(experiment: Experiment) -> str:
    """The record's place under the store's root."""
    return f"{RECORDS}/{experiment.name}.json"


def step_status(store: ArtifactStore, step: Step) -> dict[str, Any]:
    """``status`` (done / to_run), ``output``, the runs that made it and, if not done, what changed.

    A step whose output is an alias of another step's (same version) records that output's url and, in
    ``same_as``, its step (by partition for a partitioned step; its ``output`` is the original's when every
    partition is an alias of one step's)."""
    partitions: list[str | None] = list(step.partition_keys()) if step.partitioning else [None]
    found = {p: store.get(step.key, step.version, p) for p in partitions}
    done = bool(partitions) and all(found.values())
    partitioned = partitions != [None]
    same_as = {p: a.same_as for p, a in found.items() if a is not None and a.same_as}
    originals = set(same_as.values())
    whole = len(originals) == 1 and len(same_as) == len(partitions)  # every output an alias of one step's
    holder = originals.pop().split("/") if whole else step.key
    output = store.url(holder, step.version, "{partition}" if partitioned else None)
    entry: dict[str, Any] = {
        **step.describe(),
        "status": "done" if done else "to_run",
        "output": str(output),
        "dagster_run_ids": sorted(
            {a.manifest.get("made_by", {}).get("dagster_run_id") for a in found.values() if a} - {None}
        ),
    }
    if same_as:
        entry["same_as"] = {str(p): name for p, name in same_as.items()} if partitioned else same_as[None]
    if partitioned:
        entry["partitions"] = {str(p): "done" if a else "to_run" for p, a in found.items()}
    if not done:
        entry["changed"] = why_forked(store, step, partitions[0] if partitions else None)
    return entry


def why_forked(store: ArtifactStore, step: Step, partition: str | None) -> dict[str, Any] | None:
    """What differs from the newest stored version of the step: config fields, inputs, or neither (then
    the stage's code revision or the content its config points at). None if none is stored."""
    previous: list[Artifact] = store.others(step.key, step.version, partition)
    if not previous:
        return None
    last = previous[0].manifest
    now, before = _versions(upstream_versions(step)), _versions(last.get("upstream", {}))
    inputs = sorted(name for name in {*now, *before} if now.get(name) != before.get(name))
    fields = changed_fields(last.get("config"), step.config_json)
    return {
        "since": last["version"],
        "config": fields,
        "inputs": inputs,
        "other": [] if fields or inputs else ["code revision or input content"],
    }


def _versions(upstream: dict[str, str]) -> dict[str, str]:
    """Input -> version from a manifest's ``step@version``: an input's name is not versioned, and the
    stored version may be another step's output of it (an alias), recorded under that step's inputs."""
    return {name: ref.rpartition("@")[2] for name, ref in upstream.items()}


@cache  # the code this process runs was loaded once: its commit does not change under it
def git_state() -> dict[str, Any] | None:
    """The commit of the code that declared the steps, and whether its tree had uncommitted changes."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None  # an installed package, not a checkout
    return {"commit": commit, "dirty": bool(status.strip())}


def build_record(store: ArtifactStore, experiment: Experiment) -> dict[str, Any]:
    steps = [step_status(store, step) for step in experiment.all_steps]
    return {
        "experiment": experiment.name,
        "description": experiment.description,
        "declared_at": experiment.declared_at,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_state(),
        "store": store.root,
        "steps": steps,
        "dagster_run_ids": sorted({run for step in steps for run in step["dagster_run_ids"]}),
    }


def write_record(store: ArtifactStore, experiment: Experiment) -> str:
    """Write the record whole (a rename locally, one object on a bucket); where it is."""
    return store.write_text(
        record_name(experiment), json.dumps(build_record(store, experiment), indent=2, default=str)
    )
