import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from marin_pipelines.evals.comparison import (
    NO_HYPOTHESIS,
    Claim,
    Variant,
    _direction,
    compare_variants,
)
from marin_pipelines.experiments.qk_norm_warmstart import qk_norm_warmstart
from marin_pipelines.scaling.seed_noise import MEASURED_SEED_NOISE, SeedNoise
from marin_pipelines.stages.evals import CompareConfig

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def variant(
    root: Path,
    label: str,
    loss: float,
    bpb: float,
    acc: float,
    skipped: tuple[int, ...] = (),
    summary: dict[str, Any] | None = None,
    **evals: Any,
) -> Variant:
    """A training output folder (metrics.jsonl, train.json) and evaluation metadata, as the steps write;
    ``summary`` and ``evals`` replace fields of the training summary and the evaluation."""
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
        **{
            "steps": 8,
            "initial_loss": losses[0],
            "final_loss": loss + 0.5,
            "skipped_updates": len(skipped),
            "tokens_seen": 16384,
            "params": 123_456,
            "non_embedding_params": 45_678,
            "flops": 4e12,
            "wall_seconds": 60.0,
        },
        **(summary or {}),
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
    lines = metadata["markdown"]["comparison"].split("\n\n")[0].splitlines()  # the caption after it
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
        "params, non-embedding",
        "params, non-embedding, a token uses (MoE: active)",
        "params, total with embeddings",
        "training tokens",
        "FLOPs, this run's own",
        "skipped updates",
        "train wall seconds",
    ]
    assert all(len(cells) == 3 for cells in rows.values())
    assert rows["own-data validation loss"] == ["3.2000", "**3.1000**", "3.3000"]
    assert rows["params, non-embedding"] == ["45,678"] * 3
    assert rows["params, total with embeddings"] == ["123,456"] * 3
    assert rows["skipped updates"] == ["1", "0", "0"]
    assert metadata["markdown"]["hypothesis"] == "z-loss stabilises training"
    assert list(metadata) == ["markdown", "best", "metric", "held", "plots"]  # the order the UI shows them
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
    assert not any("**" in cell for cell in rows["FLOPs, this run's own"])  # a quantity, not a score


def test_the_verdict_on_the_hypothesis_metrics_comes_first(ablation, tmp_path):
    """Each variant against the baseline on each metric the hypothesis names, with the difference and
    which way it goes; the first metric decides the best."""
    metadata = compare_variants(ablation, "", tmp_path, metrics=["marin_python_mc/acc", "bpb/main"])
    assert metadata["metric"] == "marin_python_mc/acc" and metadata["best"] == "zloss_1e-3"
    _, accuracy, bpb = metadata["markdown"]["verdict"].split("\n\n")
    assert accuracy.splitlines()[1:] == [
        "- zloss_1e-4 against zloss_0: lower, not judged: 0.3500 vs 0.4000, -0.05 (-12.5%)",
        "- zloss_1e-3 against zloss_0: higher, not judged: 0.4500 vs 0.4000, +0.05 (+12.5%)",
    ]
    assert (
        bpb.splitlines()[1]
        == "- zloss_1e-4 against zloss_0: lower, not judged: 1.8000 vs 1.9000, -0.1 (-5.3%)"
    )


def test_without_metrics_the_own_data_validation_loss_decides(ablation, tmp_path):
    metadata = compare_variants(ablation, "", tmp_path)
    assert metadata["metric"] == "own-data validation loss" and metadata["best"] == "zloss_1e-4"
    assert (
        metadata["markdown"]["verdict"]
        .split("\n\n")[1]
        .startswith("**own-data validation loss** (lower is better")
    )


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
    other = variant(tmp_path, "other", loss=3.1, bpb=1.8, acc=0.5, scores={"bpb/main": 1.8})
    rows = table_rows(compare_variants([base, other], "", tmp_path))
    assert rows["marin_python_mc/acc"] == ["**0.4000**", "-"]


def test_an_arm_whose_flops_are_unknown_is_not_ranked(tmp_path):
    base = variant(tmp_path, "base", loss=3.2, bpb=1.9, acc=0.4)
    other = variant(tmp_path, "other", loss=3.1, bpb=1.8, acc=0.5, summary={"flops": None})
    metadata = compare_variants([base, other], "", tmp_path)
    rows = table_rows(metadata)
    assert rows["FLOPs, this run's own"] == ["4e+12", "-"]
    assert rows["own-data validation loss"] == ["3.2000", "3.1000"]  # no bold: not known to be comparable
    assert metadata["best"].startswith("none: no two arms spent the same FLOPs")


