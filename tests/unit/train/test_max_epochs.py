"""A run that would repeat its text more than ``train.max_epochs`` times is refused before it launches."""

import pytest

from marin_pipelines.stages.train import check_trainable
from marin_pipelines.steps import InputError
from marin_pipelines.store import Artifact
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.train.model import preset
from marin_pipelines.train.train_config import TrainConfig

CACHE = Artifact("/store/cache", {"metadata": {"train_tokens": 129 * 100 + 1}})
MODEL = preset("nano", 512, 128)  # 100 sequences of 128 tokens in the split above (12,901 tokens)


def test_a_run_within_its_epochs_passes_and_one_beyond_is_refused_with_the_tokens_it_needs():
    fits = TrainConfig(steps=50, batch_size=4, warmup_steps=5, max_epochs=2.0)  # 200 sequences: 2 epochs
    check_trainable(CACHE, MixtureConfig(), MODEL, fits)
    over = fits.model_copy(update={"steps": 75})  # 300 sequences: 3 epochs
    with pytest.raises(
        InputError, match=r"'main' 3.00 times, more than train.max_epochs = 2.0.*'main': 19352"
    ):
        check_trainable(CACHE, MixtureConfig(), MODEL, over)
    check_trainable(CACHE, MixtureConfig(), MODEL, over.model_copy(update={"max_epochs": None}))  # no limit
