"""The plain-text summary an experiment run ends with."""

from marin_pipelines.summary import run_line


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