def test_non_finite_numbers_print_and_never_win(tmp_path):
    diverged = variant(tmp_path, "diverged", loss=math.nan, bpb=math.inf, acc=0.4)
    stable = variant(tmp_path, "stable", loss=3.3, bpb=2.0, acc=0.3)
    metadata = compare_variants([diverged, stable], "", tmp_path)
    rows = table_rows(metadata)
    assert rows["own-data validation loss"] == ["nan", "**3.3000**"]
    assert rows["own-data bits-per-byte"] == ["inf", "**2.0000**"]
    assert metadata["best"] == "stable"
    verdict = metadata["markdown"]["verdict"].split("\n\n")[1]
    assert verdict.splitlines()[1] == "- stable against diverged: 3.3000 vs nan, no verdict"


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
        variant(tmp_path, "dense_2e11", loss=3.6, bpb=1.9, acc=0.4, summary={"flops": 2e11}),
        variant(tmp_path, "moe_2e11", loss=3.5, bpb=1.9, acc=0.4, summary={"flops": 2e11}),
        variant(tmp_path, "dense_8e11", loss=3.2, bpb=1.9, acc=0.4, summary={"flops": 8e11}),
        variant(tmp_path, "moe_8e11", loss=3.3, bpb=1.9, acc=0.4, summary={"flops": 8e11}),
    ]
    claims = [Claim("moe_2e11", "better", "dense_2e11"), Claim("moe_8e11", "better", "dense_8e11")]
    metadata = compare_variants(arms, "", tmp_path, claims=claims, tolerance=0.01)
    assert metadata["markdown"]["verdict"].split("\n\n")[1].splitlines()[1:] == [
        "- moe_2e11 against dense_2e11: **better**: 3.5000 vs 3.6000, -0.1 (-2.8%); expected better: held",
        "- moe_8e11 against dense_8e11: **worse**: 3.3000 vs 3.2000, +0.1 (+3.1%); expected better: "
        "did not hold",
    ]
    record = json.loads((tmp_path / "comparison.json").read_text())
    assert record["pairs"] == [["moe_2e11", "dense_2e11"], ["moe_8e11", "dense_8e11"]]
    assert (tmp_path / "loss_vs_baseline.png").read_bytes()[:8] == PNG_SIGNATURE


def test_claims_name_variants_and_metrics_of_the_comparison():
    variants = ["dense_2e11", "moe_2e11", "dense_8e11", "moe_8e11"]
    CompareConfig(variants=variants, claims=[Claim("moe_8e11", "better", "dense_8e11")])
    for fields, error in (
        (
            {"claims": [Claim("moe_8e11", "better", "dense_4e11")]},
            r"\['dense_4e11'\], which are not variants",
        ),
        ({"claims": [Claim("moe_8e11", "same", "moe_8e11")]}, "'moe_8e11' against itself"),
        (
            {"claims": [Claim("moe_8e11", "better", "dense_8e11", metrics=("bpb/main",))]},
            r"metrics \['bpb/main'\], which the comparison is not about",
        ),
        ({"seeds": {"dense_2e11": ["dense_4e11"]}}, r"seeds names \['dense_4e11'\]"),
        ({"seeds": {"dense_2e11": ["moe_2e11"], "dense_8e11": ["moe_2e11"]}}, "seeds of more than one arm"),
        ({"tolerance": 1.5}, "tolerance"),
    ):
        with pytest.raises(ValueError, match=error):
            CompareConfig(variants=variants, **fields)


# qk_norm_warmstart's, read from the experiment so that the tests follow it: what the hypothesis is about,
# then its second clause, within the 1% it states
QK_PLAN = qk_norm_warmstart.step("qk_norm_warmstart/comparison").config
QK_CLAIMS = list(QK_PLAN.claims)


@pytest.fixture
def warm_started(tmp_path: Path) -> list[Variant]:
    """qk_norm_warmstart's arms with its measured losses: a base, and two continuations of it (their own
    FLOPs as many as the base's)."""
    base = variant(tmp_path, "base", loss=3.3886, bpb=2.10, acc=0.44, summary={"flops": 4.004e11})
    on_base = {"flops": 4.004e11, "warm_start": {"dir": str(base.checkpoint_dir), "step": 296}}
    return [
        base,
        variant(tmp_path, "continued", loss=3.1239, bpb=1.94, acc=0.50, summary=on_base),
        variant(tmp_path, "continued_qk_norm", loss=3.1303, bpb=1.94, acc=0.38, summary=on_base),
    ]


