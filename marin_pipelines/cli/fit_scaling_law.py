"""`marin-pipelines fit-scaling-law --runs RUNS.csv [--predict N,D ...]`: the fit as one JSON object."""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path
from typing import Any

from marin_pipelines.cli import print_json

COLUMNS = ("params", "tokens", "loss")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fit-scaling-law",
        help="fit L = E + A/N^alpha + B/D^beta to runs (log-linear for small ladders), with intervals",
    )
    parser.add_argument("--runs", type=Path, required=True, help="CSV with columns params, tokens, loss")
    parser.add_argument(
        "--predict", action="append", default=[], metavar="PARAMS,TOKENS", help="predict the loss here"
    )
    parser.add_argument("--bootstrap", type=int, default=100, help="resamples for the intervals")
    parser.add_argument("--seed", type=int, default=0, help="seeds the bootstrap")
    parser.set_defaults(run=lambda args: fit_runs(args.runs, args.predict, args.bootstrap, args.seed))


def read_runs(path: Path) -> list[dict[str, float]]:
    """The CSV's rows as numbers; a missing column or a bad value names the row and column."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing columns {missing}; need {list(COLUMNS)}")
        rows = []
        for line, row in enumerate(reader, start=2):
            try:
                values = {c: float(row[c]) for c in COLUMNS}
            except (TypeError, ValueError):
                raise ValueError(
                    f"{path} line {line}: {dict(row)} is not numeric in {list(COLUMNS)}"
                ) from None
            if not all(math.isfinite(v) and v > 0 for v in values.values()):
                raise ValueError(f"{path} line {line}: params, tokens and loss must be positive")
            rows.append(values)
    return rows


def parse_point(text: str) -> tuple[float, float]:
    try:
        params, tokens = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--predict {text!r}: expected PARAMS,TOKENS, e.g. 1e9,2e10") from None
    return params, tokens


def fit_runs(path: Path, points: list[str], bootstrap: int, seed: int) -> int:
    from marin_pipelines.scaling.fit import fit

    targets = [parse_point(p) for p in points]
    law_fit = fit(read_runs(path), bootstrap=bootstrap, seed=seed)
    fitted = law_fit.as_dict()
    out: dict[str, Any] = {
        "method": fitted["method"],
        "reason": fitted["reason"],
        **{
            name: {"value": fitted["law"][name], "interval": fitted["intervals"][name]}
            for name in law_fit.parameters
        },
        "confidence": fitted["confidence"],
        "bootstrap_samples": fitted["bootstrap_samples"],
        "n_runs": fitted["n_runs"],
        "predictions": [law_fit.predict(n, d) for n, d in targets],
    }
    print_json(out)
    return 0
