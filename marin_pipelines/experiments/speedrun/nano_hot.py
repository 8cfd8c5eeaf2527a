"""A hotter learning rate and no weight decay: short runs reward moving fast."""

from marin_pipelines.scaling.speedrun import Submission
from marin_pipelines.train.model import MODEL_SIZES

SUBMISSION = Submission(
    name="nano_hot",
    author="marin-pipelines",
    description="nano (4 x 64), AdamW 1e-2 without weight decay, batch 8 x 128",
    model=MODEL_SIZES["nano"],
    train=dict(batch_size=8, learning_rate=1e-2, weight_decay=0.0),
    budgets=[1e11],
)