def test_the_verdict_answers_the_hypothesis_first(warm_started, tmp_path):
    """The figure the hypothesis is about (with QK-norm against the plain continuation) comes first, then
    its second clause (both against the base), each with whether it held."""
    metadata = compare_variants(
        warm_started, QK_PLAN.hypothesis, tmp_path, QK_PLAN.metrics, QK_CLAIMS, QK_PLAN.tolerance
    )
    head, losses = metadata["markdown"]["verdict"].split("\n\n")
    assert head == (
        "**The hypothesis held**: continued_qk_norm the same as continued: +0.2%, held; continued better "
        "than base: -7.8%, held; continued_qk_norm better than base: -7.6%, held"
    )
    assert losses.splitlines() == [
        "**own-data validation loss** (lower is better; the same within ±1%, the tolerance declared for "
        "the hypothesis):",
        "- continued_qk_norm against continued: **the same**: 3.1303 vs 3.1239, +0.0064 (+0.2%); expected "
        "the same: held",
        "- continued against base: **better**: 3.1239 vs 3.3886, -0.2647 (-7.8%); expected better: held",
        "- continued_qk_norm against base: **better**: 3.1303 vs 3.3886, -0.2583 (-7.6%); expected "
        "better: held",
    ]
    assert metadata["held"] == "held"
    record = json.loads((tmp_path / "comparison.json").read_text())
    assert [(c["variant"], c["against"], c["held"]) for c in record["claims"]] == [
        ("continued_qk_norm", "continued", "held"),
        ("continued", "base", "held"),
        ("continued_qk_norm", "base", "held"),
    ]


def test_a_continuation_shows_its_flops_with_its_bases(warm_started, tmp_path):
    """Own FLOPs and, beside them, the total with the base the run sits on (a base of a base too); the
    continuations are ranked against each other, not against the base that spent half as much."""
    deeper = variant(
        tmp_path,
        "again",
        loss=3.0,
        bpb=1.9,
        acc=0.5,
        summary={"flops": 1e11, "warm_start": {"dir": str(warm_started[1].checkpoint_dir)}},
    )
    metadata = compare_variants([*warm_started, deeper], "", tmp_path)
    rows = table_rows(metadata)
    assert rows["FLOPs, this run's own"] == ["4.004e+11", "4.004e+11", "4.004e+11", "1e+11"]
    assert rows["FLOPs with its warm-start base's"] == ["4.004e+11", "8.008e+11", "8.008e+11", "9.008e+11"]
    assert rows["own-data validation loss"] == ["3.3886", "**3.1239**", "3.1303", "3.0000"]
    assert (
        metadata["best"] == "base alone at 4e+11 FLOPs; continued at 8e+11 FLOPs; again alone at 9e+11 FLOPs"
    )


def test_a_difference_within_the_tolerance_is_the_same(tmp_path):
    """-0.1% is not "better" where the hypothesis allows 1%: it is the same."""
    arms = [
        variant(tmp_path, "dense", loss=3.268, bpb=1.9, acc=0.4),
        variant(tmp_path, "moe", loss=3.264, bpb=1.9, acc=0.4),
    ]
    metadata = compare_variants(arms, "", tmp_path, claims=[Claim("moe", "better", "dense")], tolerance=0.01)
    assert metadata["held"] == "did not hold"
    assert metadata["markdown"]["verdict"].split("\n\n")[1].splitlines()[1] == (
        "- moe against dense: **the same**: 3.2640 vs 3.2680, -0.004 (-0.1%); expected better: did not hold"
    )
    assert metadata["best"] == "moe (dense the same within the tolerance)"


def test_a_claim_that_did_not_hold_is_said_first_with_its_figure(warm_started, tmp_path):
    worse = [*warm_started[:2], variant(tmp_path, "qk", loss=3.20, bpb=1.9, acc=0.4)]
    claims = [Claim("qk", "same", "continued"), Claim("continued", "better", "base")]
    metadata = compare_variants(worse, "", tmp_path, claims=claims, tolerance=0.01)
    assert metadata["held"] == "did not hold"
    assert metadata["markdown"]["verdict"].startswith(
        "**The hypothesis did not hold**: qk the same as continued: +2.4%, did not hold; continued better "
        "than base: -7.8%, held"
    )


