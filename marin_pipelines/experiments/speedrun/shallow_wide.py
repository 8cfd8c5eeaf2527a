"""Two wide layers instead of four narrow ones: fewer sequential steps per token at similar FLOPs."""

from marin_pipelines.scaling.speedrun import Submission

SUBMISSION = Submission(
    name="shallow_wide",
    author="marin-pipelines",
    description="2 x 96 layers, AdamW 5e-3, batch 8 x 128",
    model={"d_model": 96, "n_layers": 2, "n_heads": 6, "n_kv_heads": 3, "d_ff": 256},
    train=dict(batch_size=8, learning_rate=5e-3),
    budgets=[1e11],
)
