"""What an asset's page in the UI shows (``dagster_metadata``): the headline and the pictures first, the
large blocks last, numbers rounded for reading while the manifest keeps every digit."""

import json
from pathlib import Path
from typing import Any

import numpy as np

from marin_pipelines.defs.step_assets import dagster_metadata
from marin_pipelines.scaling import synthetic_ladder
from marin_pipelines.scaling.frontier import forecast
from marin_pipelines.scaling.ladder_diagnostics import ladder_diagnostics
from marin_pipelines.stages.scaling import forecast_metadata, isoflop_forecast, prediction_record
from marin_pipelines.stages.train import RUN_HEADLINE, RUN_LABELS, checkpoint
from marin_pipelines.store import Artifact

PNG = b"\x89PNG\r\n\x1a\n"  # enough of one for the page to embed


def artifact(folder: Path, metadata: dict[str, Any], pictures: dict[str, str]) -> Artifact:
    """A stored output with ``metadata`` in its manifest (through JSON, as the store writes it)."""
    for name in pictures.values():
        (folder / name).write_bytes(PNG)
    files = [{"name": name, "bytes": len(PNG)} for name in pictures.values()]
    manifest = {"version": "0123abcd", "files": files, "wall_seconds": 12.345678, "metadata": metadata}
    return Artifact(str(folder), json.loads(json.dumps(manifest)))


def shown_floats(value: Any, name: str = "") -> list[tuple[str, float]]:
    """Every float a page shows, with the name it is shown under, at any depth."""
    value = getattr(value, "value", value)  # a Dagster metadata value: what it holds
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in shown_floats(item, str(key))]
    if isinstance(value, list):
        return [found for item in value for found in shown_floats(item, name)]
    return [(name, value)] if isinstance(value, float) else []


def digits(x: float) -> int:
    """Significant digits ``x`` is written with."""
    return next(n for n in range(1, 18) if float(f"{x:.{n}g}") == x)


def test_the_forecast_page_shows_each_interval_once_and_rounded(tmp_path):
    rng = np.random.default_rng(0)
    runs = synthetic_ladder.ladder(synthetic_ladder.HOFFMANN, [1e18, 2e18, 4e18], rng, sizes=4)
    target = 1e19
    predicted = forecast(runs, target, bootstrap=20, seed=0)
    named = [{"run": f"{r['budget']:g}|{i}", "loss": r["loss"]} for i, r in enumerate(runs)]
    record = {
        "preregistered_at": "2025-01-02T03:04:05.678901+00:00",
        "target": {"budget": target, "flops": target * 1.0123456789, "tokens": 123_456_789, "shape": "d64l4"},
        "prediction": prediction_record(predicted),
        "diagnostics": ladder_diagnostics(named, 3.0123456789, 1.23456789),
        "runs": runs,
    }
    metadata = forecast_metadata(record, predicted, {}, {"frontier": "frontier.png"})
    assert "loss_interval" not in metadata  # it repeated interval_95
    assert metadata["interval_95"] == list(predicted.loss_interval)
    assert digits(metadata["predicted_loss"]) > 4 and digits(metadata["target"]["flops"]) > 3  # kept whole

    page = dagster_metadata(artifact(tmp_path, metadata, metadata["plots"]), False, isoflop_forecast.headline)
    assert list(page)[:6] == [*isoflop_forecast.headline, "frontier"]  # the figures, then the picture
    floats = shown_floats({k: v for k, v in page.items() if k != "wall_seconds"})
    assert len(floats) > 10 and ("flops", 1.01e19) in floats
    for name, x in floats:
        assert digits(x) <= (3 if "flops" in name or name == "budget" else 4), (name, x)
    assert page["wall_seconds"] == 12.3
    trust = page["trust"].value.splitlines()
    assert len(trust) == 6 and all(len(row) <= 40 for row in trust), trust  # whole in the value column
    low, high = predicted.loss_interval
    reach = f"-{100 * (1 - low / predicted.loss):.1f}/+{100 * (high / predicted.loss - 1):.1f}%"
    assert trust[0] == "| | 80% | 95% |" and trust[2].endswith(f"| {reach} |")  # 95%: interval_95's reach


def test_a_runs_page_opens_with_its_figures_and_loss_curve_and_ends_with_its_layout(tmp_path):
    """The trainer's summary as a checkpoint step stores it: its headline figures and the loss curve lead,
    the mesh and the layouts of its segments (large JSON blocks) come after every figure."""
    summary = {
        "steps": 200,
        "resumed_from_step": 0,
        "initial_loss": 6.2383456789,
        "final_loss": 3.4171234567,
        "skipped_updates": 0,
        "tokens_seen": 1_638_400,
        "params": 157_856,
        "active_params": 157_856,
        "non_embedding_params": 26_784,
        "flops_per_token": 160_704,
        "flops": 263_297_433_600,
        "processes": 1,
        "devices": 1,
        "mesh": {"data": 1, "model": 1},
        "layouts": [{"from_step": 0, "devices": 1, "processes": 1, "mesh": {"data": 1, "model": 1}}],
        "hardware": "cpu: cpu",
        "wall_seconds": 41.23456789,
        "tokens_per_s": 40123.456789,
        "peak_flops": 1.0e12,
        "peak_flops_source": "assumed",
        "mfu": 0.0064481234,
        "data_sources": {"main": "/store/demo/tokenized_cache/_/abc"},
        "plots": {"loss_curve": "loss_curve.png"},
    }
    page = dagster_metadata(
        artifact(tmp_path, summary, summary["plots"]), False, checkpoint.headline, checkpoint.labels
    )
    keys = list(page)
    assert checkpoint.headline == RUN_HEADLINE
    # each parameter count under a label that says its base (the manifest keeps the trainer's keys)
    shown = [RUN_LABELS.get(key, key) for key in RUN_HEADLINE]
    assert keys[: len(RUN_HEADLINE) + 1] == [*shown, "loss_curve"]
    assert page["params, non-embedding"] == 26_784 and page["params, total with embeddings"] == 157_856
    assert "params" not in page and "non_embedding_params" not in page
    figures = [k for k in keys if k in summary and not isinstance(summary[k], dict | list)]
    assert max(keys.index(k) for k in figures) < keys.index("mesh") < keys.index("layouts")
    assert keys.index("layouts") < keys.index("path")  # where the output is: last, as before
    assert page["flops"] == 2.63e11 and page["final_loss"] == 3.417 and page["mfu"] == 0.006448