def test_without_a_tolerance_or_seeds_the_verdict_cannot_tell_and_says_why(warm_started, tmp_path):
    metadata = compare_variants(warm_started, "", tmp_path, claims=QK_CLAIMS)
    head, losses = metadata["markdown"]["verdict"].split("\n\n")
    assert metadata["held"] == "cannot tell"
    assert head.startswith(
        "**Cannot tell whether the hypothesis held**: continued_qk_norm the same as continued"
    )
    assert head.endswith("(no tolerance: none is declared and no seeds were run to measure the noise)")
    assert losses.splitlines()[1] == (
        "- continued_qk_norm against continued: higher, not judged: 3.1303 vs 3.1239, +0.0064 (+0.2%); "
        "expected the same: cannot tell"
    )


def test_the_seeds_spread_is_the_tolerance_where_none_is_declared(tmp_path):
    """Three seeds of one arm at 3.00, 3.03 and 2.97: a relative spread of 1%, a band of 2 x sqrt 2 x 1%
    = 2.83%, so an arm 1.7% above is the same and one 3.3% above is worse."""
    arms = [
        variant(tmp_path, "a", loss=3.00, bpb=1.9, acc=0.4),
        variant(tmp_path, "a_seed1", loss=3.03, bpb=1.9, acc=0.4),
        variant(tmp_path, "a_seed2", loss=2.97, bpb=1.9, acc=0.4),
        variant(tmp_path, "b", loss=3.05, bpb=1.9, acc=0.4),
        variant(tmp_path, "c", loss=3.10, bpb=1.9, acc=0.4),
    ]
    claims = [Claim("b", "not worse", "a"), Claim("c", "not worse", "a")]
    metadata = compare_variants(arms, "", tmp_path, claims=claims, seeds={"a": ["a_seed1", "a_seed2"]})
    assert metadata["held"] == "did not hold"
    head, losses = metadata["markdown"]["verdict"].split("\n\n")
    band = "the same within ±2.83%, measured: 2 x sqrt 2 x the seeds' relative spread 1.00% (3 runs)"
    assert (  # a band the hypothesis does not state is said beside the answer
        head == "**The hypothesis did not hold**: b no worse than a: +1.7%, held; c no worse than a: +3.3%, "
        f"did not hold ({band})"
    )
    assert band in losses
    record = json.loads((tmp_path / "comparison.json").read_text())
    assert record["tolerances"]["own-data validation loss"]["relative"] == pytest.approx(0.02 * math.sqrt(2))
    assert record["budgets"][0]["variants"] == ["a", "b", "c"]  # the seeds are not arms to rank


def test_the_best_is_ranked_within_each_budget_only(tmp_path):
    """The 8e11 dense run has the lowest loss of all, but it is the best only of the 8e11 arms; the
    table bolds one best per budget."""
    arms = [
        variant(tmp_path, "dense_2e11", loss=3.6, bpb=1.9, acc=0.4, summary={"flops": 2.00e11}),
        variant(tmp_path, "moe_2e11", loss=3.5, bpb=1.9, acc=0.4, summary={"flops": 2.002e11}),
        variant(tmp_path, "dense_8e11", loss=3.2, bpb=1.9, acc=0.4, summary={"flops": 8.0e11}),
        variant(tmp_path, "moe_8e11", loss=3.3, bpb=1.9, acc=0.4, summary={"flops": 8.01e11}),
    ]
    metadata = compare_variants(arms, "", tmp_path)
    assert metadata["best"] == "moe_2e11 at 2e+11 FLOPs; dense_8e11 at 8e+11 FLOPs"
    assert table_rows(metadata)["own-data validation loss"] == [
        "3.6000",
        "**3.5000**",
        "**3.2000**",
        "3.3000",
    ]
    record = json.loads((tmp_path / "comparison.json").read_text())
    assert [(b["variants"], b["best"]) for b in record["budgets"]] == [
        (["dense_2e11", "moe_2e11"], "moe_2e11"),
        (["dense_8e11", "moe_8e11"], "dense_8e11"),
    ]


