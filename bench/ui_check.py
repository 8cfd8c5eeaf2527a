"""What a user sees in the UI, read through the webserver's GraphQL API: the runs of an experiment (by its
``marin/experiment`` tag, with their jobs), whether each of its assets is materialised, the first metadata
entries of its comparison, and each ladder's partition dimensions.

Starts ``dagster-webserver`` on 127.0.0.1 over the project instance (``DAGSTER_HOME``, else this folder) and
stops it after. Too slow for the tests (the webserver loads every experiment); run it after ``make demo``
and an experiment: ``.venv/bin/python bench/ui_check.py sft_demo``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

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


def graphql(url: str, query: str, variables: dict) -> dict:
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "experiment", help="an experiment that has been run (make demo, marin-pipelines experiment)"
    )
    args = parser.parse_args()
    from marin_pipelines.experiment import discover_experiments

    experiment = discover_experiments()[args.experiment]
    env = {**os.environ, "DAGSTER_HOME": os.environ.get("DAGSTER_HOME") or str(Path.cwd())}
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(port)]
        + ["-m", "marin_pipelines.definitions"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/graphql"
    try:
        began = time.monotonic()
        while True:  # the webserver answers once it has loaded the code location
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() - began > 180:
                    raise RuntimeError("the webserver did not start") from None
                time.sleep(1)
        runs = graphql(url, RUNS, {"tags": [{"key": "marin/experiment", "value": experiment.name}]})
        results = runs["runsOrError"]["results"]
        jobs = sorted({r["jobName"] for r in results})
        print(
            f"{experiment.name}: {len(results)} runs tagged marin/experiment={experiment.name}, jobs {jobs}"
        )
        missing = []
        for step in experiment.all_steps:
            data = graphql(url, ASSET, {"path": step.name.split("/")})
            materializations = data["assetOrError"].get("assetMaterializations") or []
            dimensions = (data["assetNodeOrError"] or {}).get("partitionKeysByDimension") or []
            if not materializations and not dimensions:
                missing.append(step.name)
            if step.stage.name == "comparison" and materializations:
                first = [e["label"] for e in materializations[0]["metadataEntries"]][:5]
                print(f"  {step.name}: first metadata entries {first}")
            if step.partitioning == "ladder":
                named = {d["name"]: len(d["partitionKeys"]) for d in dimensions}
                print(f"  {step.name}: partition dimensions {named}")
        print(f"  assets never materialised: {missing or 'none'}")
        return 1 if missing else 0
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
