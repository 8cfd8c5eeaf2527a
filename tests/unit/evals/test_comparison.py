import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from marin_pipelines.evals.comparison import NO_HYPOTHESIS, Variant, _direction, compare_variants

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def variant(
    root: Path,
    label: str,
    loss: float,
    bpb: float,
    acc: float,
    skipped: tuple[int, ...] = (),
    **evals: Any,
) -> Variant:
    """A training output folder (metrics.jsonl, train.json) and evaluation metadata, as the steps write."""
    checkpoint_dir = root / label
    checkpoint_dir.mkdir()
    losses = [loss + 4.4 - 0.5 * step for step in range(8)]
    records = [
        {
            "step": step,
            "loss": value,
            "z_loss": 50.0,
            "grad_norm": 1.0,
            "lr": 1e-4,
            "skipped": step in skipped,
        }
        for step, value in enumerate(losses)
    ]
    (checkpoint_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {
        "steps": 8,
        "initial_loss": losses[0],
        "final_loss": loss + 0.5,
        "skipped_updates": len(skipped),
        "tokens_seen": 16384,
        "params": 123_456,
        "non_embedding_params": 45_678,
        "flops": 4e12,
        "wall_seconds": 60.0,
    }
    (checkpoint_dir / "train.json").write_text(json.dumps({"config": {}, "summary": summary}))
    metadata = {
        "loss": loss,
        "bits_per_byte": bpb,
        "params": 45_678,
        "train_tokens": 16384,
        "flops": 4e12,
        "scores": {
            "bpb/main": bpb,
            "loss/main": loss,
            "marin_python_mc/acc": acc,
            "marin_python_text/word_perplexity": 100 * loss,
        },
    }
    return Variant(label, checkpoint_dir, {**metadata, **evals})


def table_rows(metadata: dict[str, Any]) -> dict[str, list[str]]:
    """The markdown table as {metric: cells}, the direction arrow dropped from the metric name."""
    lines = metadata["markdown"]["comparison"].splitlines()
    rows = {}
    for line in lines[2:]:
        metric, *cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[metric.removesuffix(" ↓").removesuffix(" ↑")] = cells
    return rows


@pytest.fixture
def ablation(tmp_path: Path) -> list[Variant]:
    return [
        variant(tmp_path, "zloss_0", loss=3.2, bpb=1.9, acc=0.40, skipped=(3,)),
        variant(tmp_path, "zloss_1e-4", loss=3.1, bpb=1.8, acc=0.35),
        variant(tmp_path, "zloss_1e-3", loss=3.3, bpb=2.0, acc=0.45),
    ]


def test_table_holds_every_variant_and_metric(ablation, tmp_path):
    metadata = compare_variants(ablation, "z-loss stabilises training", tmp_path)
    header = metadata["markdown"]["comparison"].splitlines()[0]
    assert header == "| metric | zloss_0 | zloss_1e-4 | zloss_1e-3 |"
    rows = table_rows(metadata)
    assert list(rows) == [
        "final training loss",
        "own-data validation loss",
        "own-data bits-per-byte",
        "bpb/main",
        "marin_python_mc/acc",
        "marin_python_text/word_perplexity",
        "params (non-embedding)",
        "params a token uses (MoE: active)",
        "training tokens",
        "FLOPs",
        "skipped updates",
        "train wall seconds",
    ]
    assert all(len(cells) == 3 for cells in rows.values())
    assert rows["own-data validation loss"] == ["3.2000", "**3.1000**", "3.3000"]
    assert rows["params (non-embedding)"] == ["45,678"] * 3
    assert rows["skipped updates"] == ["1", "0", "0"]
    assert metadata["markdown"]["hypothesis"] == "z-loss stabilises training"
    assert list(metadata) == ["markdown", "best", "metric", "plots"]  # the order the UI shows them in
    assert list(metadata["markdown"]) == ["verdict", "hypothesis", "comparison"]
    assert metadata["plots"] == {
        "loss_vs_baseline": "loss_vs_baseline.png",
        "loss_curves": "loss_curves.png",
        "scores": "scores.png",
    }


def test_bold_marks_the_best_in_each_direction(ablation, tmp_path):
    rows = table_rows(compare_variants(ablation, "", tmp_path))
    assert rows["final training loss"] == ["3.7000", "**3.6000**", "3.8000"]  # lower is better
    assert rows["bpb/main"] == ["1.9000", "**1.8000**", "2.0000"]
    assert rows["marin_python_mc/acc"] == ["0.4000", "0.3500", "**0.4500**"]  # higher is better
    assert rows["marin_python_text/word_perplexity"] == ["320.0", "**310.0**", "330.0"]  # 4 digits
    assert not any("**" in cell for cell in rows["FLOPs"])  # a quantity, not a score


def test_the_verdict_on_the_hypothesis_metrics_comes_first(ablation, tmp_path):
    """Each variant against the baseline on each metric the hypothesis names, with the difference and
    which way it goes; the first metric decides the best."""
    metadata = compare_variants(ablation, "", tmp_path, metrics=["marin_python_mc/acc", "bpb/main"])
    assert metadata["metric"] == "marin_python_mc/acc" and metadata["best"] == "zloss_1e-3"
    accuracy, bpb = metadata["markdown"]["verdict"].split("\n\n")
    assert accuracy.splitlines() == [
        "**marin_python_mc/acc** (higher is better), against zloss_0:",
        "- zloss_1e-4 **worse**: 0.3500 vs 0.4000, -0.05 (-12.5%)",
        "- zloss_1e-3 **better**: 0.4500 vs 0.4000, +0.05 (+12.5%)",
    ]
    assert bpb.splitlines()[1] == "- zloss_1e-4 **better**: 1.8000 vs 1.9000, -0.1 (-5.3%)"


def test_without_metrics_the_own_data_validation_loss_decides(ablation, tmp_path):
    metadata = compare_variants(ablation, "", tmp_path)
    assert metadata["metric"] == "own-data validation loss" and metadata["best"] == "zloss_1e-4"
    assert metadata["markdown"]["verdict"].startswith("**own-data validation loss** (lower is better)")


def test_a_metric_the_table_lacks_is_named_with_those_it_has(ablation, tmp_path):
    with pytest.raises(ValueError, match=r"\['chat/nowhere'\] are not scores.*'bpb/main'"):
        compare_variants(ablation, "", tmp_path, metrics=["chat/nowhere"])
    with pytest.raises(ValueError, match=r"\['FLOPs'\] are not scores"):  # a quantity has no better
        compare_variants(ablation, "", tmp_path, metrics=["FLOPs"])


def test_plots_are_real_pngs(ablation, tmp_path):
    metadata = compare_variants(ablation, "", tmp_path)
    for name in metadata["plots"].values():
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 1024


def test_comparison_json_round_trips(ablation, tmp_path):
    metadata = compare_variants(ablation, "  z-loss helps  ", tmp_path)
    record = json.loads((tmp_path / "comparison.json").read_text())
    assert record["hypothesis"] == "z-loss helps"
    for key in ("best", "metric", "markdown", "plots"):
        assert record[key] == metadata[key]
    assert record["variants"] == ["zloss_0", "zloss_1e-4", "zloss_1e-3"]
    assert record["metrics"] == ["own-data validation loss"]
    assert [row["metric"] for row in record["rows"]] == list(table_rows(metadata))
    acc = next(row for row in record["rows"] if row["metric"] == "marin_python_mc/acc")
    assert acc == {
        "metric": "marin_python_mc/acc",
        "better": "higher",
        "values": dict(zip(record["variants"], [0.40, 0.35, 0.45], strict=True)),
    }
    curve = record["loss_curves"]["zloss_0"]
    assert curve["step"] == list(range(8))
    assert curve["loss"] == pytest.approx([7.6 - 0.5 * step for step in range(8)])
    assert curve["skipped_steps"] == [3]
    assert record["loss_curves"]["zloss_1e-4"]["skipped_steps"] == []


def test_a_missing_metric_is_a_dash(tmp_path):
    base = variant(tmp_path, "base", loss=3.2, bpb=1.9, acc=0.4)
    other = variant(tmp_path, "other", loss=3.1, bpb=1.8, acc=0.5, scores={"bpb/main": 1.8}, flops=None)
    rows = table_rows(compare_variants([base, other], "", tmp_path))
    assert rows["marin_python_mc/acc"] == ["**0.4000**", "-"]
    assert rows["FLOPs"] == ["4e+12", "-"]


def test_non_finite_numbers_print_and_never_win(tmp_path):
    diverged = variant(tmp_path, "diverged", loss=math.nan, bpb=math.inf, acc=0.4)
    stable = variant(tmp_path, "stable", loss=3.3, bpb=2.0, acc=0.3)
    metadata = compare_variants([diverged, stable], "", tmp_path)
    rows = table_rows(metadata)
    assert rows["own-data validation loss"] == ["nan", "**3.3000**"]
    assert rows["own-data bits-per-byte"] == ["inf", "**2.0000**"]
    assert metadata["best"] == "stable"
    assert metadata["markdown"]["verdict"].splitlines()[1] == "- stable: 3.3000 vs nan, no verdict"


def test_no_hypothesis_is_said(ablation, tmp_path):
    assert compare_variants(ablation, " \n", tmp_path)["markdown"]["hypothesis"] == NO_HYPOTHESIS


def test_a_comparison_needs_two_variants(ablation, tmp_path):
    with pytest.raises(ValueError, match="at least two"):
        compare_variants(ablation[:1], "", tmp_path)


def test_labels_must_be_unique(ablation, tmp_path):
    twin = Variant("zloss_0", ablation[1].checkpoint_dir, ablation[1].evals)
    with pytest.raises(ValueError, match="unique.*zloss_0"):
        compare_variants([ablation[0], twin], "", tmp_path)


@pytest.mark.parametrize("name", ["metrics.jsonl", "train.json"])
def test_a_missing_training_file_names_variant_and_path(ablation, tmp_path, name):
    path = ablation[1].checkpoint_dir / name
    path.unlink()
    with pytest.raises(FileNotFoundError) as error:
        compare_variants(ablation, "", tmp_path)
    assert "'zloss_1e-4'" in str(error.value) and str(path) in str(error.value)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("metrics.jsonl", '{"step": 0, "loss": 7.6}\n{"step": 1, "lo'),
        ("metrics.jsonl", '{"step": 0}\n'),
        ("metrics.jsonl", ""),
        ("train.json", "{not json"),
        ("train.json", '{"config": {}}'),
    ],
)
def test_an_unreadable_training_file_names_variant_and_path(ablation, tmp_path, name, text):
    path = ablation[2].checkpoint_dir / name
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        compare_variants(ablation, "", tmp_path)
    assert "'zloss_1e-3'" in str(error.value) and str(path) in str(error.value)