def test_params_are_counted_non_embedding_and_the_total_labelled(tmp_path):
    """Every params row says its base: non-embedding (all experts, and what a token uses), and the total
    with embeddings; the active count is non-embedding too, not the trainer's total."""
    dense = variant(tmp_path, "dense", loss=3.2, bpb=1.9, acc=0.4, summary={"active_params": 123_456})
    moe = variant(
        tmp_path,
        "moe",
        loss=3.1,
        bpb=1.9,
        acc=0.4,
        summary={"params": 200_000, "non_embedding_params": 122_222, "active_params": 140_000},
    )
    rows = table_rows(compare_variants([dense, moe], "", tmp_path))
    assert rows["params, non-embedding"] == ["45,678", "122,222"]
    assert rows["params, non-embedding, a token uses (MoE: active)"] == ["45,678", "62,222"]
    assert rows["params, total with embeddings"] == ["123,456", "200,000"]


def test_a_tolerance_the_hypothesis_states_must_be_the_declared_one():
    """ "Within 1%" in the hypothesis is the verdict's band: leaving it out, or declaring another, is an
    error naming the value to declare."""
    fields = {
        "variants": ["a", "b"],
        "hypothesis": "b ends within 1% of a",
        "claims": [Claim("b", "same", "a")],
    }
    assert CompareConfig(**fields, tolerance=0.01).tolerance == 0.01
    for tolerance in (None, 0.02):
        with pytest.raises(ValueError, match=r"states within 1%: declare tolerance=0.01"):
            CompareConfig(**fields, tolerance=tolerance)


def test_a_seed_noise_measured_elsewhere_is_the_tolerance_and_the_verdict_says_whence(tmp_path):
    """No band stated, no seeds run: the project's measured noise of a run (0.61%) gives the band seeds would
    (2 x sqrt 2 x 0.61% = 1.73%), and the first line says so and where it was measured: -1.0% is the same,
    -2.0% better."""
    arms = [
        variant(tmp_path, "dense", loss=3.00, bpb=1.9, acc=0.4),
        variant(tmp_path, "moe", loss=2.97, bpb=1.9, acc=0.4),
        variant(tmp_path, "moe_big", loss=2.94, bpb=1.9, acc=0.4),
    ]
    claims = [Claim("moe", "better", "dense"), Claim("moe_big", "better", "dense")]
    metadata = compare_variants(arms, "", tmp_path, claims=claims, noise=MEASURED_SEED_NOISE)
    head = metadata["markdown"]["verdict"].split("\n\n")[0]
    assert metadata["held"] == "did not hold"
    assert head.startswith(
        "**The hypothesis did not hold**: moe better than dense: -1.0%, did not hold; moe_big better than "
        "dense: -2.0%, held (the same within ±1.73%, no band stated and no seeds run: 2 x sqrt 2 x a run's "
        "seed noise 0.61%, measured on scaling_forecast's seeds by bench/seed_spread.py at 8dd6f53)"
    )
    record = json.loads((tmp_path / "comparison.json").read_text())
    assert record["tolerances"]["own-data validation loss"]["relative"] == pytest.approx(
        2 * math.sqrt(2) * 0.0061
    )


def test_a_measured_noise_beside_a_declared_tolerance_is_refused():
    with pytest.raises(ValueError, match="not both"):
        CompareConfig(variants=["a", "b"], tolerance=0.01, noise=SeedNoise(0.01, "a bench"))


def test_every_shipped_comparison_has_a_tolerance():
    """A comparison without a band can only say "cannot tell": each shipped one declares the band its
    hypothesis states, runs seeds, or takes the project's measured seed noise (one constant, which the
    ladder planner uses too)."""
    from marin_pipelines.experiments import corpus_mixture, moe_vs_dense, quality_ablation
    from marin_pipelines.scaling.ladder_planner import DEFAULT_NOISE

    assert MEASURED_SEED_NOISE.relative == DEFAULT_NOISE
    for module, name in (
        (moe_vs_dense, "moe_vs_dense"),
        (quality_ablation, "quality_ablation"),
        (corpus_mixture, "corpus_mixture"),
    ):
        config = getattr(module, name).step(f"{name}/comparison").config
        assert config.tolerance is None and not config.seeds and config.noise == MEASURED_SEED_NOISE, name
    for experiment in _shipped_experiments():
        for step in experiment.all_steps:
            if step.stage.name == "comparison":
                config = step.config
                assert config.tolerance or config.seeds or config.noise, step.name


def _shipped_experiments():
    import importlib
    import pkgutil

    import marin_pipelines.experiments as package
    from marin_pipelines.experiment import Experiment

    for module in pkgutil.iter_modules(package.__path__):
        loaded = importlib.import_module(f"marin_pipelines.experiments.{module.name}")
        yield from (v for v in vars(loaded).values() if isinstance(v, Experiment))
