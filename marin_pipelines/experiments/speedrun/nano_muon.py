"""Muon: nano_baseline's model and learning rate, with the blocks' matrices stepped by Muon (RMS-matched to
AdamW, so the same learning rate applies)."""

from marin_pipelines.scaling.speedrun import Submission
from marin_pipelines.train.model import MODEL_SIZES

SUBMISSION = Submission(
    name="nano_muon",
    author="marin-pipelines",
    description="nano (4 x 64), Muon on the blocks + AdamW elsewhere, 3e-3, batch 8 x 128",
    model=MODEL_SIZES["nano"],
    train=dict(batch_size=8, learning_rate=3e-3, optimizer="muon"),
    budgets=[1e11],
)
