"""What a user sees in the UI, read through the webserver's GraphQL API: the runs of an experiment (by its
``marin/experiment`` tag, with their jobs), whether each of its assets is materialised, the first metadata
entries of its comparison, and each ladder's partition dimensions.

Starts ``dagster-webserver`` on 127.0.0.1 over the project instance (``DAGSTER_HOME``, else this folder) and
stops it after; run it after ``make demo`` and an experiment: ``.venv/bin/python bench/ui_check.py sft_demo``.
``tests/e2e/test_steps.py`` reads a tiny ablation's UI with the same functions.

``--pictures DIR`` also takes pictures of the pages in a real browser (headless Chromium: Debian's
``chromium`` package), so that the documentation shows what the UI draws: the experiment's asset graph, its
comparisons, forecasts and laws, each ladder's partitions, and the leaderboard. ``docs/images/ui/`` holds
the ones made after ``make demo`` (``bench/ui_check.py demo --pictures docs/images/ui``, then
``zloss_ablation``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

RUNS = """query Runs($tags: [ExecutionTag!]) {
  runsOrError(filter: {tags: $tags}) { ... on Runs { results { runId jobName status } } }
}"""
ASSET = """query Asset($path: [String!]!) {
  assetOrError(assetKey: {path: $path}) {
    ... on Asset { assetMaterializations(limit: 1) { runId metadataEntries { label } } }
  }
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode { partitionKeysByDimension { name partitionKeys } }
  }
}"""
STARTUP_SECONDS = 180
CODE = "marin_pipelines.definitions"  # the module the webserver loads, and so its code location's name
CHROMIUM = "chromium"  # Debian's package; a page is drawn once its queries have answered (virtual time)
WINDOW = (1440, 1400)
COLOURS = 128  # a page is flat colours: a palette of these keeps a picture a third of its size
DRAW_MS = 25_000  # virtual time a page gets to load its data and draw
PICTURED = {
    "comparison": "",
    "isoflop_forecast": "",
    "isoflop_law": "",
    "isoflop_checkpoint": "?view=partitions",
}


def graphql(url: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        answer = json.load(reply)
    if answer.get("errors"):
        raise RuntimeError(f"GraphQL errors: {answer['errors']}")
    return answer["data"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def webserver(code: list[str], env: dict[str, str]) -> Iterator[str]:
    """``dagster-webserver`` on 127.0.0.1 over ``code`` (``["-m", module]`` or ``["-f", file]``) and the
    instance of ``env``'s ``DAGSTER_HOME``: its GraphQL URL, once it has loaded the code."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(port)]
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(command + code, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            began = time.monotonic()
            while True:  # it answers once it has loaded the code location
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5)
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() - began > STARTUP_SECONDS:
                        log.seek(0)
                        raise RuntimeError(f"the webserver did not start: {log.read()[-2000:]}") from None
                    time.sleep(0.5)
            yield f"http://127.0.0.1:{port}/graphql"
        finally:
            server.terminate()
            server.wait(timeout=30)


@dataclass
class UIView:
    """One experiment as the UI shows it."""

    runs: list[dict[str, str]]  # tagged with the experiment: runId, jobName, status
    never_materialised: list[str]  # assets (not partitioned) with no materialisation
    first_entries: dict[str, list[str]]  # a comparison's first metadata labels, by step
    dimensions: dict[str, dict[str, list[str]]]  # a ladder step's partition keys by dimension name


def what_the_ui_shows(url: str, experiment: Any) -> UIView:
    """The runs, materialisations, comparison headlines and ladder grids of ``experiment`` (an
    ``Experiment``) that the webserver at ``url`` serves."""
    runs = graphql(url, RUNS, {"tags": [{"key": "marin/experiment", "value": experiment.name}]})
    view = UIView(runs["runsOrError"]["results"], [], {}, {})
    for step in experiment.all_steps:
        data = graphql(url, ASSET, {"path": step.name.split("/")})
        materializations = (data["assetOrError"] or {}).get("assetMaterializations") or []
        dimensions = (data["assetNodeOrError"] or {}).get("partitionKeysByDimension") or []
        if not materializations and not dimensions:
            view.never_materialised.append(step.name)
        if step.stage.name == "comparison" and materializations:
            view.first_entries[step.name] = [e["label"] for e in materializations[0]["metadataEntries"]]
        if step.partitioning == "ladder":
            view.dimensions[step.name] = {d["name"]: d["partitionKeys"] for d in dimensions}
    return view


def take_pictures(url: str, experiment: Any, folder: Path) -> list[Path]:
    """PNGs of what a user opens for ``experiment``: the lineage of every group, its own groups' graphs,
    then each pictured step's page (its latest materialisation's metadata; a ladder's partitions), then the
    leaderboard."""
    base = url.removesuffix("/graphql")
    groups = sorted({step.name.split("/")[0] for step in experiment.steps})
    pages = {"lineage": "/asset-groups"}
    pages |= {f"{group}-graph": f"/locations/{CODE}/asset-groups/{group}" for group in groups}
    for step in experiment.all_steps:
        if (view := PICTURED.get(step.stage.name)) is not None:
            pages[step.name.replace("/", "-")] = f"/assets/{step.name}{view}"
    pages["leaderboard"] = "/assets/leaderboard"
    folder.mkdir(parents=True, exist_ok=True)
    taken = []
    for name, path in pages.items():
        out = folder / f"{name}.png"
        subprocess.run(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--virtual-time-budget={DRAW_MS}",
             f"--screenshot={out}", base + path],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        picture = Image.open(out).convert("RGB")
        picture.quantize(colors=COLOURS, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
        taken.append(out)
        print(f"  {out}: {path}", file=sys.stderr)
    return taken


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "experiment", help="an experiment that has been run (make demo, marin-pipelines experiment)"
    )
    parser.add_argument(
        "--pictures", type=Path, help="also take pictures of its pages (headless Chromium) here"
    )
    args = parser.parse_args()
    if args.pictures and shutil.which(CHROMIUM) is None:  # said before the webserver starts
        parser.error(f"--pictures needs {CHROMIUM!r} on PATH (Debian: apt-get install chromium)")
    from marin_pipelines.experiment import discover_experiments

    experiment = discover_experiments()[args.experiment]
    env = {**os.environ, "DAGSTER_HOME": os.environ.get("DAGSTER_HOME") or str(Path.cwd())}
    with webserver(["-m", CODE], env) as url:
        view = what_the_ui_shows(url, experiment)
        if args.pictures:
            take_pictures(url, experiment, args.pictures)
    jobs = sorted({r["jobName"] for r in view.runs})
    print(f"{experiment.name}: {len(view.runs)} runs tagged marin/experiment={experiment.name}, jobs {jobs}")
    for step, labels in view.first_entries.items():
        print(f"  {step}: first metadata entries {labels[:5]}")
    for step, dimensions in view.dimensions.items():
        print(f"  {step}: partition dimensions { ({name: len(keys) for name, keys in dimensions.items()}) }")
    print(f"  assets never materialised: {view.never_materialised or 'none'}")
    return 1 if view.never_materialised else 0


if __name__ == "__main__":
    sys.exit(main())