def test_a_score_that_is_not_a_number_names_the_variant(ablation, tmp_path):
    broken = Variant("broken", ablation[1].checkpoint_dir, {**ablation[1].evals, "loss": "3.1"})
    with pytest.raises(ValueError, match="'broken'.*own-data validation loss"):
        compare_variants([ablation[0], broken], "", tmp_path)


def test_the_module_does_not_import_dagster():
    code = "import sys, marin_pipelines.evals.comparison; assert 'dagster' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_losses_and_bits_per_byte_are_better_lower_and_accuracies_higher():
    lower = ["chat/demo_chat", "loss/main", "bpb/web", "task/word_perplexity", "task/bits_per_byte"]
    assert [_direction(score) for score in lower] == ["lower"] * len(lower)
    assert _direction("marin_python_mc/acc") == _direction("marin_python_qa/exact_match") == "higher"


def test_each_variant_is_judged_against_its_own_baseline(tmp_path):
    """Two budgets, a dense and an MoE at each: each MoE against the dense run of its budget, never the
    8e11 dense against the 2e11 one."""
    arms = [
        variant(tmp_path, "dense_2e11", loss=3.6, bpb=1.9, acc=0.4),
        variant(tmp_path, "moe_2e11", loss=3.5, bpb=1.9, acc=0.4),
        variant(tmp_path, "dense_8e11", loss=3.2, bpb=1.9, acc=0.4),
        variant(tmp_path, "moe_8e11", loss=3.3, bpb=1.9, acc=0.4),
    ]
    baselines = {"moe_2e11": "dense_2e11", "moe_8e11": "dense_8e11"}
    metadata = compare_variants(arms, "", tmp_path, baselines=baselines)
    assert metadata["markdown"]["verdict"].splitlines() == [
        "**own-data validation loss** (lower is better), against each variant's baseline:",
        "- moe_2e11 (against dense_2e11) **better**: 3.5000 vs 3.6000, -0.1 (-2.8%)",
        "- moe_8e11 (against dense_8e11) **worse**: 3.3000 vs 3.2000, +0.1 (+3.1%)",
    ]
    record = json.loads((tmp_path / "comparison.json").read_text())
    assert record["against"] == baselines
    assert (tmp_path / "loss_vs_baseline.png").read_bytes()[:8] == PNG_SIGNATURE


def test_baselines_name_variants_and_are_not_judged_themselves():
    from marin_pipelines.stages.evals import CompareConfig

    variants = ["dense_2e11", "moe_2e11", "dense_8e11", "moe_8e11"]
    CompareConfig(variants=variants, baselines={"moe_8e11": "dense_8e11"})
    for baselines, error in (
        ({"moe_8e11": "dense_4e11"}, r"\['dense_4e11'\], which are not variants"),
        ({"dense_2e11": "dense_8e11"}, "'dense_2e11' is the first variant"),
        ({"moe_8e11": "dense_8e11", "dense_8e11": "moe_2e11"}, r"\['dense_8e11'\] are judged and baselines"),
    ):
        with pytest.raises(ValueError, match=error):
            CompareConfig(variants=variants, baselines=baselines)
