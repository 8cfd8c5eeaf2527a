"""The plain-text summary an experiment run ends with."""

from marin_pipelines.steps import CheckOutcome, check_reason
from marin_pipelines.summary import Outcome, run_line, wrap_up


def test_a_runs_params_are_counted_non_embedding_and_the_total_labelled():
    """The one count shown is non-embedding, as the forecast and the comparison count it; the trainer's
    total is beside it, saying it holds the embeddings."""
    trained = {
        "params": 157_856,
        "non_embedding_params": 26_784,
        "tokens_seen": 606_208,
        "initial_loss": 7.637,
        "final_loss": 3.417,
    }
    line = run_line("qk_norm_warmstart/checkpoint_base", trained, {"loss": 3.389, "bits_per_byte": 2.103})
    assert line == (
        "qk_norm_warmstart/checkpoint_base: 26,784 params non-embedding (157,856 with embeddings), 606,208 "
        "tokens, train loss 7.637 -> 3.417; validation loss 3.389, bits-per-byte 2.103"
    )


def test_the_wrap_up_tells_each_experiment_in_two_lines_and_each_warning_once_with_its_reason():
    """As `make demo` ends: the demo, its ablation and its fine-tuning, the leaderboard, then the checks
    that did not pass; the forecast's ladder check is reported by the demo's run and again by the
    fine-tuning's (which reuses the forecast), and is said once."""
    ladder = CheckOutcome(
        "demo/isoflop_forecast",
        "ladder_informative",
        passed=False,
        blocking=False,
        reason=check_reason({"unigram_loss": 5.91, "warnings": "the frontier's floor is not identified\n"}),
    )
    outcomes = [
        Outcome(
            "demo",
            computed=14,
            reused=21,
            figure="forecast 3.412, 95% [3.390, 3.451], written before the target started; actual 3.420 "
            "(+0.2%), inside the 80% and 95% intervals, 5x past the ladder's largest budget",
            page="demo/isoflop_law",
        ),
        Outcome(
            "zloss_ablation",
            4,
            9,
            "The hypothesis held: zloss_1e_4 same as zloss_0",
            "zloss_ablation/comparison",
        ),
        Outcome(
            "sft_demo",
            0,
            40,
            "The hypothesis held: sft better than base: 1.21 vs 2.87 (-58%)",
            "sft_demo/comparison",
        ),
    ]
    checks = [
        ladder,
        CheckOutcome("demo/checkpoint", "loss_finite_and_falling", passed=True),
        CheckOutcome("sft_demo/eval_sft", "tasks_scored", passed=False, reason="marin_python_doc: no score"),
        ladder,
    ]
    text = wrap_up(outcomes, checks, "leaderboard: 5 evaluated models in the store")
    assert text.splitlines() == [
        "== wrap-up",
        f"demo (14 outputs computed, 21 reused): {outcomes[0].figure}",
        "  http://127.0.0.1:3000/assets/demo/isoflop_law",
        "zloss_ablation (4 outputs computed, 9 reused): The hypothesis held: zloss_1e_4 same as zloss_0",
        "  http://127.0.0.1:3000/assets/zloss_ablation/comparison",
        f"sft_demo (0 outputs computed, 40 reused): {outcomes[2].figure}",
        "  http://127.0.0.1:3000/assets/sft_demo/comparison",
        "leaderboard: 5 evaluated models in the store",
        "WARNING: demo/isoflop_forecast:ladder_informative: the frontier's floor is not identified",
        "FAILED: sft_demo/eval_sft:tasks_scored: marin_python_doc: no score",
    ]


def test_a_checks_reason_is_its_own_else_its_warnings_else_its_figures():
    assert check_reason({"reason": "actual 3.52, outside both intervals", "actual": 3.52}) == (
        "actual 3.52, outside both intervals"
    )
    assert check_reason({"warnings": "floor not identified\n6 of 9 rungs stuck"}) == (
        "floor not identified; 6 of 9 rungs stuck"
    )
    assert check_reason({"docs_in": 10, "docs_out": 9}) == "docs_in 10, docs_out 9"
