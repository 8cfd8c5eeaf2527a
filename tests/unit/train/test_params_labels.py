"""Wherever a person reads a parameter count, it says its base: non-embedding or total with embeddings
(issue 48: "params" meant the total in a run's summary and the non-embedding count in the forecast)."""

from marin_pipelines.train.loss_curve import loss_curve_figure

SUMMARY = {
    "params": 157_856,
    "non_embedding_params": 26_784,
    "tokens_seen": 1_638_400,
    "initial_loss": 10.37,
    "final_loss": 3.42,
}
METRICS = [{"step": s, "loss": 10.0 - s, "skipped": False} for s in range(5)]


def test_the_loss_curve_title_says_which_count_is_which():
    title = loss_curve_figure(METRICS, SUMMARY).axes[0].get_title()
    assert "0.03M params non-embedding (0.16M total)" in title
    assert "1,638,400 tokens" in title


def test_an_older_summary_without_the_non_embedding_count_says_its_count_is_the_total():
    older = {k: v for k, v in SUMMARY.items() if k != "non_embedding_params"}
    title = loss_curve_figure(METRICS, older).axes[0].get_title()
    assert title.startswith("0.16M params total with embeddings,")
