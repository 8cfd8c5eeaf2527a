"""The baseline: the nano preset with the demo's optimiser, at three budgets to show its slope."""

from marin_pipelines.scaling.speedrun import Submission
from marin_pipelines.train.model import MODEL_SIZES

SUBMISSION = Submission(
    name="nano_baseline",
    author="marin-pipelines",
    description="nano (4 x 64), AdamW 3e-3, cosine, batch 8 x 128",
    model=MODEL_SIZES["nano"],
    train=dict(batch_size=8, learning_rate=3e-3),
    budgets=[5e10, 1e11, 2e11],
)
