"""The IsoFLOP report's table and plots, on a synthetic ladder from a known L(N, D) (no training)."""

from __future__ import annotations

import math
import random
from functools import cache

import numpy as np
import polars as pl
import pytest
from matplotlib.image import imread

from marin_pipelines.scaling import synthetic_ladder
from marin_pipelines.scaling.frontier import Forecast, forecast, seed_spread
from marin_pipelines.scaling.isoflop_report import (
    FIXED_COLUMNS,
    plot_frontier,
    plot_isoflop_curves,
    plot_seed_spread,
    rung_table,
    write_rung_table,
)
from marin_pipelines.scaling.synthetic_ladder import HOFFMANN, optimum

TRUE = HOFFMANN
BUDGETS = tuple(float(b) for b in np.geomspace(1e18, 1e20, 4))
TARGET = 10 * BUDGETS[-1]
PNG = b"\x89PNG\r\n\x1a\n"
EXTRA = ["bpb/stdlib", "d_model", "learning_rate", "n_layers"]  # by name


def sweep(
    budget: float, factors: np.ndarray, seeds: int, noise: float, rng: np.random.Generator
) -> list[dict]:
    """Sizes ``factors`` x the true N*, with the columns a real rung carries beside its loss."""
    runs = synthetic_ladder.sweep(TRUE, budget, optimum(TRUE, budget)[0] * factors, seeds, rng, noise)
    for i, run in enumerate(runs):
        j = i // seeds  # the size's index: the sweep lists each size's seeds together
        run |= {
            "size": f"d{64 * (j + 1)}l{j + 2}",
            "flops": 6 * run["params"] * run["tokens"] * 1.02,  # more than planned: attention, rounding
            "d_model": 64 * (j + 1),
            "n_layers": j + 2,
            "learning_rate": 3e-3,
        }
        if run["seed"] == 0:
            run["bpb/stdlib"] = 1.0 + 0.1 * j  # a downstream metric only some runs have
    return runs


def ladder(seeds: int = 2) -> list[dict]:
    """4 budgets x 5 sizes over a factor 16 around N*, off-centre by 1.25x alternately up and down."""
    rng = np.random.default_rng(0)
    runs = []
    for i, budget in enumerate(BUDGETS):
        runs += sweep(budget, np.geomspace(0.25, 4, 5) * 1.25 ** (-1) ** i, seeds, 0.003, rng)
    return runs


def with_unusable() -> list[dict]:
    """The ladder and a budget whose sweep lies all far below its optimum: its vertex is not bracketed."""
    return ladder() + sweep(3e19, np.array([1 / 64, 1 / 32, 1 / 16, 1 / 8]), 2, 0.0, np.random.default_rng(1))


@cache
def predicted(unusable: bool = False) -> Forecast:
    return forecast(with_unusable() if unusable else ladder(), TARGET, bootstrap=50)


def png_shape(path) -> tuple[int, ...]:
    assert path.read_bytes()[:8] == PNG
    return imread(path).shape


# ---------------------------------------------------------------------------------------------- table


def test_the_table_has_a_row_per_run_fixed_columns_first_sorted():
    runs = ladder()
    shuffled = random.Random(0).sample(runs, len(runs))
    table = rung_table(shuffled)
    assert table.height == len(runs) == 40
    assert table.columns == [*FIXED_COLUMNS, *EXTRA]
    order = list(zip(table["budget"], table["params"], table["seed"], strict=True))
    assert order == sorted(order) != [(r["budget"], r["params"], r["seed"]) for r in shuffled]
    expected = {(r["budget"], r["params"], r["seed"]): {**dict.fromkeys(EXTRA), **r} for r in runs}
    for row in table.iter_rows(named=True):
        assert row == expected[row["budget"], row["params"], row["seed"]]
    assert table["bpb/stdlib"].null_count() == 20  # the seed-1 runs lack it
    assert table.schema["seed"] == pl.Int64 and table.schema["d_model"] == pl.Int64
    assert table.schema["size"] == pl.String and table.schema["loss"] == pl.Float64


def test_the_table_round_trips_through_parquet_whole_or_not_at_all(tmp_path):
    path = tmp_path / "rungs.parquet"
    table = write_rung_table(ladder(), path)
    loaded = pl.read_parquet(path)
    assert loaded.equals(table) and loaded.schema == table.schema
    assert loaded.to_dicts() == rung_table(ladder()).to_dicts()
    with pytest.raises(ValueError, match="'eval'"):
        write_rung_table([*ladder(), {**ladder()[0], "seed": 9, "eval": {"a": 1.0}}], path)
    assert pl.read_parquet(path).equals(table)  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rungs.parquet"]  # no partial file left


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"eval": {"bpb": 1.0}}, r"run 40: 'eval' holds a dict"),
        ({"losses": [3.0, 2.9]}, r"run 40: 'losses' holds a list"),
        ({"size": 3}, r"'size' mixes int and str"),
    ],
)
def test_nested_and_mixed_values_are_refused_naming_the_key(bad, message):
    runs = ladder()
    with pytest.raises(ValueError, match=message):
        rung_table([*runs, {**runs[0], "seed": 9, **bad}])


def test_a_run_without_a_fixed_key_is_refused():
    runs = ladder()
    without = {k: v for k, v in runs[3].items() if k != "flops"}
    with pytest.raises(ValueError, match=r"run 3 lacks \['flops'\]"):
        rung_table([*runs[:3], without])


# ---------------------------------------------------------------------------------------------- plots


@pytest.mark.parametrize("unusable", [False, True])
def test_the_isoflop_curves_are_drawn(tmp_path, unusable: bool):
    result = predicted(unusable)
    left_out = [o for o in result.optima if not o.usable]
    assert len(left_out) == unusable and result.n_budgets == 4
    if unusable:
        assert left_out[0].budget == 3e19 and "lies outside the sizes trained" in left_out[0].problem
    path = tmp_path / "isoflop.png"
    plot_isoflop_curves(with_unusable() if unusable else ladder(), result, path)
    assert png_shape(path) == (550, 1000, 4)


@pytest.mark.parametrize(("unusable", "actual"), [(False, None), (True, 2.4), (False, 2.0)])
def test_the_frontier_is_drawn(tmp_path, unusable: bool, actual: float | None):
    path = tmp_path / "frontier.png"
    plot_frontier(predicted(unusable), path, actual=actual, target_label="d1024l16")
    assert png_shape(path) == (500, 1200, 4)


def test_the_seed_spread_is_the_pooled_std(tmp_path):
    runs = ladder()
    spread = plot_seed_spread(runs, tmp_path / "spread.png")
    assert spread is not None and spread == seed_spread(runs) == predicted(False).seed_spread
    pairs = list(zip(runs[::2], runs[1::2], strict=True))  # a rung's seeds 0 and 1 are neighbours
    assert all((a["params"], a["seed"], b["seed"]) == (b["params"], 0, 1) for a, b in pairs)
    assert spread == pytest.approx(math.sqrt(np.mean([(a["loss"] - b["loss"]) ** 2 / 2 for a, b in pairs])))
    assert png_shape(tmp_path / "spread.png") == (450, 700, 4)


def test_one_seed_a_rung_measures_no_spread(tmp_path):
    assert plot_seed_spread(ladder(seeds=1), tmp_path / "none.png") is None
    assert png_shape(tmp_path / "none.png") == (450, 700, 4)
