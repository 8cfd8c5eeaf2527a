"""Mixture of experts: nano's attention with 4 SwiGLU experts per layer, each token through one, at nano's
active FLOPs (the budget counts active parameters): 4x the MLP weights for the same compute per token."""

from marin_pipelines.scaling.speedrun import Submission
from marin_pipelines.train.model import MODEL_SIZES

SUBMISSION = Submission(
    name="nano_moe",
    author="marin-pipelines",
    description="nano (4 x 64), 4 experts top-1 (capacity 1.25, bias balancing), AdamW 3e-3, batch 8 x 128",
    model={**MODEL_SIZES["nano"], "moe": {"experts": 4, "top_k": 1}},
    train=dict(batch_size=8, learning_rate=3e-3),
    budgets=[1e11],
)
